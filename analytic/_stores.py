"""The write side of the dense engine (MODEL.md section 4): the dirty output sectors a layer leaves in the L2
and its DRAM writes, from the waves' reads and stores (`stores_in_l2`), and the same without predicting the
loads (`write_side`: the grouped engine's dense part)."""
from __future__ import annotations

from ._common import cdiv as _cdiv, dirty_at_end
from ._schedule import grid_schedule
from ._window import a_window

__all__ = ["stores_in_l2", "write_side"]


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
