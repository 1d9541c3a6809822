"""The write side of the dense engine (MODEL.md section 4): the dirty output sectors a layer leaves in the L2
and its DRAM writes, from the waves' reads and stores (`stores_in_l2`), and the same without predicting the
loads (`write_side`: the grouped engine's dense part)."""
from __future__ import annotations

import numpy as np

from ._common import cdiv as _cdiv, dirty_at_end, row_period
from ._memo import memo
from ._schedule import column_ranges, grid_schedule
from ._window import a_window

__all__ = ["stores_in_l2", "write_side", "row_lines", "wave_store_lines"]

#: full waves sampled by `wave_store_lines`
STORE_WAVES = 32


def row_lines(width, pitch, offset, line):
    """Mean lines that ``width`` bytes at ``offset`` of rows ``pitch`` bytes apart touch, each row its
    own (over one period of the rows' alignment to a line; `_counts.lines_per_row` counts a line that
    consecutive rows share once)."""
    return float(row_period(pitch, offset, offset + width, line)[0].mean())


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
    total = 0.0
    waves = np.unique(np.linspace(0, n_full - 1, min(n_full, STORE_WAVES)).round().astype(np.int64))
    for w in waves:
        lo, hi = column_ranges(int(w) * per_wave, per_wave, tiles_m, tiles_n, swz)
        held = np.nonzero(hi >= 0)[0]
        # runs of adjacent tiles with one column range: contiguous rows, counted a period of their
        # alignment to a line at a time; a line two neighbouring runs' rows share counted once
        cut = np.nonzero((np.diff(held) != 1) | (np.diff(lo[held]) != 0) | (np.diff(hi[held]) != 0))[0] + 1
        prev_last = -1
        for r0, r1 in zip(np.concatenate(([0], cut)), np.concatenate((cut, [held.shape[0]]))):
            i0, i1 = held[r0], held[r1 - 1]
            m0, m1 = i0 * tm, min(M, (i1 + 1) * tm)
            c0, c1 = lo[i0] * tn * eb, min(K, (hi[i0] + 1) * tn) * eb
            total += _run_lines(m0, m1, K * eb, c0, c1, line)
            total -= max(0, prev_last - (m0 * K * eb + c0) // line + 1)
            prev_last = ((m1 - 1) * K * eb + c1 - 1) // line
    return total / waves.shape[0]


def _run_lines(m0, m1, pitch, c0, c1, line):
    """Distinct lines of bytes [c0, c1) of rows m0 .. m1 - 1, ``pitch`` bytes apart: each row's lines, less
    those it shares with the next, summed a period of the rows' alignment to a line at a time."""
    spans, shared = row_period(pitch, c0, c1, line)
    period = spans.shape[0]
    n = m1 - m0
    k = np.arange(n % period)
    out = (n // period) * spans.sum() + spans[(m0 + k) % period].sum()
    k = np.arange((n - 1) % period)
    out -= ((n - 1) // period) * shared.sum() + shared[(m0 + k) % period].sum()
    return float(out)


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
