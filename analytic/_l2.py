"""The L2 side of the model (Numba): the LRU cliff of a set-associative, hashed L2, and the
re-fetch misses of tiles that later waves read again (MODEL.md section 3).

**Cliff.** A line reused after F distinct other lines were touched survives in a fully associative
LRU cache of C lines iff F < C. In the L2, lines are spread over S = slices x sets sets of W ways
by the slice hash and the set index; the reused line is evicted iff W or more of the F lines fall
in its set. With the F lines spread at random that count is Binomial(F, 1/S) ~ Poisson(F / S), so

    P(miss) = P(Poisson(lambda) >= W),  lambda = W x (F / C) / capacity

(``capacity``: the fraction of the L2 that LRU keeps useful, ``l2_capacity``; normal approximation
with continuity correction). The cliff is as sharp as the associativity makes it: 20-24-way slices
(h100, v100) give a steeper one than 16-way (a100), and a hypothetical L2 with few ways a soft one.

**Spread.** How evenly the slice hash and the set index spread contiguous lines over the sets decides the
cliff's width. The lines per set of a window holding x L2s scatter around ways·x with variance s²·ways·x
+ D·ways·x² (`cliff_params` = (s, D)): s = ``l2_cliff_spread``, the residual (fitted), and D the index of
dispersion (variance / mean) of the lines per (slice, set) when one L2's worth of contiguous lines is
mapped by the GPU's own functions (DESIGN section 4), a deterministic scatter that grows with the window
(x², where a random one would grow with x). With a power-of-two slice count the xor hash is a bijection
given the set (D = 0: v100, p100, the cliff is a step); with 160 or 80 slices the slice (h mod slices)
and the set (of line // slices) are not independent and the lines per set scatter (a100 D = 0.51, h100
0.35, titanxp 0.58). Measured by sweeping F contiguous lines twice through the simulated L2 (second
sweep's miss fraction at F / L2 lines = 0.6, 0.7, 0.85, 1.0, 1.2): v100 0 / 0 / 0 / 0 / 1 (0.49 at 1.02),
a100 0 / 0.031 / 0.19 / 0.50 / 0.84, h100 0.10 at 0.85, 0.48 / 0.91. No width is fitted per GPU: the
residual factor is shared, the dispersion computed from the geometry, hypothetical GPUs included.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from simcore._jit import njit

__all__ = ["l2_miss_prob", "l2_miss_window", "pattern_cliff", "blocks_cliff", "refetch_misses", "banded_refetch_misses",
           "spread_refetch_misses", "tile_refetch_misses", "footprint", "swept_rereads", "cliff_params",
           "hash_dispersion", "blocks_dispersion", "lines_cliff", "NO_EXCESS", "NO_TABLE"]


@functools.lru_cache(maxsize=64)
def hash_dispersion(slices: int, sets: int, ways: int, index: str) -> float:
    """Variance / mean of the lines per (slice, set) when lines 0 .. slices x sets x ways - 1 (one
    L2's worth, contiguous) are mapped by the simulator's slice and set functions (DESIGN section 4:
    slice = h mod slices, h the xor-folded line for ``index`` "xor"; set = the slice's index function
    of line // slices). 0 for an even spread, 1 for lines dropped at random. Numpy, once per geometry
    (a100: 327,680 lines, a few ms)."""
    lines = np.arange(slices * sets * ways, dtype=np.int64)
    counts = np.bincount(_set_ids(lines, slices, sets, index), minlength=slices * sets)
    return float(counts.var() / counts.mean())


def _set_ids(lines, slices, sets, index):
    """slice x sets + set of each line (DESIGN section 4; numpy)."""
    q = lines // slices
    if index == "xor":
        sl = (lines ^ (lines >> 7) ^ (lines >> 14)) % slices
        bits = sets.bit_length() - 1
        st = (q ^ (q >> bits) ^ (q >> (2 * bits))) & (sets - 1)
    else:
        sl = lines % slices
        st = q & (sets - 1) if sets & (sets - 1) == 0 else q % sets
    return sl * sets + st


#: windows of the strided pattern tabulated by `pattern_cliff`, in useful L2 capacities
PATTERN_X_MAX = 1.5
PATTERN_N = 61
PATTERN_X = np.linspace(0.0, PATTERN_X_MAX, PATTERN_N)


@functools.lru_cache(maxsize=1024)
def pattern_cliff(slices: int, sets: int, ways: int, index: str, capacity: float, pitch: int, width: int,
                  line: int):
    """P(miss) of a reuse whose LRU window holds x useful L2 capacities (``PATTERN_X``) of lines laid
    out as A's rows lay them: ``width`` bytes every ``pitch`` bytes (one channel block of consecutive
    pixels, nhwc). Where the rows skip lines (a block narrower than a pixel of several lines), the
    window reaches every k-th line only, and the GPU's slice and set functions spread such lines far
    less evenly than contiguous ones (a100, lines 4 apart: 18 % of a window of half the L2 falls in
    overfull sets, contiguous lines none): counted exactly, a line misses when its set holds more than
    ``ways`` of the window's lines, over the window's prefixes in address order. None where the rows'
    lines are contiguous (`l2_miss_prob`'s cliff holds). Numpy, memoized per geometry and pattern
    (a100, h100: 1.5 L2s of lines, about 15 ms)."""
    if pitch <= line or width >= pitch:
        return None
    return blocks_cliff(slices, sets, ways, index, capacity, pitch, ((0, width),), line)


@functools.lru_cache(maxsize=1024)
def blocks_cliff(slices: int, sets: int, ways: int, index: str, capacity: float, pitch: int, blocks: tuple,
                 line: int):
    """`pattern_cliff` of several blocks in each pixel: ``blocks`` ((first byte, width), ...) every ``pitch``
    bytes (the channel windows of several CTA columns, grouped fprop). None where the pixels' lines are all
    touched (`l2_miss_prob`'s cliff holds)."""
    if pitch <= line:
        return None
    cap = slices * sets * ways * capacity
    step, residues = _block_residues(pitch, blocks, line)
    if len(residues) == step:
        return None                                  # every line: contiguous after all
    return _residue_cliff(slices, sets, ways, index, cap, step, residues)


def _block_residues(pitch, blocks, line):
    """(step, residues): the rows' lines repeat every `period` rows, ``step`` lines on; the residues (mod
    step) one period of ``blocks`` every ``pitch`` bytes touches, ascending."""
    period = line // math.gcd(pitch, line)
    step = period * pitch // line
    return step, tuple(sorted({x % step for i in range(period) for first, width in blocks
                               for x in range((i * pitch + first) // line,
                                              (i * pitch + first + width - 1) // line + 1)}))


def pattern_lines(step, residues, count, first=0):
    """The first ``count`` lines j·step + r + ``first`` (r in ``residues``, ascending), j = 0, 1, ..."""
    reps = count // len(residues) + 1
    return (np.arange(reps, dtype=np.int64)[:, None] * step
            + np.array(residues, np.int64)[None, :]).ravel()[:count] + first


@functools.lru_cache(maxsize=1024)
def blocks_dispersion(slices: int, sets: int, ways: int, index: str, pitch: int, blocks: tuple, line: int) -> float:
    """`hash_dispersion` of lines laid out as ``blocks`` ((first byte, width), ...) every ``pitch`` bytes
    (the pixels a strided 1x1 filter reads, nhwc): one L2's worth of such lines mapped by the slice and set
    functions. Where the blocks skip lines the sets fill far less evenly than with contiguous lines (a100,
    8 lines of every 16: D = 3.44, contiguous 0.51; p100 16.0, contiguous 0). The contiguous D where
    the blocks touch every line."""
    if pitch <= line:
        return hash_dispersion(slices, sets, ways, index)
    step, residues = _block_residues(pitch, blocks, line)
    if len(residues) == step:
        return hash_dispersion(slices, sets, ways, index)
    n = slices * sets * ways
    lines = pattern_lines(step, residues, n)
    counts = np.bincount(_set_ids(lines, slices, sets, index), minlength=slices * sets)
    return float(counts.var() / counts.mean())


@functools.lru_cache(maxsize=256)
def _residue_cliff(slices, sets, ways, index, cap, step, residues):
    """`pattern_cliff` of the lines j·step + r (r in ``residues``), ascending, for a window of useful
    L2 capacity ``cap`` lines (patterns of other pitches and widths that touch the same lines share it)."""
    return lines_cliff(slices, sets, ways, index, cap, pattern_lines(step, residues, int(PATTERN_X[-1] * cap) + 1))


def lines_cliff(slices, sets, ways, index, cap, lines):
    """P(miss) at each ``PATTERN_X`` of a window of the first x ``cap`` of ``lines`` (line addresses, distinct, in
    the order the window takes them): a line misses when its set holds more than ``ways`` of the window's lines.
    Windows longer than ``lines`` take them all. Numpy."""
    f = np.minimum(np.maximum(1, (PATTERN_X * cap).astype(np.int64)), lines.shape[0])
    sid = _set_ids(lines, slices, sets, index)
    # the window's lines per set, grown prefix by prefix; a line misses when its set holds more than
    # `ways` of them
    counts = np.zeros(slices * sets, np.int64)
    miss = np.zeros(f.shape[0], np.float64)
    done = 0
    for j in range(1, f.shape[0]):
        if f[j] > done:
            counts += np.bincount(sid[done:f[j]], minlength=counts.shape[0])
            done = f[j]
        miss[j] = counts[counts > ways].sum() / f[j]
    return miss


#: `l2_miss_window`'s ``tab`` where the window has no table of its own: the GPU's cliff (`l2_miss_prob`)
NO_TABLE = np.zeros(0, np.float64)


@njit(cache=True)
def l2_miss_window(x, ways, cliff, tab):
    """`l2_miss_prob`, or where ``tab`` (`pattern_cliff`, length > 1) holds the window's own
    pattern, its tabulated P(miss) at x (linear between the points; 1 beyond the last)."""
    n = tab.shape[0]
    if n < 2:
        return l2_miss_prob(x, ways, cliff)
    if x <= 0.0:
        return 0.0
    step = PATTERN_X_MAX / (n - 1)
    pos = x / step
    i = int(pos)
    if i >= n - 1:
        return max(tab[n - 1], min(1.0, l2_miss_prob(x, ways, cliff)))
    frac = pos - i
    return tab[i] * (1.0 - frac) + tab[i + 1] * frac


def cliff_params(gpu, factors) -> tuple:
    """``gpu``'s L2 cliff for `l2_miss_prob`: (residual spread ``l2_cliff_spread``, the hash's
    dispersion D) (module docstring)."""
    return (float(factors.l2_cliff_spread),
            hash_dispersion(gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index))


#: the re-read line's own place among its set's share of the window (see `l2_miss_prob`)
OWN_PLACE = 1.0


@njit(cache=True)
def l2_miss_prob(x, ways, cliff):
    """P(miss) of a reuse whose LRU window holds x (in units of the useful L2 capacity) distinct
    other lines, in an L2 of ``ways``-way sets: P(count >= ways), the count ways·x − κ on average, with
    variance s²·ways·x + D·ways·x² for ``cliff`` = (s, D) (`cliff_params`; normal approximation with
    continuity correction). κ = `OWN_PLACE` − s² − D·x: where the window spreads evenly the re-read line
    is one of its set's share, so the set holds one fewer of the others; a scattered spread puts a line
    in a fuller set more often, by the spread's variance / mean (lines dropped at random: κ = 0)."""
    if x <= 0.0:
        return 0.0
    lam = ways * x
    spread = cliff[0] * cliff[0]
    num = ways - 0.5 + OWN_PLACE - spread - cliff[1] * x - lam
    den = math.sqrt(spread * lam + cliff[1] * lam * x)
    if den <= 0.0:                  # a window so small the spread underflows (x of 1e-300 and below): the step
        return 0.0 if num > 0.0 else 1.0
    return 0.5 * math.erfc(num / den / math.sqrt(2.0))


@njit(cache=True)
def footprint(g, f1, fnew):
    """Distinct lines touched in a window of g waves: one wave's lines f1, plus fnew for each
    further wave (lines of the tiles it does not share with the wave before)."""
    return f1 + (g - 1) * fnew


# `refetch_misses`' ``excess`` where no tile of a re-read window is counted twice (`_wave_windows`)
NO_EXCESS = np.zeros(0, np.float64)


@njit(cache=True)
def refetch_misses(hist, volume, f1, fnew, cap_lines, ways, cliff, excess, tab):
    """Sum over gaps g of hist[g] x volume x P(miss | footprint of g waves), less ``excess[g]`` lines: those
    of the tiles the window holds more than once (`_wave_windows.window_excess`; an empty array: none)."""
    total = 0.0
    for g in range(1, hist.shape[0]):
        if hist[g] == 0.0:
            continue
        lines = footprint(g, f1, fnew)
        if excess.shape[0] > g:
            lines = max(0.0, lines - excess[g])
        total += hist[g] * volume * l2_miss_window(lines / cap_lines, ways, cliff, tab)
    return total


# places of a re-read in the grid's last band of columns at which its footprint is judged
BAND_SAMPLES = 8


@njit(cache=True)
def banded_refetch_misses(hist, volume, f1, fnew, df, share_last, crossing, cap_lines, ways, cliff, excess, tab):
    """`refetch_misses` where the grid's last band of tile_n columns stores ``df`` lines a wave more
    than a full band (``f1``, ``fnew``: a full band's waves; a partial last column stores fewer). A
    share ``share_last`` of the re-reads belongs to the last band. ``crossing``: a re-read there
    crosses into it (a tile_m read in the band before, read again in the last one), so it meets the
    band before's CTAs after the tile and the last band's before it: at place u of the band the
    footprint is footprint(g, f1 + u df, fnew + u df), judged at BAND_SAMPLES places (the cliff is
    not linear). Else (B slices re-read by later waves of one band) it meets the last band's waves.
    ``excess``: `refetch_misses`'."""
    if df == 0.0 or share_last == 0.0:
        return refetch_misses(hist, volume, f1, fnew, cap_lines, ways, cliff, excess, tab)
    total = (1.0 - share_last) * refetch_misses(hist, volume, f1, fnew, cap_lines, ways, cliff, excess, tab)
    if not crossing:
        return total + share_last * refetch_misses(hist, volume, f1 + df, max(0.0, fnew + df), cap_lines, ways,
                                                   cliff, excess, tab)
    acc = 0.0
    for i in range(BAND_SAMPLES):
        u = (i + 0.5) / BAND_SAMPLES
        acc += refetch_misses(hist, volume, f1 + u * df, max(0.0, fnew + u * df), cap_lines, ways, cliff,
                              excess, tab)
    return total + share_last * acc / BAND_SAMPLES


# places of a line's first read between its two touches by the earlier CTA (`spread_refetch_misses`)
SPREAD_SAMPLES = 8


@njit(cache=True)
def spread_refetch_misses(hist, volume, f1, fnew, df, share_last, crossing, cap_lines, ways, cliff, shrink,
                          excess, tab):
    """`banded_refetch_misses` of a re-read whose line the earlier CTA touched last up to ``shrink`` lines
    of its wave's loads after the place the later CTA reads it first (a line of n channel blocks: its
    other blocks, (n - 1) blocks of R S k-steps later), the place uniform: the footprint f1 - u shrink at
    `SPREAD_SAMPLES` places."""
    if shrink <= 0.0:
        return banded_refetch_misses(hist, volume, f1, fnew, df, share_last, crossing, cap_lines, ways, cliff,
                                     excess, tab)
    acc = 0.0
    for i in range(SPREAD_SAMPLES):
        u = (i + 0.5) / SPREAD_SAMPLES
        acc += banded_refetch_misses(hist, volume, max(0.0, f1 - u * shrink), fnew, df, share_last, crossing,
                                     cap_lines, ways, cliff, excess, tab)
    return acc / SPREAD_SAMPLES


@njit(cache=True)
def tile_refetch_misses(core_in, core_last, halo_in, halo_last, core, bnd, f_in, f_last, fnew, df, share_a,
                        cap_lines, ways, cliff, shrink, excess, tab):
    """`model._tile_refetches`' four sums in one call: the core rows' and the halo rows' re-reads by the
    full waves (at ``f_in``) and by the partial last wave (at ``f_last``), each `spread_refetch_misses`
    (``excess``: `refetch_misses`')."""
    out = 0.0
    if core > 0.0:
        out += spread_refetch_misses(core_in, core, f_in, fnew, df, share_a, True, cap_lines, ways, cliff, shrink,
                                     excess, tab)
        out += spread_refetch_misses(core_last, core, f_last, fnew, df, share_a, True, cap_lines, ways, cliff,
                                     shrink, excess, tab)
    if bnd > 0.0:
        out += spread_refetch_misses(halo_in, bnd, f_in, fnew, df, share_a, True, cap_lines, ways, cliff, shrink,
                                     excess, tab)
        out += spread_refetch_misses(halo_last, bnd, f_last, fnew, df, share_a, True, cap_lines, ways, cliff,
                                     shrink, excess, tab)
    return out


@njit(cache=True)
def swept_rereads(taps, nblk, lines, more, samples, cap_lines, ways, cliff, volume):
    """``volume`` x the mean L2 miss probability, summed over consecutive pairs (prev, cur) of the
    ascending ``taps``, of a line read at block k0 T_prev / T_max and again at k0 T_cur / T_1 (k0 at
    ``samples`` points over the ``nblk`` blocks; the blocks swept between, capped at ``nblk`` unless
    ``more``, touch their share of ``lines``): strided dgrad's co-resident sub-problems
    (`analytic.model._coresident_rereads`)."""
    t1 = taps[0]
    tmax = taps[taps.shape[0] - 1]
    reread = 0.0
    for j in range(1, taps.shape[0]):
        prev = taps[j - 1]
        cur = taps[j]
        miss = 0.0
        for i in range(samples):
            k0 = (i + 0.5) * nblk / samples
            hi = k0 * cur / t1
            if not more:
                hi = min(hi, float(nblk))
            blocks = max(0.0, hi - k0 * prev / tmax)
            gap = lines * min(1.0, blocks / nblk)            # no more distinct lines than dy and w hold
            miss += l2_miss_prob(gap / cap_lines, ways, cliff)
        reread += volume * miss / samples
    return reread
