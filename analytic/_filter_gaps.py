"""The k-steps at which a CTA reads each line of its filter slice (fprop), and what that leaves between a
line's reads when CTAs of its column run one after the other on an SM (`_reuse.l1_configs`' PREV_B).

A CTA reads filter line l at some of its k k-steps; the next CTA of the column on the SM reads it at the same
ones. The line stays in the L1 from CTA to CTA, and every read of it hits, where it survives the longest
stretch of rounds without a read of it, cyclically: between two of its k-steps in a lifetime, or from its
last k-step e(l) to the next CTA's first f(l), k - 1 - (e(l) - f(l)) rounds (the store round allocates
nothing in the L1), plus the round of the read itself. A line that two filter rows share (rows R S C e bytes
apart, not a multiple of a line) is read at the end of one row's walk and the start of the next one's, and
the next CTA finds it a round later (62 #85, nchw fp16 5x5 C 4: 200-byte filter rows, a 4-k-step lifetime,
95 of a tile's 150 filter lines straddle two rows; the previous wave's slice was found by most first
holders simulated, by none predicted from one lifetime of the SM's lines).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from simcore._jit import njit

from ._memo import memo

__all__ = ["b_line_gaps", "line_gaps", "one_gap"]

# chunks (filter row x k-step) enumerated at most: rows beyond this many k-steps' worth are not walked
# (the pattern of line phases repeats every 128 / gcd(pitch, 128) rows)
_MAX_CHUNKS = 1 << 16
# classes of gaps kept (equal-weight quantiles of the lines' gaps, each at its mean)
_CLASSES = 6


@njit(cache=True)
def _steps(nhwc, C, RS, tk, eb):
    """(k-steps, each k-step's byte offset in a filter row, its bytes): DESIGN section 3's k-step order, nhwc
    channel block outermost, then the filter position; nchw, the row's R S C elements in tile_k chunks.
    Compiled: 20 us of numpy a slice (measured)."""
    if nhwc:
        nblk = -(-C // tk)
        ksteps = RS * nblk
    else:
        ksteps = -(-(C * RS) // tk)
    off = np.empty(ksteps, np.int64)
    size = np.empty(ksteps, np.int64)
    for ks in range(ksteps):
        if nhwc:
            blk, rs = ks // RS, ks % RS
            off[ks] = rs * C * eb + blk * tk * eb
            size[ks] = min(tk, C - blk * tk) * eb
        else:
            off[ks] = ks * tk * eb
            size[ks] = min(tk, C * RS - ks * tk) * eb
    return ksteps, off, size


@njit(cache=True)
def _gap_counts(rows, pitch, ksteps, off, size, line):
    """How many of the lines that filter rows 0 .. rows - 1 read have each longest absence 0 .. k - 1
    (`line_gaps`), every (row, k-step) chunk enumerated (a chunk spans at most two lines: tile_k e <= 128
    bytes). K-step outermost, so each line meets its reads in k-step order. Compiled: a 512-channel 3x3
    fp32 slice's base block 0.9 -> 0.05 ms, np.unique of the (line, k-step) pairs having been 40 % of an
    fprop prediction's own time (bench_analytic's fprop workload, cProfile)."""
    nlines = 0
    for ks in range(ksteps):
        nlines = max(nlines, ((rows - 1) * pitch + off[ks] + size[ks] - 1) // line + 1)
    first = np.full(nlines, -1, np.int64)
    last = np.full(nlines, -1, np.int64)
    inner = np.zeros(nlines, np.int64)            # longest run of k-steps between two reads in a lifetime
    for ks in range(ksteps):
        for row in range(rows):
            lo = row * pitch + off[ks]
            for ln in range(lo // line, (lo + size[ks] - 1) // line + 1):
                if last[ln] < 0:
                    first[ln] = ks
                elif last[ln] != ks:
                    inner[ln] = max(inner[ln], ks - last[ln] - 1)
                last[ln] = ks
    counts = np.zeros(ksteps, np.int64)
    for ln in range(nlines):
        if last[ln] >= 0:
            counts[max(ksteps - 1 - (last[ln] - first[ln]), inner[ln])] += 1
    return counts


def _counts(layout, C, R, S, K, tn, tk, eb, line) -> np.ndarray:
    """`line_gaps` as counts: how many lines have each longest absence 0 .. k - 1.

    Rows p = line / gcd(pitch, line) apart start at the same place in a line, so past the rows near either
    end every p more rows add the same lines: the rows are counted directly up to a few periods and the
    rest as whole periods (a 512-channel 3x3 fp32 slice of 128 rows: 14 ms enumerated, 0.9 ms so; the same gaps on 3,000 random
    slices)."""
    RS = R * S
    pitch = RS * C * eb
    ksteps, off, size = _steps(layout == "nhwc", C, RS, tk, eb)
    rows = max(1, min(tn, K, _MAX_CHUNKS // max(ksteps, 1)))
    period = line // math.gcd(pitch, line)
    head = period + 2 * -(-line // pitch) + 2           # rows whose lines the two ends do not reach past
    if rows <= head + period:
        return _gap_counts(rows, pitch, ksteps, off, size, line)
    base = head + (rows - head) % period
    counts = _gap_counts(base, pitch, ksteps, off, size, line)
    more = _gap_counts(base + period, pitch, ksteps, off, size, line) - counts
    return counts + (rows - base) // period * more


def line_gaps(layout, C, R, S, K, tn, tk, eb, line) -> np.ndarray:
    """fprop: per filter line a CTA's slice reads (its first ``tn`` filters, at most K, of R S C elements;
    a block of rows where the slice would take more than `_MAX_CHUNKS` chunks), the longest stretch of
    k-steps without a read of it, cyclically over CTA after CTA: between two of its k-steps in a lifetime,
    or from its last read to the next CTA's first (k - 1 - (last - first)). Sorted ascending."""
    counts = _counts(layout, C, R, S, K, tn, tk, eb, line)
    return np.repeat(np.arange(counts.shape[0]), counts)


