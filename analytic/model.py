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

from ._counts import l1_counts
from ._reuse import l1_classes, reuse_histogram, touched_1d
from .factors import resolve_factors

__all__ = ["predict_layer", "predict_network", "TIMING_KEYS"]

TIMING_KEYS = ("flops", "time_s", "bound", "time_compute_s", "time_l1_s", "time_l2_s", "time_dram_s",
               "ai_l1", "ai_l2", "ai_dram", "waves")
_BOUNDS = ("compute", "l1", "l2", "dram")


def _cdiv(a, b):
    return -(-a // b)


def _l2_miss(x, width):
    """L2 miss probability of a reuse at relative distance x (logistic around 1)."""
    z = (x - 1.0) / width
    if z > 40:
        return 1.0
    if z < -40:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))


def _nsets(strides, sets, line):
    """Sets of an L1 (linear index) that lines with the given byte strides can reach."""
    g = sets
    for st in strides:
        if st % line:
            return sets
        g = math.gcd(g, (st // line) % sets) if (st // line) % sets else g
    return sets // g


def _uniq_input(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, SEC):
    """Compulsory (distinct) input sectors read by the layer."""
    ht = touched_1d(P, H, sh, ph, dh, R)
    wt = touched_1d(Q, W, sw, pw, dw, S)
    if nhwc:
        if C * eb % SEC == 0:
            return float(N * ht * wt * (C * eb // SEC))
        if wt == W:
            return float(N * ht * (W * C * eb / SEC + 1.0 - eb / SEC) if ht < H else _cdiv(N * H * W * C * eb, SEC))
        return N * ht * wt * (C * eb + SEC - eb) / SEC
    if wt == W and ht == H:
        return float(_cdiv(N * C * H * W * eb, SEC))
    if sw * eb <= SEC:
        return N * C * ht * (((wt - 1) * sw + 1) * eb / SEC + 1.0 - eb / SEC)
    return float(N * C * ht * wt)


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

    # CTAs by the number k of CTAs sharing their SM (full waves: cps; last wave: by SM fill).
    def ge(j):  # SMs of the last wave holding >= j CTAs
        return max(0, min(sms, n_last - (j - 1) * sms))
    classes = []
    if full_waves:
        classes.append((cps, full_waves * per_wave, (full_waves - 1) / full_waves))
    for k in range(1, cps + 1):
        n_sm = ge(k) - ge(k + 1)
        if n_sm > 0:
            classes.append((k, k * n_sm, 1.0 if full_waves else 0.0))

    # co-resident partners (blocks b and b + SMs) share tile_n / tile_m?
    wl = 1 << kernel.swizzle_log
    gx = tiles_m * wl

    def same_n(delta):
        """Fraction of blocks b (with b + delta also a block) whose tile_n equals that of b + delta."""
        if ctas <= delta:
            return 0.0
        if tiles_n == 1:
            return 1.0
        if delta % wl:
            return 0.0
        span = ctas - delta            # linear ids run over the grid row by row (gx per row)
        keep = max(0, gx - delta)
        return min(1.0, ((span // gx) * keep + min(span % gx, keep)) / span)

    def same_m(delta):
        if ctas <= delta:
            return 0.0
        if delta % gx == 0:
            return 1.0
        if wl > 1 and delta < wl:
            return 1.0 - delta / wl
        return 0.0

    p_n, p_m = same_n(sms), same_m(sms)

    def same_n_range(delta, lo, hi):
        """Fraction of blocks b in [lo, hi - delta) whose tile_n equals that of b + delta."""
        if hi - delta <= lo:
            return same_n(delta)
        if tiles_n == 1:
            return 1.0
        if wl > 1:
            return same_n(delta)
        keep = max(0, gx - delta)

        def F(n):
            return (n // gx) * keep + min(n % gx, keep)
        return (F(hi - delta) - F(lo)) / (hi - delta - lo)

    # partners sharing filters, per class: full waves (blocks [0, full_waves * per_wave)) and the
    # last wave (blocks from full_waves * per_wave on)
    for i_, cl in enumerate(classes):
        if full_waves and i_ == 0:
            pn_c = same_n_range(sms, 0, full_waves * per_wave)
        else:
            pn_c = same_n_range(sms, full_waves * per_wave, ctas)
        classes[i_] = cl + (pn_c,)

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
    if nhwc:
        lpr_a = max(min(tk, C) * eb / LINE, min(1.0, sw * unit / LINE))
    else:
        lpr_a = tk * max(1.0, sw * eb) / LINE
    lpr_b = max(tk * eb / LINE, min(1.0, row_b / LINE))
    # tile classes: full tiles and the last partial one (rows), full and partial filter tiles
    last_m = M - (tiles_m - 1) * tm
    mcls = [(tm, (tiles_m - 1) * tm / M), (last_m, last_m / M)] if last_m != tm else [(tm, 1.0)]
    last_n = K - (tiles_n - 1) * tn
    ncls = [(tn, (tiles_n - 1) / tiles_n), (last_n, 1.0 / tiles_n)] if last_n != tn else [(tn, 1.0)]
    share_blk = max(0.0, 1.0 - tk * eb / SEC) if tk * eb < SEC else 0.0
    small_b = (C <= tk) and nhwc and C * eb < SEC
    if small_b and sec_b:
        reuse_b1 = max(0.0, 1.0 - _cdiv(K * R * S * C * eb, SEC) * tiles_m / sec_b)
    else:
        reuse_b1 = 0.0
    # previous wave's CTA on the same SM and slot (blocks b and b + per_wave)
    p_mw = same_m(per_wave)
    # the previous wave's CTAs on the same SM (any slot j; this CTA in slot s): blocks b - delta,
    # delta = per_wave + (s - j) * SMs; the filters survive if any of them had the same tile_n
    p_nw = 0.0
    for s_ in range(cps):
        keep_n = 1.0
        for j_ in range(cps):
            delta = per_wave + (s_ - j_) * sms
            if delta > 0:
                keep_n *= 1.0 - same_n(delta)
        p_nw += (1.0 - keep_n) / cps
    f_wave = max(0, ctas - per_wave) / ctas   # (per class: classes[:, 2])
    # distinct lines per missed row over a CTA lifetime, and the sets a lifetime's lines reach
    if dense:
        lpm_a = sw * unit / LINE
    elif nhwc:
        lpm_a = unit / LINE if unit >= LINE else min(1.0, sw * unit / LINE)
    else:
        lpm_a = nblk * lpr_a
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
    wave_ctas = min(ctas, per_wave)
    if nhwc:
        l2a_w = min(float(tiles_m), wave_ctas) / cap_lines
        l2b = min(float(tiles_n), wave_ctas / tiles_m + 1.0) * tn * lpr_b / cap_lines
    else:
        l2a_w = 0.0
        l2b = 0.0
    miss_frac_a, hit_b, miss2_frac_a = l1_classes(
        hist, rows_t, np.array(classes, np.float64), np.array(mcls, np.float64),
        np.array(ncls, np.float64), float(ctas), float(M), R, S, float(tm), float(tn), float(ksteps),
        lpr_a, lpr_b, float(nsa), float(nsb), float(nmax), float(ways), lo, hi, dscale,
        p_m, p_n, p_mw, p_nw, f_wave, share_blk, reuse_b1,
        lpm_a, row_b / LINE, float(ns_life), bfrac, l2a_w, l2b, f.l2_cliff_width)
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

    # ---- L2: reuse among CTAs, capacity -----------------------------------------------------------
    cap = gpu.l2_bytes / SEC * f.l2_capacity
    width = f.l2_cliff_width
    y_cta = uniq_c / ctas
    a_cta = uniq_a / tiles_m
    b_slice = uniq_b / tiles_n
    # A re-read by later tile_n passes. Waves run in lockstep, so a wave fetches each tile_m it
    # holds once (a second CTA with the same tile_m in the wave hits): fetches per wave =
    # min(tiles_m, CTAs in the wave). Every fetch beyond the first of a tile_m is a re-read, at a
    # distance of one wave's traffic (per_wave >= tiles_m: the tile was read in the previous wave)
    # or of tiles_m CTAs' traffic (per_wave < tiles_m: block b - tiles_m).
    if tiles_n > 1:
        fetches = full_waves * min(tiles_m, per_wave) + min(tiles_m, n_last)
        refetch = max(0, fetches - tiles_m)
        # An A line is touched during a fraction f_line of a CTA's k-steps (nhwc: the channel
        # blocks it holds, LINE / (C e) of them); the reads of a wave come in lockstep, so the
        # line's last touch in the earlier CTA and its first in the later one are (1 - f_line) of
        # the loads apart, plus all the stores in between (stores come at the CTA's end).
        f_line = min(1.0, LINE / (C * eb)) if nhwc else 0.0
        if per_wave >= tiles_m:
            n_slices = min(float(tiles_n), per_wave / tiles_m + 1.0)
            d_a = (1.0 - f_line) * (tiles_m * a_cta + n_slices * b_slice) + per_wave * y_cta
        else:
            d_a = (1.0 - f_line) * (tiles_m * a_cta + b_slice) + tiles_m * y_cta
        reread_a = refetch / tiles_m * _l2_miss(d_a / cap, width)
    else:
        reread_a = 0.0
    # B re-read by each later wave of the same pass.
    d_wave = per_wave * (a_cta + y_cta) + per_wave / max(1, tiles_m) * b_slice + b_slice
    if tiles_m > per_wave:
        waves_per_pass = _cdiv(tiles_m, per_wave) if tiles_n == 1 else (tiles_m - 1) / per_wave + 1.0
        reread_b = (waves_per_pass - 1.0) * _l2_miss(d_wave / cap, width)
    else:
        reread_b = 0.0
    # input halo shared by CTAs of consecutive waves
    halo = 0.0
    if waves > 1 and R * dh > sh:
        halo_rows = (R * dh - sh) / sh          # output-row overlap of neighbouring bands, in input rows
        halo_sec = halo_rows * wt * (unit / SEC)
        if not nhwc:
            halo_sec *= C
        halo = (waves - 1) * halo_sec * f.l2_halo_miss * _l2_miss(d_wave / cap, width)
    # within-CTA reuses (across filter positions) that miss L1 and L2
    inner = miss2_frac_a * rows_total * tiles_n * spr
    dram_a = min(miss_a, uniq_a * (1.0 + reread_a) + halo + inner)
    dram_b = min(miss_b, uniq_b * (1.0 + reread_b))

    # ---- stores: L2 write-back, dirty sectors left at the end (LRU stack walked back by waves) ----
    capd = gpu.l2_bytes / SEC * f.l2_dirty_capacity
    y_last = (n_last if n_last else per_wave) * y_cta
    y_full = per_wave * y_cta
    # reads of a wave occupy L2 once per distinct tile: min(CTAs, tiles_m) A tiles, and the B slices
    # of the tile_n rows the wave spans
    n_lw = n_last if n_last else per_wave
    r_last = min(n_lw, tiles_m) * a_cta + min(uniq_b, b_slice * (n_lw / max(1, tiles_m) + 1.0))
    r_full = min(per_wave, tiles_m) * a_cta + min(uniq_b, b_slice * (per_wave / max(1, tiles_m) + 1.0))
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

    # ---- assemble metrics -------------------------------------------------------------------------
    per = {m: [0.0, 0.0, 0.0] for m in Mx.METRICS}
    per[Mx.L1_LD_REQUESTS] = [float(ex["req_A"]), float(ex["req_B"]), 0.0]
    per[Mx.L1_LD_SECTORS] = [float(sec_a), float(sec_b), 0.0]
    per[Mx.L1_LD_HITS] = [l1_hit_a, l1_hit_b, 0.0]
    per[Mx.L1_LD_MISSES] = [miss_a, miss_b, 0.0]
    per[Mx.L1_ST_REQUESTS] = [0.0, 0.0, float(ex["req_C"])]
    per[Mx.L1_ST_SECTORS] = [0.0, 0.0, float(sec_c)]
    per[Mx.L2_RD_SECTORS] = [miss_a, miss_b, 0.0]
    per[Mx.L2_RD_MISSES] = [dram_a, dram_b, 0.0]
    per[Mx.L2_RD_HITS] = [miss_a - dram_a, miss_b - dram_b, 0.0]
    per[Mx.L2_WR_SECTORS] = [0.0, 0.0, l2_wr]
    per[Mx.L2_WR_MISSES] = [0.0, 0.0, l2_wr_miss]
    per[Mx.L2_WR_HITS] = [0.0, 0.0, l2_wr - l2_wr_miss]
    per[Mx.DRAM_RD_SECTORS] = [dram_a, dram_b, 0.0]
    per[Mx.DRAM_WR_SECTORS] = [0.0, 0.0, dram_w]
    per[Mx.L2_DIRTY_AT_END] = [0.0, 0.0, dirty]
    out = {}
    for m in Mx.METRICS:
        v = per[m]
        out[m] = v[0] + v[1] + v[2]
    for m in Mx.METRICS:
        v = per[m]
        out[m + ":A"] = v[0]
        out[m + ":B"] = v[1]
        out[m + ":C"] = v[2]

    # ---- timing -------------------------------------------------------------------------------------
    flops = float(layer.flops)
    if kernel.dtype == "fp16" and gpu.tensor_tflops > 0:
        peak = gpu.tensor_tflops * 1e12
    elif kernel.dtype == "fp16":
        peak = 2.0 * gpu.fp32_tflops * 1e12
    else:
        peak = gpu.fp32_tflops * 1e12
    tile_flops = 2.0 * tm * tn * ksteps * tk
    # wave quantization: each wave costs the time one SM needs for its cps CTAs' tile work at the
    # per-SM peak (peak / sms), whether or not every SM is busy
    t_compute = waves * cps * tile_flops / (peak / sms)
    clk = gpu.clock_mhz * 1e6
    l1_bytes = (out[Mx.L1_LD_SECTORS] + out[Mx.L1_ST_SECTORS]) * SEC
    sms_busy = min(sms, ctas)
    t_l1 = l1_bytes / (gpu.l1_bytes_per_clk * clk * sms_busy)
    l2_bytes = (out[Mx.L2_RD_SECTORS] + out[Mx.L2_WR_SECTORS]) * SEC
    t_l2 = l2_bytes / (gpu.l2_gbps * 1e9)
    dram_bytes = (out[Mx.DRAM_RD_SECTORS] + out[Mx.DRAM_WR_SECTORS]) * SEC
    t_dram = dram_bytes / (gpu.dram_gbps * 1e9)
    times = (t_compute, t_l1, t_l2, t_dram)
    ib = max(range(4), key=lambda i: times[i])
    out["flops"] = flops
    out["time_compute_s"] = t_compute
    out["time_l1_s"] = t_l1
    out["time_l2_s"] = t_l2
    out["time_dram_s"] = t_dram
    out["time_s"] = times[ib]
    out["bound"] = _BOUNDS[ib]
    out["ai_l1"] = flops / l1_bytes if l1_bytes else math.inf
    out["ai_l2"] = flops / l2_bytes if l2_bytes else math.inf
    out["ai_dram"] = flops / dram_bytes if dram_bytes else math.inf
    out["waves"] = float(waves)
    return out
