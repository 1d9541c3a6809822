"""The tiles a later wave's re-read window holds more than once (Numba; MODEL.md section 3, "Re-fetch
windows").

A tile_m re-read g waves after its last read meets the lines the grid touched in between, which the model
counts as g waves' worth: one wave's lines and g - 1 times the lines of the tiles a wave does not share with
the wave before (`_l2.footprint`). That count takes every tile of a wave two or more waves back as new. Where
the grid's walk comes back to a tile inside the window, its lines are in the window once, not twice: a column
of 320 tile_m re-read after 2.86 waves of 112 CTAs (the CTAs of one column and the next) holds 320 distinct
tile_m in a window of three waves, not 336 (seed 6 #6: the re-reads' windows replayed at 0.95-1.00 of the L2,
the model's at 1.03).

`window_excess` counts, for each re-read gap, the tiles of its window that the footprint counts beyond the
first: summed over the window's waves their distinct tiles, less the tiles each shares with the wave before,
less the window's distinct tiles, all of them exact over valid block ranges (`range_tiles`), averaged over
the re-reads of the sampled waves of each gap (per re-read of A's tiles and of B's slices).
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._memo import memo
from ._schedule import GAP_MAX, WAVE_SAMPLES, _row_of, _wave, grid_schedule, sample_index

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel module it calls
# into (`_schedule`; tests/test_jit_deps.py) changes this file with it
_JIT_DEPS_SHA256 = "4f81bf00af2fe07f"

__all__ = ["range_tiles", "window_excess", "grid_excess"]


@njit(cache=True)
def range_tiles(lo, hi, tiles_m, tiles_n, swz):
    """(distinct tile_m, distinct tile_n) of the valid blocks [lo, hi) (`_schedule.tile_of`'s order: rows
    of 2^swz tile_n columns, each walking tile_m with its columns inside; a last row of the remaining
    columns)."""
    if hi <= lo:
        return 0, 0
    width = 1 << swz
    g = tiles_m * width
    full_rows = tiles_n >> swz
    nn = 0
    pieces = 0
    full = False
    a0 = a1 = b1 = 0
    pos = lo
    while pos < hi:
        r, start = _row_of(pos, g, full_rows)
        ell = width if r < full_rows else tiles_n - (full_rows << swz)
        e = min(hi, start + tiles_m * ell)
        x0 = (pos - start) // ell
        x1 = (e - 1 - start) // ell
        nn += min(ell, e - pos)                   # a row's columns are its lanes: consecutive blocks
        if x0 == 0 and x1 == tiles_m - 1:
            full = True
        if pieces == 0:
            a0, a1 = x0, x1
        b1 = x1
        pieces += 1
        pos = e
    if full or pieces > 2:                        # a row walked whole: every tile_m
        return tiles_m, nn
    if pieces == 1:
        return a1 - a0 + 1, nn
    if b1 >= a0 - 1:                              # the first row's tail [a0, last], the next row's head [0, b1]
        return tiles_m, nn
    return tiles_m - a0 + b1 + 1, nn


@njit(cache=True)
def _add_wave(w, per_wave, ctas, tiles_m, tiles_n, swz, weight, out, cnt):
    """Wave w's re-reads (A's tile_m fetches, B's tile_n fetches, `_schedule._wave`) into ``out`` / ``cnt``
    (`window_excess`)."""
    hist = np.zeros((3, GAP_MAX + 1), np.float64)
    _wave(w, ctas, per_wave, tiles_m, tiles_n, swz, hist[0], hist[1], hist[2], 1.0, np.zeros(5, np.float64))
    gmax = 0
    for gap in range(2, GAP_MAX):                 # gap 1: the footprint's count is exact; GAP_MAX: a bin
        if hist[0, gap] > 0.0 or hist[1, gap] > 0.0:
            gmax = gap
    if gmax < 2:
        return
    a = w * per_wave
    sum_m = sum_n = 0
    prev_m = prev_n = 0
    for gap in range(1, gmax + 1):
        lo = a - gap * per_wave                   # wave w - gap, added to the window
        m_k, n_k = range_tiles(lo, lo + per_wave, tiles_m, tiles_n, swz)
        sum_m += m_k
        sum_n += n_k
        if gap >= 2:                              # less what it shares with the wave after it
            m2, n2 = range_tiles(lo, lo + 2 * per_wave, tiles_m, tiles_n, swz)
            sum_m -= m_k + prev_m - m2
            sum_n -= n_k + prev_n - n2
        prev_m, prev_n = m_k, n_k
        if gap < 2 or (hist[0, gap] == 0.0 and hist[1, gap] == 0.0):
            continue
        dm, dn = range_tiles(lo, a, tiles_m, tiles_n, swz)
        for op in range(2):
            c = weight * hist[op, gap]
            out[op, 0, gap] += c * (sum_m - dm)
            out[op, 1, gap] += c * (sum_n - dn)
            cnt[op, gap] += c


@njit(cache=True)
def window_excess(tiles_m, tiles_n, swz, per_wave, max_samples):
    """[op, kind, gap]: the tiles (kind 0: tile_m, 1: tile_n) a re-read's window of ``gap`` waves counts
    more than once in the footprint (module docstring), averaged over the re-reads at that gap of A's tiles
    (op 0) and of B's slices (op 1); the waves sampled as in `_schedule.wave_stats`."""
    ctas = tiles_m * tiles_n
    waves = (ctas + per_wave - 1) // per_wave
    out = np.zeros((2, 2, GAP_MAX + 1), np.float64)
    cnt = np.zeros((2, GAP_MAX + 1), np.float64)
    n_inner = waves - 1
    if n_inner > 0:
        take = min(n_inner, max(1, max_samples))
        for i in range(take):
            _add_wave(sample_index(i, take, n_inner), per_wave, ctas, tiles_m, tiles_n, swz, n_inner / take,
                      out, cnt)
    _add_wave(waves - 1, per_wave, ctas, tiles_m, tiles_n, swz, 1.0, out, cnt)
    for op in range(2):
        for gap in range(GAP_MAX + 1):
            if cnt[op, gap] > 0.0:
                out[op, 0, gap] /= cnt[op, gap]
                out[op, 1, gap] /= cnt[op, gap]
    return out


@memo(4096)
def grid_excess(tiles_m, tiles_n, swz, sms, cps):
    """`window_excess` of a grid on ``sms`` SMs of ``cps`` CTAs, memoized and read-only (a network's layers of
    one grid share it); None where no re-read comes two waves or more after the tile's last read (`wave_stats`'
    histograms), the grids of most layers (measured: counting every grid's cost 7 % of a pass over the fprop
    networks, testing the histograms at each prediction 3 %)."""
    hist_a, hist_b = grid_schedule(tiles_m, tiles_n, swz, sms, cps)[1][:2]
    if not (hist_a[2:GAP_MAX].any() or hist_b[2:GAP_MAX].any()):
        return None
    out = window_excess(tiles_m, tiles_n, swz, sms * cps, WAVE_SAMPLES)
    out.setflags(write=False)
    return out
