"""The model of grouped and depthwise fprop (MODEL.md section 6a, "Grouped and depthwise layers").

L1 requests and sectors are exact (`analytic._counts_grouped`). A's L1 misses: each CTA's first reads of
its pixels in its groups' channel range, plus the re-reads (by later taps of a group, by later groups)
whose window of other lines does not fit the L1 sets they map to (`reuse_misses`, `a_misses`). B: each
CTA's filter slice once from L2. DRAM reads: x's and w's distinct sectors. The write side comes from the
dense engine on the layer's dense part (`dense_equivalent`), scaled to the exact store sectors.
"""
from __future__ import annotations

import dataclasses
import functools
import math

from simcore import metrics as Mx
from traces.grouped import group_mode, groups_per_cta

from ._common import cdiv, layer_time, nsets, uniq_input
from ._counts import l1_counts
from ._counts_grouped import grouped_a_blocks
from ._geometry import _fprop, grid


def dense_equivalent(layer, kernel):
    """(the dense layer of one sub-problem, number of sub-problems) of a grouped ``layer``."""
    cg, kg = layer.c_per_group, layer.k_per_group
    tiles_n = cdiv(layer.k, kernel.tile_n)
    if group_mode(layer, kernel) == "multiple":
        channels, filters, copies = min(groups_per_cta(layer, kernel) * cg, layer.c), kernel.tile_n, tiles_n
    else:
        channels, filters, copies = cg, kg, layer.groups
    sub = dataclasses.replace(layer, c=channels, k=filters, groups=1, name=f"{layer.name}[dense part]")
    return sub, copies