@njit(cache=True)
def _count_classes(counts, nclass):
    """`np.array_split` of the sorted gaps that ``counts`` tallies into min(``nclass``, lines) parts (the
    first lines % parts one longer), each part's mean and share of the lines, from the tally itself (the
    gaps are integers, so each part's sum is exact, as numpy's mean of the part is): 100-170 us of numpy
    splits and means a slice -> a few us (fprop's 68 slices of bench_analytic's workload a pass)."""
    n = 0
    for c in counts:
        n += c
    parts = min(nclass, n)
    out = np.zeros((2, parts), np.float64)
    small, extra = n // parts, n % parts
    gap, left = 0, counts[0]
    for i in range(parts):
        size = small + 1 if i < extra else small
        total = 0.0
        need = size
        while need > 0:
            while left == 0:
                gap += 1
                left = counts[gap]
            take = min(need, left)
            total += float(gap) * take
            left -= take
            need -= take
        out[0, i] = total / size
        out[1, i] = size / n
    return out


@memo()
def b_line_gaps(layout, C, R, S, K, tn, tk, eb, line) -> np.ndarray:
    """`line_gaps` in at most `_CLASSES` classes of lines (equal-count quantiles, each at its mean): a 2 x n
    array of (k-steps without a read of the line, share of the slice's lines)."""
    out = _count_classes(_counts(layout, C, R, S, K, tn, tk, eb, line), _CLASSES)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=None)
def one_gap(ksteps) -> np.ndarray:
    """Ops whose filter k-steps are not enumerated (dgrad, wgrad): one class, every line k - 1 rounds apart
    (the lifetime less a round), in `b_line_gaps`' form."""
    out = np.array([[ksteps - 1.0], [1.0]], np.float64)
    out.setflags(write=False)
    return out
