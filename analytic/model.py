"""`predict_layer` / `predict_network`: the closed-form traffic, timing and roofline model.

See analytic/MODEL.md for the formulas. Cost per layer is independent of batch size and of the
number of CTAs: loops run over filter positions, channel-block residue classes (<= 32), co-resident
CTA slots (<= CTAs per SM) and bounded periods.
"""
from __future__ import annotations

import math

import numpy as np

from simcore import metrics as Mx
from traces.stream import check_types
from traces.kernel import KernelConfig

from ._counts import block_sharing, l1_counts, lines_per_row, nchw_lines_per_row
from ._l2 import refetch_misses
from ._reuse import l1_configs, reuse_histogram, row_units, touched_1d, touched_mask_1d, touched_runs_1d
from ._schedule import aggregate_configs, sm_configs, wave_stats
from .factors import resolve_factors

__all__ = ["predict_layer", "predict_network", "layer_time", "TIMING_KEYS"]

TIMING_KEYS = ("flops", "time_s", "bound", "time_compute_s", "time_l1_s", "time_l2_s", "time_dram_s",
               "ai_l1", "ai_l2", "ai_dram", "waves")
_BOUNDS = ("compute", "l1", "l2", "dram")
# metric rows of the assembled prediction: one row per key of simcore.metrics, columns A, B, C
_TOTAL_KEYS = tuple(Mx.METRICS)
_ROW = {key: i for i, key in enumerate(_TOTAL_KEYS)}
_OPERAND_KEYS = tuple(f"{key}:{op}" for key in _TOTAL_KEYS for op in "ABC")
_ZERO_ROWS = np.zeros((len(_TOTAL_KEYS), 3))
# schedule statistics: at most this many (wave, SM) pairs / waves are enumerated (analytic._schedule),
# so the cost of a prediction does not grow with the batch size
_SM_SAMPLES = 128
_WAVE_SAMPLES = 48


