"""The write side of the dense engine (MODEL.md section 4): the dirty output sectors a layer leaves in the L2
and its DRAM writes, from the waves' reads and stores (`stores_in_l2`), and the same without predicting the
loads (`write_side`: the grouped engine's dense part)."""
from __future__ import annotations

import math

import numpy as np
from simcore._jit import njit

from ._common import cdiv as _cdiv, dirty_at_end, even_picks, row_period
from ._geometry import strided_starts
from ._memo import memo
from ._schedule import column_ranges, grid_schedule
from ._window import a_window

__all__ = ["stores_in_l2", "write_side", "row_lines", "wave_store_lines", "strided_store_lines"]

# Numba's on-disk cache checks only this file's own time stamp, but its kernels compile in code from _schedule.py:
# tests/test_jit_deps.py checks this digest of it, so no stale compiled kernel survives an edit.
_JIT_DEPS_SHA256 = "4f81bf00af2fe07f"

#: full waves sampled by `wave_store_lines`
STORE_WAVES = 32


@memo(4096)
def row_lines(width, pitch, offset, line):
    """Mean lines that ``width`` bytes at ``offset`` of rows ``pitch`` bytes apart touch, each row its
    own (over one period of the rows' alignment to a line; `_counts.lines_per_row` counts a line that
    consecutive rows share once)."""
    return float(row_period(pitch, offset, offset + width, line)[0].mean())