def _sectors_per_pixel(lo, hi, pitch, eb, sec):
    """Distinct sectors per pixel that channels [lo, hi) of consecutive pixels (pitch bytes apart) cover:
    counted cyclically over one period of the pixel alignments (lcm(pitch, sec) bytes), so pixels
    narrower than a sector share theirs."""
    period = sec // math.gcd(pitch, sec)
    nsec = period * pitch // sec
    mark = [False] * nsec
    for i in range(period):
        base = i * pitch
        for x in range((base + lo * eb) // sec, (base + hi * eb - 1) // sec + 1):
            mark[x % nsec] = True
    return sum(mark) / period


def a_misses(layer, kernel, sec, cross_miss, intra_miss=0.0) -> tuple:
    """A's L1 misses (first reads by each CTA, re-reads): per CTA, the distinct sectors it reads (its tile's pixels, `_tile_pixels`, x the
    channel range of its groups, blocks past a group's end included), plus the fraction ``cross_miss`` of
    the re-reads by its later groups (each group's k-steps read their own channel blocks' sectors of the
    same pixels) and the fraction ``intra_miss`` of a group's re-reads of a pixel at its later taps
    (`reuse_misses`)."""
    tn, tk, eb = kernel.tile_n, kernel.tile_k, kernel.elem_bytes
    pixels = _tile_pixels(layer, kernel, sec)[0]
    cg, kg, gpc = layer.c_per_group, layer.k_per_group, groups_per_cta(layer, kernel)
    per_pixel = 0.0
    for col in range(cdiv(layer.k, tn)):
        first = col * tn // kg
        last = min(first + gpc, layer.groups) - 1
        if last < first:
            continue
        hi = min(last * cg + (cdiv(cg, tk) - 1) * tk + tk, layer.c)
        per_pixel += _sectors_per_pixel(first * cg, hi, layer.c * eb, eb, sec)
    per_group = sum(mult * _sectors_per_pixel(start, start + width, layer.c * eb, eb, sec)
                    for start, width, mult in grouped_a_blocks(layer, kernel, gpc).tolist())
    return pixels * per_pixel, pixels * (cross_miss * max(0.0, per_group - per_pixel) + intra_miss * per_group)


def _tile_pixels(layer, kernel, sec):
    """(input pixels all M tiles read, counted once per tile; those of one tile). A tile of T >= Q outputs
    reads its share of the layer's distinct input pixels plus the halo adjacent tiles share (the input rows
    the windows of consecutive output rows share, and the pixels of consecutive output pixels); a tile of
    T < Q outputs (part of one output row) reads the filter's rows x the columns its outputs reach."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    M, tm = layer.gemm_m, min(kernel.tile_m, layer.gemm_m)
    pixels = uniq_input(layer.n, 1, layer.h, layer.w, layer.p, layer.q, layer.r, layer.s, sh, sw, ph, pw, dh, dw,
                        sec, True, sec)
    tiles_m = cdiv(M, tm)
    share = pixels * tm / M
    if tm >= layer.q:
        tile = share + max(0, (layer.r - 1) * dh + 1 - sh) * layer.w + max(0, (layer.s - 1) * dw + 1 - sw)
    else:
        tile = ((layer.r - 1) * dh + 1) * min(layer.w, (tm - 1) * sw + (layer.s - 1) * dw + 1)
    tile = min(tile, pixels)
    return min(pixels * tiles_m, pixels + (tiles_m - 1) * max(0.0, tile - share)), tile


# The cross-group reuse window against the L1: the re-reads start to miss above THRASH_LO and all miss above
# THRASH_HI (x: co-resident CTAs' tile pixels per line of the L1 sets they reach). Read off the simulated
# depthwise and ResNeXt layers of mobilenet_v2, efficientnet_b0 and resnext50_32x4d on v100 (MODEL.md,
# "Grouped and depthwise layers"); not yet a calibrated `ReuseFactors` field.
THRASH_LO = 0.95
THRASH_HI = 1.5


@functools.lru_cache(maxsize=1024)
def _axis_taps(out_size, in_size, stride, pad, dil, taps):
    """{((tap, output index - the first tap's), ...): input coordinates}: the taps that read each input
    coordinate along one axis (ascending), with their outputs relative to the first tap's."""
    out = {}
    for x in range(in_size):
        hit = [(t, (x + pad - t * dil) // stride) for t in range(taps)
               if (x + pad - t * dil) % stride == 0 and 0 <= (x + pad - t * dil) // stride < out_size]
        if hit:
            key = tuple((t, o - hit[0][1]) for t, o in hit)
            out[key] = out.get(key, 0) + 1
    return out


def _thrash(x) -> float:
    return min(1.0, max(0.0, (x - THRASH_LO) / (THRASH_HI - THRASH_LO)))


def reuse_misses(layer, kernel, gpu, machine, valid_mrs) -> tuple:
    """(fraction of the re-reads by a CTA's next group that miss L1, re-reads inside a group that miss per
    pixel and group). A pixel is read by its taps in filter-position order; between two reads, d filter
    positions apart, by outputs dm GEMM rows apart, each co-resident CTA (cps, or fewer when the grid is
    smaller than a wave) reads about d tile_m - dm rows, at most its tile's pixels (`_tile_pixels`), into
    the L1 sets that lines a pixel pitch apart reach: x = CTAs x lines / (ways x those sets), and the miss
    probability rises linearly from THRASH_LO to THRASH_HI; from a group's last tap to the next group's
    first tap, d = R S - (last - first)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    cps, ways, sets = machine
    ctas = cdiv(layer.gemm_m, kernel.tile_m) * cdiv(layer.k, kernel.tile_n)
    resident = max(1.0, min(float(cps), ctas / gpu.sms))      # per busy SM
    reach = nsets((layer.c * kernel.elem_bytes,), sets, gpu.line_bytes)
    # lines of a pixel's channel window (tile_k elements) in those sets: it straddles a line boundary
    # into another set when the pixels reach only some of the sets; pixels narrower than a line share it
    per_pixel = 1.0 + (kernel.tile_k - 1) * kernel.elem_bytes / gpu.line_bytes if reach == sets else 1.0
    per_pixel = min(per_pixel, layer.c * kernel.elem_bytes / gpu.line_bytes)   # narrow pixels share lines
    tile_px = _tile_pixels(layer, kernel, gpu.sector_bytes)[1]
    scale = resident * per_pixel / (ways * reach)
    tm = min(kernel.tile_m, layer.gemm_m)
    rs = layer.r * layer.s
    cross = intra = total = 0.0
    # a k-step's rows whose tap falls in the padding read nothing
    valid = valid_mrs / (layer.gemm_m * rs)
    for htaps, nh in _axis_taps(layer.p, layer.h, sh, ph, dh, layer.r).items():
        for wtaps, nw in _axis_taps(layer.q, layer.w, sw, pw, dw, layer.s).items():
            reads = sorted((r * layer.s + s, dp * layer.q + dq) for r, dp in htaps for s, dq in wtaps)
            for (t0, m0), (t1, m1) in zip(reads, reads[1:]):
                intra += nh * nw * _thrash(scale * min(tile_px, ((t1 - t0) * tm + (m1 - m0)) * valid))
            (t0, m0), (t1, m1) = reads[-1], reads[0]
            cross += nh * nw * _thrash(scale * min(tile_px, ((rs - t0 + t1) * tm + (m1 - m0)) * valid))
            total += nh * nw
    return (cross / total, intra / total) if total else (0.0, 0.0)


def predict_grouped(layer, gpu, kernel, f, machine, predict_gemm) -> dict:
    """Every metric of a grouped fprop layer; ``predict_gemm``: the dense engine (`model._predict_gemm`)."""
    sub, copies = dense_equivalent(layer, kernel)
    part = predict_gemm(_fprop(sub, kernel), gpu, kernel, f, machine, sub, timing=False)
    part.pop("_uniq_a", None)
    total = {key: value * copies for key, value in part.items()}
    ex = l1_counts(layer, kernel)
    eb, sec = kernel.elem_bytes, gpu.sector_bytes
    ctas = cdiv(layer.gemm_m, kernel.tile_m) * cdiv(layer.k, kernel.tile_n)
    # B: one read of each CTA's filter slice from L2, the filter tensor once from DRAM
    slice_b = cdiv(min(kernel.tile_n, layer.k) * layer.r * layer.s * layer.c_per_group * eb, sec)
    miss_b = min(float(ex["sec_B"]), float(ctas * slice_b))
    dram_b = min(miss_b, float(cdiv(layer.params * eb, sec)))
    first, again = a_misses(layer, kernel, sec, *reuse_misses(layer, kernel, gpu, machine, ex["valid_mrs"]))
    miss_a = min(float(ex["sec_A"]), first + again)
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    uniq_x = uniq_input(layer.n, layer.c, layer.h, layer.w, layer.p, layer.q, layer.r, layer.s, sh, sw, ph, pw,
                        dh, dw, eb, True, sec)
    dram_a = min(miss_a, uniq_x)
    per_op = {
        "A": (ex["req_A"], ex["sec_A"], miss_a, dram_a),
        "B": (ex["req_B"], ex["sec_B"], miss_b, dram_b),
    }
    for op, (req, sectors, miss, dram) in per_op.items():
        total[f"{Mx.L1_LD_REQUESTS}:{op}"] = float(req)
        total[f"{Mx.L1_LD_SECTORS}:{op}"] = float(sectors)
        total[f"{Mx.L1_LD_MISSES}:{op}"] = miss
        total[f"{Mx.L1_LD_HITS}:{op}"] = sectors - miss
        total[f"{Mx.L2_RD_SECTORS}:{op}"] = miss
        total[f"{Mx.L2_RD_MISSES}:{op}"] = dram
        total[f"{Mx.L2_RD_HITS}:{op}"] = miss - dram
        total[f"{Mx.DRAM_RD_SECTORS}:{op}"] = dram
    # stores: the exact sectors; the write side of the copies scaled to them (the last column's copy stores
    # only K - (tiles_n - 1) TN filters)
    stored = total[f"{Mx.L1_ST_SECTORS}:C"]
    scale = ex["sec_C"] / stored if stored else 0.0
    for key in (Mx.L2_WR_SECTORS, Mx.L2_WR_HITS, Mx.L2_WR_MISSES, Mx.DRAM_WR_SECTORS, Mx.L2_DIRTY_AT_END):
        total[f"{key}:C"] *= scale
        total[key] = total[f"{key}:C"]
    total[f"{Mx.L1_ST_REQUESTS}:C"] = float(ex["req_C"])
    total[f"{Mx.L1_ST_SECTORS}:C"] = float(ex["sec_C"])
    for key in (Mx.L1_LD_REQUESTS, Mx.L1_LD_SECTORS, Mx.L1_LD_HITS, Mx.L1_LD_MISSES, Mx.L1_ST_REQUESTS,
                Mx.L1_ST_SECTORS, Mx.L2_RD_SECTORS, Mx.L2_RD_MISSES, Mx.L2_RD_HITS, Mx.DRAM_RD_SECTORS):
        total[key] = sum(total.get(f"{key}:{op}", 0.0) for op in "ABC")
    total.update(layer_time(layer, gpu, kernel, total, machine, grid(layer, kernel)))
    return total
