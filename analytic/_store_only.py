"""Strided dgrad's store-only CTAs between two reads of dy (DESIGN section 3a).

A sub-problem none of whose taps reaches its dx rows (start_r >= R or start_s >= S: a 1x1 filter with
stride 2 has three of four) still has its CTAs: they run no k-step and store their tile of dx (zeros).
The dispatcher hands them out in block order like the others, one round each, so between the reads of
a place's dy rows by two bands of CTA columns lie every store-only CTA of the first band: their stores
pass through the L2. Seed 31 #60 (1x1 stride 2, 384 dx channels in 3 columns of 128, a TITAN Xp with half
its L2): band 0's 96 store-only CTAs store 24.6k lines against 12.3k in the L2 before band 1 reads dy
again, so dy comes from DRAM twice (1.92 x its sectors simulated); the loading CTAs alone run both bands
side by side, in one wave.

`store_only_rereads` follows the dispatcher run by run (`_timeline._fill_run`) with the store-only runs
and without them, and counts the re-reads of a place's dy rows that miss the L2 in each (a read that
starts after the one before it ended meets the lines of the blocks started in between: their stores,
the dy rows the loading ones read, the filters); the difference is what the store-only CTAs add.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit

from ._common import cdiv
from ._geometry import strided_starts
from ._l2 import cliff_params, l2_miss_prob
from ._timeline import _fill_run

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel modules it calls
# into (`_timeline._fill_run`, `_l2.l2_miss_prob`; tests/test_jit_deps.py) changes this file with them
_JIT_DEPS_SHA256 = "12a4572bce8fa2ea"

# places of a sub-problem's grid at which the reads of dy are followed
PLACES = 8
# at most this many grid rows of column bands (later rows repeat the pattern; `_timeline` likewise)
BANDS = 4


@njit(cache=True)
def run_spans(lengths, counts, sms, cps):
    """Each run's first and last start round (rows (first, last)) on DESIGN section 3's dispatcher:
    runs of ``counts`` blocks of ``lengths`` rounds, in order (`_timeline._fill_run`)."""
    nslot = sms * cps
    free = np.zeros(nslot, np.int64)
    last = np.full(nslot, -1, np.int64)
    start = np.zeros(nslot, np.int64)
    count = np.zeros(nslot, np.int64)
    out = np.zeros((lengths.shape[0], 2), np.int64)
    for r in range(lengths.shape[0]):
        if counts[r] <= 0:
            continue
        _fill_run(free, last, start, count, counts[r], lengths[r], sms, cps)
        lo = -1
        hi = -1
        for p in range(nslot):
            if count[p] > 0:
                first = start[p]
                final = start[p] + (count[p] - 1) * lengths[r]
                lo = first if lo < 0 else min(lo, first)
                hi = max(hi, final)
        out[r, 0] = lo
        out[r, 1] = hi
    return out


@njit(cache=True, inline="always")
def _share(s0, s1, lo, hi):
    """The share of events spread uniformly over rounds [s0, s1] (all at s0 where s1 = s0) in (lo, hi]."""
    if s1 > s0:
        return max(0.0, min(hi, s1) - max(lo, s0)) / (s1 - s0)
    return 1.0 if lo < s0 <= hi else 0.0


@njit(cache=True, inline="always")
def _active(s0, s1, length, lo, hi):
    """The mean share of its ``length`` rounds that a block started uniformly in [s0, s1] (at s0 where
    s1 = s0) runs in (lo, hi]: the share of its dy rows it reads there (8 starts averaged)."""
    total = 0.0
    for j in range(8):
        s = s0 + (s1 - s0) * (j + 0.5) / 8.0
        total += max(0.0, min(hi, s + length) - max(lo, s)) / length
    return total / 8.0


@njit(cache=True)
def _missed(spans, lengths, counts, loads, lanes, per_block, tpf, dy_lines, w_lines, band_lines, cap_lines, ways,
            c0, c1):
    """Re-reads of dy that miss the L2, summed over `PLACES` places (a place's share of dy each): the
    reads of place i are the loading runs' blocks of tile i (run position i lanes + lanes / 2, started
    at the run's first start + that share of its start span), a block's dy at its middle k-step (start +
    (length - 1) / 2); a read that comes after the one before it meets, per run (blocks uniform over the
    run's span), the stores of its blocks that store in between (at their last round, start + length - 1)
    and, for loading ones, their dy rows and their band's filter slices in the share of their rounds that
    run in between (at most dy's and w's lines); each run's stores at most its band's dx lines.
    ``per_block`` rows: a block's store lines, its dy lines, the run's filter lines."""
    nrun = spans.shape[0]
    times = np.empty(nrun, np.float64)
    total = 0.0
    cliff = np.array([c0, c1])
    for j in range(PLACES):
        i = (j + 0.5) * tpf / PLACES
        m = 0
        for r in range(nrun):
            if not loads[r] or counts[r] <= 0:
                continue
            pos = (i * lanes[r] + 0.5 * lanes[r]) / max(counts[r], 1)
            t = spans[r, 0] + (spans[r, 1] - spans[r, 0]) * min(1.0, pos) + 0.5 * (lengths[r] - 1)
            times[m] = t
            m += 1
        order = np.argsort(times[:m])
        for k in range(1, m):
            lo = times[order[k - 1]]
            hi = times[order[k]]
            if hi <= lo:
                continue                                  # in step: the co-resident terms' case
            stores = 0.0
            dy = 0.0
            w = 0.0
            for r in range(nrun):
                if counts[r] <= 0:
                    continue
                share = _share(spans[r, 0] + lengths[r] - 1.0, spans[r, 1] + lengths[r] - 1.0, lo, hi)
                stores += min(share * counts[r] * per_block[r, 0], band_lines)
                if loads[r]:
                    share = _active(spans[r, 0], spans[r, 1], lengths[r], lo, hi)
                    dy += share * counts[r] * per_block[r, 1]
                    w += share * per_block[r, 2]
            between = stores + min(dy, dy_lines) + min(w, w_lines)
            total += l2_miss_prob(between / cap_lines, ways, cliff)
    return total / PLACES


def store_only_rereads(layer, kernel, gpu, f, machine, tpf, uniq_dy, cap_lines) -> float:
    """dy sectors that strided dgrad reads from DRAM again because its store-only CTAs' stores lie
    between two reads of a place's dy rows (module docstring): the dispatcher's timeline with the
    store-only runs less that without them; 0 where no sub-problem is store-only."""
    starts = strided_starts(layer)
    if all(nr and ns for *_x, nr, ns in starts):
        return 0.0
    cps, sms = machine[0], gpu.sms
    eb, line = kernel.elem_bytes, gpu.line_bytes
    nblk = cdiv(layer.k, kernel.tile_k)
    tiles_n = cdiv(layer.c, kernel.tile_n)
    width = 1 << kernel.swizzle_log
    dy_lines = cdiv(layer.n * layer.p * layer.q * layer.k * eb, line)
    w_lines = cdiv(layer.params * eb, line)
    rows = []
    for band in range(min(cdiv(tiles_n, width), BANDS)):
        lanes = min(width, tiles_n - band * width)
        cols = min(layer.c - band * width * kernel.tile_n, lanes * kernel.tile_n)
        for _r, _s, _h, _w, nr, ns in starts:
            loads = bool(nr and ns)
            store = kernel.tile_m * cols / lanes * eb / line          # a block's dx lines (bytes packed)
            dy = kernel.tile_m * layer.k * eb / line if loads else 0.0
            w = layer.k * nr * ns * cols * eb / line if loads else 0.0      # the band's filter slices
            rows.append((nblk * nr * ns + 1 if loads else 1, tpf * lanes, loads, lanes, store, dy, w))
    band_lines = float(cdiv(layer.n * layer.h * layer.w * min(layer.c, width * kernel.tile_n) * eb, line))
    c0, c1 = cliff_params(gpu, f)

    def missed(keep_store_only):
        sel = [r for r in rows if r[2] or keep_store_only]
        lengths = np.array([r[0] for r in sel], np.int64)
        counts = np.array([r[1] for r in sel], np.int64)
        spans = run_spans(lengths, counts, sms, cps)
        return _missed(spans, lengths, counts, np.array([r[2] for r in sel], np.bool_),
                       np.array([r[3] for r in sel], np.int64),
                       np.array([r[4:7] for r in sel], np.float64).reshape(-1, 3), float(tpf), float(dy_lines),
                       float(w_lines), band_lines, float(cap_lines), float(gpu.l2_ways), c0, c1)

    return uniq_dy * max(0.0, missed(True) - missed(False))