@memo(256)
def strided_store_lines(layer, kernel, line, cols) -> float:
    """Distinct dx lines strided dgrad's sub-problems (every one the dispatcher does not skip, store-only ones
    included) store in the first ``cols`` channels of each pixel (one band of CTA columns: 2^swizzle_log columns
    of tile_n channels; or every channel), summed over the sub-problems. A sub-problem stores every stride_w-th
    pixel of every stride_h-th row: pixels closer than a line apart share lines, so the lines are those the
    pixels touch, not their bytes packed. Counted exactly: a row at a time, rows alike in their start's alignment
    to a line counted once, less the lines consecutive stored rows share. Seed 66 #76 (C 6 fp32, stride 4:
    24 bytes every 96): each sub-problem's stores touch every line of its rows, 10,474 lines, where its
    335,160 / 16 sectors packed make 5,237. Memoized (`_memo`): GPU-independent but for ``line``."""
    (sh, sw), eb = layer.stride, kernel.elem_bytes
    pixel, width = layer.c * eb, cols * eb
    total = 0
    for _r, _s, start_h, start_w, _nr, _ns in strided_starts(layer):
        pp, qq = _cdiv(layer.h - start_h, sh), _cdiv(layer.w - start_w, sw)
        # the stored rows' first bytes' alignments to a line: image n's row i starts at base + n img + i row, whose
        # residues repeat every line / gcd(step, line) images and rows
        img, row, base = layer.h * layer.w * pixel, sh * layer.w * pixel, (start_h * layer.w + start_w) * pixel
        per_n = np.bincount(np.arange(layer.n, dtype=np.int64) % (line // math.gcd(img, line)))
        per_i = np.bincount(np.arange(pp, dtype=np.int64) % (line // math.gcd(row, line)))
        starts = (base + img * np.arange(per_n.shape[0], dtype=np.int64)[:, None]
                  + row * np.arange(per_i.shape[0], dtype=np.int64)[None, :]) % line
        count = np.bincount(starts.ravel(), (per_n[:, None] * per_i[None, :]).ravel(), minlength=line).astype(np.int64)
        align = np.flatnonzero(count)
        first = align[:, None] + (sw * pixel) * np.arange(qq, dtype=np.int64)[None, :]
        last = (first + width - 1) // line
        first //= line
        per_row = (last - first + 1).sum(1) - np.maximum(0, last[:, :-1] - first[:, 1:] + 1).sum(1)
        total += int((per_row * count[align]).sum())
        # a line the last pixel of a row shares with the first of the next stored row: only where the bytes
        # between the two (the nearest rows: the next row of the image, or the next image's first) are under a line
        span = (qq - 1) * sw * pixel + width
        nearest = min(sh, layer.h - (pp - 1) * sh) if layer.n > 1 else sh
        if pp * layer.n > 1 and nearest * layer.w * pixel - span < line - 1:
            row_start = (base + img * np.arange(layer.n, dtype=np.int64)[:, None]
                         + row * np.arange(pp, dtype=np.int64)[None, :]).ravel()
            row_end = (row_start + span - 1) // line
            total -= int(np.maximum(0, row_end[:-1] - row_start[1:] // line + 1).sum())
    return float(total)


@memo(4096)
def wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, line) -> float:
    """Distinct lines a full wave's CTAs store (nhwc), the mean over its full waves (`STORE_WAVES` of them
    at most, evenly spaced): each tile_m's rows touch, in each row, the lines of the columns the wave
    holds of it (`_schedule.column_ranges`), a line two of those columns (or two rows) share once and a
    line of a column the wave does not hold (a neighbour in another wave) touched all the same. Seed 13
    #10 (K = 192 fp16 in 32-wide columns, 64 bytes a row: two columns a line; 56 CTAs a wave down the
    columns): a wave of column 1's last 16 tiles and column 2's 36 stores 13,312 lines simulated, 52 CTAs
    x 256; one line a row per two columns, the layer's mean, gives 7,168."""
    ctas = tiles_m * tiles_n
    n_full = ctas // per_wave
    if n_full < 1:
        return 0.0
    waves = even_picks(n_full, min(n_full, STORE_WAVES))
    return _waves_store_lines(waves, per_wave, tiles_m, tiles_n, swz, M, tm, tn, K, eb, line) / waves.shape[0]


@njit(cache=True)
def _waves_store_lines(waves, per_wave, tiles_m, tiles_n, swz, M, tm, tn, K, eb, line):
    """`wave_store_lines`' sum over the sampled full waves ``waves`` (compiled: 300 us a call in numpy, 16 % of
    a pass of `benchmarks/bench_analytic.py` over the fprop networks; tests/test_wave_cliff.py checks it against
    enumerated bytes). Runs of adjacent tiles with one column range are contiguous rows, counted a period of
    their alignment to a line at a time (`_run_lines`); a line two neighbouring runs' rows share counted
    once."""
    total = 0
    for w in waves:
        lo, hi = column_ranges(w * per_wave, per_wave, tiles_m, tiles_n, swz)
        prev_last = -1
        i0 = -1                                   # the current run's first tile
        for i in range(tiles_m + 1):
            if i0 >= 0 and (i == tiles_m or hi[i] < 0 or lo[i] != lo[i0] or hi[i] != hi[i0]):
                m0, m1 = i0 * tm, min(M, i * tm)
                c0, c1 = lo[i0] * tn * eb, min(K, (hi[i0] + 1) * tn) * eb
                total += _run_lines(m0, m1, K * eb, c0, c1, line)
                total -= max(0, prev_last - (m0 * K * eb + c0) // line + 1)
                prev_last = ((m1 - 1) * K * eb + c1 - 1) // line
                i0 = -1
            if i < tiles_m and hi[i] >= 0 and i0 < 0:
                i0 = i
    return float(total)


@njit(cache=True)
def _run_lines(m0, m1, pitch, c0, c1, line):
    """Distinct lines of bytes [c0, c1) of rows m0 .. m1 - 1, ``pitch`` bytes apart: each row's lines, less
    those it shares with the next (`_common.row_period`'s figures, a period of the rows' alignment to a line)."""
    a, b = pitch, line
    while b:
        a, b = b, a % b
    period = line // a
    out = 0
    for r in range(min(m1 - m0, period)):       # each residue of the run's rows, times its rows
        m = (m0 + r) % period
        first, last = (m * pitch + c0) // line, (m * pitch + c1 - 1) // line
        rows = (m1 - m0 - r + period - 1) // period
        out += rows * (last - first + 1)
        if r < m1 - m0 - 1:                       # row m shares lines with row m + 1 (the run's next row)
            pairs = (m1 - m0 - 1 - r + period - 1) // period
            out -= pairs * max(0, last - ((m + 1) * pitch + c0) // line + 1)
    return out


def stores_in_l2(gpu, f, uniq_a, uniq_b, uniq_c, M, tm, delta, tiles_n, ctas, per_wave, wsum) -> tuple:
    """(dirty output sectors left in L2 at the end, DRAM write sectors): the LRU stack walked back by
    waves (`dirty_at_end`), a wave's reads occupying L2 once per distinct tile (its A tiles with their
    halos, ``delta`` rows, and its B slices); ``wsum``: `wave_stats`' sums."""
    n_waves = wsum[3]
    na_wave, nb_wave, ctas_wave, runs_wave = wsum[0] / n_waves, wsum[1] / n_waves, wsum[2] / n_waves, \
        wsum[4] / n_waves
    r_full = uniq_a / M * (na_wave * tm + runs_wave * delta) + nb_wave * uniq_b / tiles_n
    return dirty_at_end(gpu, f, uniq_c, uniq_c / ctas, r_full, ctas, per_wave, ctas_wave)


def write_side(geo, gpu, kernel, f, machine) -> tuple:
    """(store sectors, distinct output sectors, dirty sectors left in L2, DRAM write sectors) of the dense
    GEMM ``geo``, as `model._predict_gemm` counts them but without its loads: a wave's reads taken at their
    compulsory sectors (the grouped engine's dense part, `_grouped_model.predict_grouped`, which counts its
    own loads)."""
    win = geo.win
    M, K = win.n * win.p * win.q, geo.gemm_n
    tm, tn, eb, SEC = kernel.tile_m, kernel.tile_n, kernel.elem_bytes, gpu.sector_bytes
    tiles_m, tiles_n = _cdiv(M, tm), _cdiv(K, tn)
    per_wave = machine[0] * gpu.sms
    wsum = grid_schedule(tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, machine[0])[1][3]
    uniq_a = float(a_window(win, tm, kernel.tile_k, eb, kernel.layout == "nhwc", SEC, gpu.line_bytes,
                            f.l1_tile_edge)[8])
    uniq_c = float(_cdiv(M * K * eb, SEC))
    dirty, dram_w = stores_in_l2(gpu, f, uniq_a, geo.uniq_b, uniq_c, M, tm, win.reach, tiles_n,
                                  tiles_m * tiles_n, per_wave, wsum)
    return float(geo.counts["sec_C"]), uniq_c, dirty, dram_w