def _cdiv(a, b):
    return -(-a // b)


def _nsets(strides, sets, line):
    """Sets of an L1 (linear index) that lines with the given byte strides can reach."""
    g = sets
    for st in strides:
        if st % line:
            return sets
        g = math.gcd(g, (st // line) % sets) if (st // line) % sets else g
    return sets // g


def _uniq_input(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, SEC):
    """Compulsory (distinct) input units of ``SEC`` bytes (sectors, or lines with SEC = 128) read by
    the layer: the touched rows and columns are unions of the filter taps' progressions; whole touched
    rows (and whole images) are contiguous runs of bytes, otherwise the units of each touched row are
    counted from its touched columns (`_reuse.row_units`, averaged over row alignments)."""
    ht, hruns = touched_runs_1d(P, H, sh, ph, dh, R)
    hit_w = touched_mask_1d(Q, W, sw, pw, dw, S)
    wt = int(hit_w.sum())
    pix = C * eb if nhwc else eb            # bytes per input column within a row
    planes = 1 if nhwc else C
    if pix % SEC == 0:
        return float(N * planes * ht * wt * (pix // SEC))
    if wt == W:                              # whole input rows: runs of touched rows are contiguous
        if ht == H:
            return float(_cdiv(N * planes * H * W * pix, SEC))
        return N * planes * (ht * W * pix + hruns * (SEC - eb)) / SEC
    return N * planes * ht * row_units(hit_w, pix, W * pix, SEC)


def _check_modelled(layer, gpu, kernel):
    check_types(layer, gpu, kernel)
    if kernel.op != "fprop":
        raise ValueError(f"analytic model: op {kernel.op!r} is not modelled yet")


def predict_layer(layer, gpu, kernel=None, factors=None) -> dict:
    """Predict every metric of ``simcore.metrics`` (totals and per operand, floats) plus timing keys.

    ``factors``: an `analytic.ReuseFactors`, a path to its JSON file, or None (defaults). The model
    covers fprop kernels; ``kernel.op`` ``dgrad`` or ``wgrad`` raises ValueError.
    """
    kernel = KernelConfig() if kernel is None else kernel
    _check_modelled(layer, gpu, kernel)
    f = resolve_factors(factors)
    return _predict(layer, gpu, kernel, f, _machine(gpu, kernel))


def predict_network(layers, gpu, kernel=None, factors=None) -> list:
    """`predict_layer` for every layer (factors resolved once)."""
    kernel = KernelConfig() if kernel is None else kernel
    f = resolve_factors(factors)
    out = []
    machine = None
    for layer in layers:
        _check_modelled(layer, gpu, kernel)
        if machine is None:
            machine = _machine(gpu, kernel)
        out.append(_predict(layer, gpu, kernel, f, machine))
    return out


def layer_time(layer, gpu, kernel, counts, machine=None, grid=None) -> dict:
    """Time per resource, the bound, FLOPs, arithmetic intensities and waves of one layer whose
    traffic is ``counts`` (the model's predictions, or simulated counts: `analytic.scaling --check`
    puts the simulated traffic through this same time model).

    compute: the waves' tile work at the per-SM peak (a wave costs its busiest SM's CTAs: the full
    waves ``cps`` each, the last one ceil(its CTAs / SMs)); L1: (load + store sectors) over the busy
    SMs' L1 bandwidth; L2 and DRAM: (read + write sectors) over their bandwidths. time = the largest,
    bound = which one."""
    if machine is None:
        machine = _machine(gpu, kernel)
    cps = machine[0]
    sms = gpu.sms
    SEC = gpu.sector_bytes
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    if grid is None:
        ctas = _cdiv(layer.gemm_m, tm) * _cdiv(layer.k, tn)
        ksteps = _cdiv(layer.gemm_k, tk) if kernel.layout == "nchw" else layer.r * layer.s * _cdiv(layer.c, tk)
        flops = float(layer.flops)
    else:
        ctas, ksteps, flops = grid
    per_wave = cps * sms
    full_waves, n_last = divmod(ctas, per_wave)
    if kernel.dtype == "fp16" and gpu.tensor_tflops > 0:
        peak = gpu.tensor_tflops * 1e12
    elif kernel.dtype == "fp16":
        peak = 2.0 * gpu.fp32_tflops * 1e12
    else:
        peak = gpu.fp32_tflops * 1e12
    tile_flops = 2.0 * tm * tn * ksteps * tk
    slots = full_waves * cps + _cdiv(n_last, sms)
    t_compute = slots * tile_flops / (peak / sms)
    clk = gpu.clock_mhz * 1e6
    l1_bytes = (counts[Mx.L1_LD_SECTORS] + counts[Mx.L1_ST_SECTORS]) * SEC
    t_l1 = l1_bytes / (gpu.l1_bytes_per_clk * clk * min(sms, ctas))
    l2_bytes = (counts[Mx.L2_RD_SECTORS] + counts[Mx.L2_WR_SECTORS]) * SEC
    t_l2 = l2_bytes / (gpu.l2_gbps * 1e9)
    dram_bytes = (counts[Mx.DRAM_RD_SECTORS] + counts[Mx.DRAM_WR_SECTORS]) * SEC
    t_dram = dram_bytes / (gpu.dram_gbps * 1e9)
    times = (t_compute, t_l1, t_l2, t_dram)
    ib = max(range(4), key=lambda i: times[i])
    return {"flops": flops, "time_compute_s": t_compute, "time_l1_s": t_l1, "time_l2_s": t_l2,
            "time_dram_s": t_dram, "time_s": times[ib], "bound": _BOUNDS[ib],
            "ai_l1": flops / l1_bytes if l1_bytes else math.inf,
            "ai_l2": flops / l2_bytes if l2_bytes else math.inf,
            "ai_dram": flops / dram_bytes if dram_bytes else math.inf,
            "waves": float(full_waves + (1 if n_last else 0))}


def _machine(gpu, kernel):
    """Kernel-on-GPU figures shared by every layer: CTAs per SM, L1 ways and sets."""
    l1 = kernel.l1_config(gpu)
    return kernel.resident_ctas(gpu), l1.ways, l1.sets


def _predict(layer, gpu, kernel, f, machine):
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    P, Q = layer.p, layer.q
    M = N * P * Q
    eb = kernel.elem_bytes
    nhwc = kernel.layout == "nhwc"
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    SEC = gpu.sector_bytes
    LINE = gpu.line_bytes
    sms = gpu.sms

    ex = l1_counts(layer, kernel)
    sec_a, sec_b, sec_c = ex["sec_A"], ex["sec_B"], ex["sec_C"]

    # ---- grid, occupancy, waves -----------------------------------------------------------------
    tiles_m = _cdiv(M, tm)
    tiles_n = _cdiv(K, tn)
    ctas = tiles_m * tiles_n
    cps, ways, sets = machine
    per_wave = cps * sms
    waves = _cdiv(ctas, per_wave)
    full_waves = ctas // per_wave
    n_last = ctas - full_waves * per_wave
    ksteps = R * S * _cdiv(C, tk) if nhwc else _cdiv(C * R * S, tk)

    # ---- schedule: co-residency per SM (L1), tiles per wave and their re-reads (L2) --------------
    swz = kernel.swizzle_log
    cfg = aggregate_configs(sm_configs(tiles_m, tiles_n, swz, sms, cps, _SM_SAMPLES))
    hist_ra, hist_rb, hist_rh, wsum = wave_stats(tiles_m, tiles_n, swz, per_wave, _WAVE_SAMPLES)
    n_waves = wsum[3]
    na_wave, nb_wave, ctas_wave, runs_wave = wsum[0] / n_waves, wsum[1] / n_waves, wsum[2] / n_waves, \
        wsum[4] / n_waves

    # ---- L1 working set per k-step (lines) and the sets they map to -------------------------------
    unit = C * eb if nhwc else eb                  # bytes per input column w
    if nhwc:
        nsa = _nsets((sw * unit, sh * W * unit, H * W * unit), sets, LINE)
        row_b = R * S * C * eb
    else:
        nsa = sets
        row_b = C * R * S * eb
    nsb = _nsets((row_b,), sets, LINE)
    nmax = max(nsa, nsb)

    hist = reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tm, tiles_m,
                           unit < SEC, f.l1_tile_edge)
    rows_t = hist.sum(axis=1)                  # valid rows (all tiles) per filter position
    rows_total = float(rows_t.sum())
    lo, hi = f.l1_hit_lo, f.l1_hit_hi
    nblk = _cdiv(C, tk) if nhwc else C
    dense = unit < SEC
    if dense:
        spr = nblk * sw * unit / SEC            # consecutive rows share sectors: bytes / 32
    else:
        spr = sec_a / (tiles_n * rows_total) if rows_total else 0.0
    dscale = 1.0 if nhwc else 1.0 / tk          # filter-position distance -> rounds
    # lines a k-step reads per row access (rows at their byte stride, blocks and filter positions at
    # their offsets; unaligned blocks straddle lines, narrow rows share them)
    if nhwc:
        lpr_a = lines_per_row(C, tk, eb, sw * C * eb, math.gcd(dw * C * eb, dh * W * C * eb), LINE)
        # the same for a window over all filter positions, which reads every column when the taps
        # cover the stride (rows one pixel apart)
        lpw_a = lpr_a if S * dw < sw else lines_per_row(C, tk, eb, C * eb, C * eb, LINE)
        lpr_b = lines_per_row(C, tk, eb, row_b, C * eb, LINE)
    else:
        lpr_a = nchw_lines_per_row(tm, tk, C, R, S, Q, sw, dw, eb, LINE)
        lpw_a = lpr_a
        lpr_b = lines_per_row(C * R * S, tk, eb, row_b, LINE, LINE)
    # tile classes: full tiles and the last partial one (rows), full and partial filter tiles
    last_m = M - (tiles_m - 1) * tm
    mcls = [(tm, (tiles_m - 1) * tm / M), (last_m, last_m / M)] if last_m != tm else [(tm, 1.0)]
    last_n = K - (tiles_n - 1) * tn
    ncls = [(tn, (tiles_n - 1) / tiles_n), (last_n, 1.0 / tiles_n)] if last_n != tn else [(tn, 1.0)]
    # sectors the next channel block re-reads (nhwc: R S rounds later, the same filter position; nchw
    # filters: the next k-step, one round later)
    if nhwc:
        share_blk = block_sharing(C, tk, eb, sw * C * eb)
        share_b_blk = block_sharing(C, tk, eb, C * eb)
    else:
        share_blk = 0.0
        share_b_blk = block_sharing(C * R * S, tk, eb, C * R * S * eb)
    small_b = (C <= tk) and nhwc and C * eb < SEC
    if small_b and sec_b:
        reuse_b1 = max(0.0, 1.0 - _cdiv(K * R * S * C * eb, SEC) * tiles_m / sec_b)
    else:
        reuse_b1 = 0.0
    # distinct lines per missed row over a CTA lifetime, and the sets a lifetime's lines reach
    if not nhwc:
        lpm_a = nblk * sw * eb / LINE        # a row access reads one element of each of C planes
    elif S * dw >= sw:
        lpm_a = unit / LINE                  # a lifetime reads every column of its window
    else:
        lpm_a = unit / LINE if unit >= LINE else min(1.0, sw * unit / LINE)
    if nhwc:
        ns_life = max(_nsets((sw * unit, sh * W * unit, H * W * unit) + ((LINE,) if unit > LINE else ()),
                             sets, LINE),
                      _nsets((row_b,) + ((LINE,) if row_b > LINE else ()), sets, LINE))
    else:
        ns_life = sets
    # B lines of consecutive filter positions (one channel block) per filter and round, relative
    bfrac = C * eb / LINE / lpr_b if nhwc else 1e9
    # L2 distance of within-CTA reuses that miss L1, per line of L2 capacity: the wave's distinct A
    # tiles (lines_a_t counts one CTA's A lines times na) and its B lines per round
    cap_lines = gpu.l2_bytes / LINE * f.l2_capacity
    if nhwc:
        l2a_w = na_wave / cap_lines
        l2b = nb_wave * tn * lpr_b / cap_lines
    else:
        l2a_w = 0.0
        l2b = 0.0
    l2_ways = float(gpu.l2_ways)
    spread = f.l2_cliff_spread
    # L1 set class of each filter position's A lines (nhwc, line-aligned pixels): positions whose
    # offsets differ by other than a multiple of the set step put their lines in other sets
    phase = np.zeros(R * S, np.int64)
    nphase = 1
    if nhwc and (C * eb) % LINE == 0 and nsa < sets:
        nphase = sets // nsa
        for t in range(R * S):
            phase[t] = ((t // S) * dh * W + (t % S) * dw) * (C * eb // LINE) % nphase
    miss_frac_a, hit_b, miss2_frac_a = l1_configs(
        hist, phase, nphase, rows_t, cfg, np.array(mcls, np.float64), np.array(ncls, np.float64), float(M), R, S,
        float(tm), float(tn), float(ksteps), lpr_a, lpw_a, lpr_b, float(nsa), float(nsb), float(nmax), float(ways),
        lo, hi, dscale, share_blk, share_b_blk, reuse_b1, lpm_a, row_b / LINE, float(ns_life), bfrac, l2a_w, l2b,
        l2_ways, spread)
    miss_a = min(float(sec_a), miss_frac_a * rows_total * tiles_n * spr)
    l1_hit_a = sec_a - miss_a
    l1_hit_b = sec_b * min(1.0, hit_b)
    miss_b = sec_b - l1_hit_b

    # ---- compulsory (unique) sectors of each tensor ----------------------------------------------
    uniq_a = _uniq_input(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, SEC)
    wt = touched_1d(Q, W, sw, pw, dw, S)
    uniq_a = min(float(uniq_a), miss_a) if miss_a else 0.0
    uniq_b = min(float(_cdiv(K * C * R * S * eb, SEC)), miss_b)
    uniq_c = float(_cdiv(M * K * eb, SEC))

    # ---- L2: tiles re-read by later waves, within-CTA reuses beyond the L2 ------------------------
    # A in "m-space": a tile reads rows [x TM, (x + 1) TM) of the GEMM plus a halo of `delta` rows
    # (the filter's reach); adjacent tiles share a boundary region of min(delta, TM) rows, a tile's
    # own core is the rest. Densities: A sectors (lines) per GEMM row.
    dens = uniq_a / M
    uniq_a_lines = _uniq_input(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, LINE)
    dens_l = uniq_a_lines / M
    delta = (R - 1) * dh / sh * Q + (S - 1) * dw / sw
    core = max(0.0, tm - delta)
    bnd = min(delta, float(tm))
    b_slice = uniq_b / tiles_n
    b_slice_lines = _cdiv(K * C * R * S * eb, LINE) / tiles_n
    c_lines = _cdiv(M * K * eb, LINE) / ctas
    # lines touched in one wave, and per further wave (tiles not shared with the wave before)
    f1 = dens_l * (na_wave * tm + runs_wave * delta) + nb_wave * b_slice_lines + ctas_wave * c_lines
    fnew = max(0.0, f1 - dens_l * tm * hist_ra[1] / n_waves - b_slice_lines * hist_rb[1] / n_waves)
    reread_a = (refetch_misses(hist_ra, dens * core, f1, fnew, cap_lines, l2_ways, spread)
                + refetch_misses(hist_rh, dens * bnd, f1, fnew, cap_lines, l2_ways, spread))
    reread_b = refetch_misses(hist_rb, b_slice, f1, fnew, cap_lines, l2_ways, spread)
    # within-CTA reuses (across filter positions) that miss L1 and L2: once per wave and tile_m (the
    # wave's other CTAs with that tile_m read the same sectors in the same round, right behind it)
    inner = miss2_frac_a * rows_total * spr * wsum[0] / tiles_m
    dram_a = min(miss_a, uniq_a + reread_a + inner)
    dram_b = min(miss_b, uniq_b + reread_b)
    y_cta = uniq_c / ctas

    # ---- stores: L2 write-back, dirty sectors left at the end (LRU stack walked back by waves) ----
    capd = gpu.l2_bytes / SEC * f.l2_dirty_capacity
    y_last = (n_last if n_last else per_wave) * y_cta
    y_full = per_wave * y_cta
    # reads of a wave occupy L2 once per distinct tile (the wave's A tiles with their halos, its
    # B slices)
    r_full = dens * (na_wave * tm + runs_wave * delta) + nb_wave * b_slice
    r_last = r_full * (ctas - full_waves * per_wave if n_last else per_wave) / max(ctas_wave, 1.0)
    dirty = min(y_last, capd)
    rem = capd - y_last - r_last
    other = uniq_c - y_last
    if rem > 0 and other > 0:
        per = y_full + r_full
        nfit = math.floor(rem / per) if per > 0 else 0
        got = min(other, nfit * y_full)
        rem2 = rem - nfit * per
        if got < other and rem2 > 0:
            got += min(other - got, rem2, y_full)
        dirty += got
    dirty = min(dirty, uniq_c)
    dram_w = max(0.0, uniq_c - dirty)
    l2_wr = float(sec_c)
    l2_wr_miss = min(l2_wr, uniq_c)

    # ---- assemble metrics (per operand A, B, C; totals) -------------------------------------------
    per = _ZERO_ROWS.copy()
    per[_ROW[Mx.L1_LD_REQUESTS]] = (float(ex["req_A"]), float(ex["req_B"]), 0.0)
    per[_ROW[Mx.L1_LD_SECTORS]] = (float(sec_a), float(sec_b), 0.0)
    per[_ROW[Mx.L1_LD_HITS]] = (l1_hit_a, l1_hit_b, 0.0)
    per[_ROW[Mx.L1_LD_MISSES]] = (miss_a, miss_b, 0.0)
    per[_ROW[Mx.L1_ST_REQUESTS]] = (0.0, 0.0, float(ex["req_C"]))
    per[_ROW[Mx.L1_ST_SECTORS]] = (0.0, 0.0, float(sec_c))
    per[_ROW[Mx.L2_RD_SECTORS]] = (miss_a, miss_b, 0.0)
    per[_ROW[Mx.L2_RD_MISSES]] = (dram_a, dram_b, 0.0)
    per[_ROW[Mx.L2_RD_HITS]] = (miss_a - dram_a, miss_b - dram_b, 0.0)
    per[_ROW[Mx.L2_WR_SECTORS]] = (0.0, 0.0, l2_wr)
    per[_ROW[Mx.L2_WR_MISSES]] = (0.0, 0.0, l2_wr_miss)
    per[_ROW[Mx.L2_WR_HITS]] = (0.0, 0.0, l2_wr - l2_wr_miss)
    per[_ROW[Mx.DRAM_RD_SECTORS]] = (dram_a, dram_b, 0.0)
    per[_ROW[Mx.DRAM_WR_SECTORS]] = (0.0, 0.0, dram_w)
    per[_ROW[Mx.L2_DIRTY_AT_END]] = (0.0, 0.0, dirty)
    out = dict(zip(_TOTAL_KEYS, per.sum(axis=1).tolist()))
    out.update(zip(_OPERAND_KEYS, per.ravel().tolist()))
    out.update(layer_time(layer, gpu, kernel, out, machine,
                          (ctas, ksteps, 2.0 * M * K * (C // layer.groups) * R * S)))
    return out
