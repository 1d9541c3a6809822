"""Helpers shared by the model's op drivers (`model`, `_wgrad`): units, compulsory traffic, the
store/dirty walk, the metric dict, the time model."""
from __future__ import annotations

import functools
import math

import numpy as np

from simcore import metrics as Mx

from ._reuse import row_units, touched_axes

__all__ = ["TIMING_KEYS", "cdiv", "even_picks", "tile_samples", "row_period", "nsets", "uniq_input", "uniq_inputs",
           "dirty_at_end", "assemble", "layer_time", "machine_of"]

TIMING_KEYS = ("flops", "time_s", "bound", "time_compute_s", "time_l1_s", "time_l2_s", "time_dram_s",
               "ai_l1", "ai_l2", "ai_dram", "waves")
_BOUNDS = ("compute", "l1", "l2", "dram")
# the assembled prediction: a total per key of simcore.metrics, then the key per operand A, B, C
_TOTAL_KEYS = tuple(Mx.METRICS)
_KEYS_ABC = tuple(tuple(f"{key}:{op}" for op in "ABC") for key in _TOTAL_KEYS)
# every key at 0.0 in the output's order (totals, then A, B, C of each): `assemble` copies it and sets
# the rows it has (a dict copy is C-level: 8-11 us -> 4 us a call, measured)
_TEMPLATE = dict.fromkeys(_TOTAL_KEYS + tuple(k for abc in _KEYS_ABC for k in abc), 0.0)
_ABC_OF = dict(zip(_TOTAL_KEYS, _KEYS_ABC))
# the keys `assemble` sets: (totals, A's, B's, C's)
_ASSEMBLED_TOTALS = (Mx.L1_LD_REQUESTS, Mx.L1_LD_SECTORS, Mx.L1_LD_HITS, Mx.L1_LD_MISSES, Mx.L1_ST_REQUESTS,
                     Mx.L1_ST_SECTORS, Mx.L2_RD_SECTORS, Mx.L2_RD_MISSES, Mx.L2_RD_HITS, Mx.L2_WR_SECTORS,
                     Mx.L2_WR_MISSES, Mx.L2_WR_HITS, Mx.DRAM_RD_SECTORS, Mx.DRAM_WR_SECTORS, Mx.L2_DIRTY_AT_END)
_ASSEMBLED = (_ASSEMBLED_TOTALS,) + tuple(tuple(_ABC_OF[key][i] for key in _ASSEMBLED_TOTALS) for i in range(3))
_ASSEMBLED_ALL = tuple(key for keys in _ASSEMBLED for key in keys)


def cdiv(a, b):
    return -(-a // b)


@functools.lru_cache(maxsize=4096)
def row_period(pitch, c0, c1, unit) -> tuple:
    """Bytes [c0, c1) of rows ``pitch`` bytes apart, per residue r of a row modulo the period of its alignment
    to ``unit`` (a line or a sector): (the units row r touches, those it shares with row r + 1). A run of
    rows touches the sum of the first less the sum of the second (each row's units are one increasing
    range, so a unit two rows apart share lies in the row between)."""
    m = np.arange(unit // math.gcd(pitch, unit), dtype=np.int64)
    first, last = (m * pitch + c0) // unit, (m * pitch + c1 - 1) // unit
    return last - first + 1, np.maximum(0, last - ((m + 1) * pitch + c0) // unit + 1)


def even_picks(n: int, k: int) -> np.ndarray:
    """The distinct of ``k`` evenly spaced indices 0 .. n - 1, rounded half to even: numpy's
    ``np.unique(np.linspace(0, n - 1, k).round())`` (the same floats: i (n - 1) / (k - 1), the last n - 1),
    in Python (17 -> 4 us a call, measured; a test checks them equal)."""
    if k <= 1:
        return np.zeros(1, np.int64)
    step = (n - 1) / (k - 1)
    out, last = [], -1
    for i in range(k - 1):
        v = round(i * step)
        if v != last:
            out.append(v)
            last = v
    if n - 1 != last:
        out.append(n - 1)
    return np.array(out, np.int64)


def tile_samples(M: int, tm: int, most: int) -> tuple:
    """(indices of at most ``most`` of the ceil(M / tm) tiles along M, evenly spaced, the last one
    included; how many of the grid's tiles each stands for: a partial last tile for itself, each sampled
    full tile for an equal share of the full ones)."""
    tiles = cdiv(M, tm)
    picks = even_picks(tiles, min(tiles, most))
    partial = tiles * tm > M
    full = len(picks) - partial
    stands = np.full(len(picks), (tiles - partial) / full if full else 0.0)
    if partial:
        stands[-1] = 1.0
    return picks, stands


def nsets(strides, sets, line):
    """Sets of an L1 (linear index) that lines with the given byte strides can reach."""
    g = sets
    for st in strides:
        if st % line:
            return sets
        g = math.gcd(g, (st // line) % sets) if (st // line) % sets else g
    return sets // g


def position_phases(R, S, W, dh, dw, pitch_lines, nphase, reverse=False) -> np.ndarray:
    """L1 set class (0 .. nphase - 1) of each filter position's pixels, nhwc pixels ``pitch_lines`` whole lines
    apart on rows W pixels wide: position t = r S + s reads pixels (r dh W + s dw) pixels on, so positions whose
    offsets differ by other than a multiple of the set step (nphase = the sets over those one position's rows
    reach) put their lines in other sets; ``reverse``: positions walked from the last (dgrad's flipped
    filter)."""
    phase = np.zeros(R * S, np.int64)
    if nphase > 1:
        for t in range(R * S):
            tt = R * S - 1 - t if reverse else t
            phase[t] = ((tt // S) * dh * W + (tt % S) * dw) * pitch_lines % nphase
    return phase


def uniq_input(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, SEC):
    """Compulsory (distinct) input units of ``SEC`` bytes (sectors, or lines with SEC = 128) read by
    the layer: the touched rows and columns are unions of the filter taps' progressions; whole touched
    rows (and whole images) are contiguous runs of bytes, otherwise the units of each touched row are
    counted from its touched columns (`_reuse.row_units`, averaged over row alignments)."""
    return uniq_inputs(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, (SEC,))[0]


def uniq_inputs(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, units) -> tuple:
    """`uniq_input` for each unit size of ``units`` (the touched rows and columns found once)."""
    ht, hruns, wt, hit_w = touched_axes(P, H, sh, ph, dh, R, Q, W, sw, pw, dw, S)
    pix = C * eb if nhwc else eb            # bytes per input column within a row
    planes = 1 if nhwc else C
    out = []
    for SEC in units:
        if pix % SEC == 0:
            out.append(float(N * planes * ht * wt * (pix // SEC)))
        elif wt == W:                        # whole input rows: runs of touched rows are contiguous
            if ht == H:
                out.append(float(cdiv(N * planes * H * W * pix, SEC)))
            else:
                out.append(N * planes * (ht * W * pix + hruns * (SEC - eb)) / SEC)
        else:
            out.append(N * planes * ht * row_units(hit_w, pix, W * pix, SEC))
    return tuple(out)


def dirty_at_end(gpu, f, uniq_c, y_cta, r_full, ctas, per_wave, ctas_wave, r_cap=math.inf, full_reads_ctas=None):
    """(dirty output sectors left in L2 at the end, DRAM write sectors): walking the LRU stack back
    from the end by waves, the last wave's stores, its reads, then full waves of stores and reads
    (``r_full`` sectors each), while the useful capacity (``l2_dirty_capacity``) lasts. The reads are
    distinct lines only until the walk holds the operands' distinct sectors (``r_cap``): a wave that re-reads
    what a later wave reads (a filter every wave reads, an input every column re-reads) adds only its stores
    (seed 4 #269, dgrad 3x3 with 1,024 channels fp16 on an h200 with half its SMs: its filter, 0.3 of the L2,
    read by every wave, counted 18 times left 102,912 sectors dirty, simulated 486,592). A partial last wave
    reads its CTAs' share of a full wave's reads, or all of them once it holds ``full_reads_ctas`` CTAs (where
    given: those that read everything a wave reads, wgrad's)."""
    SEC = gpu.sector_bytes
    capd = gpu.l2_bytes / SEC * f.l2_dirty_capacity
    n_last = ctas % per_wave
    y_last = (n_last if n_last else per_wave) * y_cta
    y_full = per_wave * y_cta
    if n_last and full_reads_ctas is not None:
        share = min(1.0, n_last / min(ctas_wave, full_reads_ctas))
    else:
        share = (n_last if n_last else per_wave) / max(ctas_wave, 1.0)
    r_last = min(r_full * share, r_cap)
    dirty = min(y_last, capd)
    rem = capd - y_last - r_last
    other = uniq_c - y_last
    if rem > 0 and other > 0:
        # waves whose reads are new lines (before the walk holds r_cap), then waves of stores alone
        fresh = (r_cap - r_last) / r_full if r_full > 0 else math.inf
        per = y_full + r_full
        nfit = math.floor(rem / per) if per > 0 else 0
        if fresh < nfit:
            nfit = math.floor(fresh)
        got = min(other, nfit * y_full)
        rem2 = rem - nfit * per
        if got < other and rem2 > 0:
            got += min(other - got, rem2, y_full)       # the next wave's stores (they end it)
            if nfit + 1 > fresh:                        # its reads new only in part, every further wave's not
                rem2 -= y_full + (fresh - nfit) * r_full
                if rem2 > 0:
                    got += min(other - got, rem2)
        dirty += got
    dirty = min(dirty, uniq_c)
    return dirty, max(0.0, uniq_c - dirty)


def operand_rows(ex, sec_a, sec_b, sec_c, l1_hit_a, l1_hit_b, miss_a, miss_b, dram_a, dram_b, dram_w, dirty,
                 uniq_c) -> list:
    """`assemble`'s figures per operand, A's, B's, then C's, each in `_ASSEMBLED`'s key order (45 floats; summed
    over strided dgrad's sub-problems before `rows_dict` makes them a metric dict)."""
    l2_wr = float(sec_c)
    l2_wr_miss = float(min(l2_wr, uniq_c))
    ma, mb, da, db = float(miss_a), float(miss_b), float(dram_a), float(dram_b)
    return [float(ex["req_A"]), float(sec_a), float(l1_hit_a), ma, 0.0, 0.0, ma, da, float(miss_a - dram_a),
            0.0, 0.0, 0.0, da, 0.0, 0.0,
            float(ex["req_B"]), float(sec_b), float(l1_hit_b), mb, 0.0, 0.0, mb, db, float(miss_b - dram_b),
            0.0, 0.0, 0.0, db, 0.0, 0.0,
            0.0, 0.0, 0.0, 0.0, float(ex["req_C"]), l2_wr, 0.0, 0.0, 0.0, l2_wr, l2_wr_miss,
            float(l2_wr - l2_wr_miss), 0.0, float(dram_w), float(dirty)]


def rows_dict(rows) -> dict:
    """The metric dict of `operand_rows`' figures: each total is A + B + C in that order."""
    out = _TEMPLATE.copy()
    # one zip into dict.update: 6.4 -> 3 us a call against a loop over the keys, 7.1 -> 5.5 us against an
    # update per operand (measured)
    out.update(zip(_ASSEMBLED_ALL, [x + y + z for x, y, z in zip(rows[:15], rows[15:30], rows[30:])] + list(rows)))
    return out


def assemble(ex, sec_a, sec_b, sec_c, l1_hit_a, l1_hit_b, miss_a, miss_b, dram_a, dram_b, dram_w, dirty,
             uniq_c) -> dict:
    """The metric dict (totals and per operand) from the model's per-operand figures: L2 reads are
    the L1 misses, L2 write sectors the store sectors (write misses: the distinct output sectors)."""
    return rows_dict(operand_rows(ex, sec_a, sec_b, sec_c, l1_hit_a, l1_hit_b, miss_a, miss_b, dram_a, dram_b,
                                  dram_w, dirty, uniq_c))


def layer_time(layer, gpu, kernel, counts, machine=None, grid=None) -> dict:
    """Time per resource, the bound, FLOPs, arithmetic intensities and waves of one layer whose
    traffic is ``counts`` (the model's predictions, or simulated counts: `analytic.scaling --check`
    puts the simulated traffic through this same time model).

    compute: the waves' tile work at the per-SM peak (`compute_peak`; a wave costs its busiest SM's CTAs:
    the full waves ``cps`` each, the last one ceil(its CTAs / SMs)); L1: (load sectors of every kind,
    cp.async included, + store sectors) over the busy
    SMs' L1 bandwidth; L2 and DRAM: (read + write sectors) over their bandwidths. time = the largest,
    bound = which one."""
    if machine is None:
        machine = machine_of(gpu, kernel)
    cps = machine[0]
    sms = gpu.sms
    SEC = gpu.sector_bytes
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    if grid is None:
        from ._geometry import grid as op_grid
        grid = op_grid(layer, kernel)
    ctas, ksteps, flops = grid
    per_wave = cps * sms
    full_waves, n_last = divmod(ctas, per_wave)
    peak = compute_peak(gpu, kernel)
    tile_flops = 2.0 * tm * tn * ksteps * tk
    slots = full_waves * cps + cdiv(n_last, sms)
    t_compute = slots * tile_flops / (peak / sms)
    clk = gpu.clock_mhz * 1e6
    l1_bytes = (counts[Mx.L1_LD_SECTORS] + counts.get(Mx.L1_LDGSTS_ACCESS_SECTORS, 0)
                + counts.get(Mx.L1_LDGSTS_BYPASS_SECTORS, 0) + counts[Mx.L1_ST_SECTORS]) * SEC
    t_l1 = l1_bytes / (gpu.l1_bytes_per_clk * clk * min(sms, ctas))
    l2_bytes = (counts[Mx.L2_RD_SECTORS] + counts[Mx.L2_WR_SECTORS]) * SEC
    t_l2 = l2_bytes / (gpu.l2_gbps * 1e9)
    dram_bytes = (counts[Mx.DRAM_RD_SECTORS] + counts[Mx.DRAM_WR_SECTORS]) * SEC
    t_dram = dram_bytes / (gpu.dram_gbps * 1e9)
    times = (t_compute, t_l1, t_l2, t_dram)
    ib = 0                                   # the first largest, as max() picks
    for i in (1, 2, 3):
        if times[i] > times[ib]:
            ib = i
    return {"flops": flops, "time_compute_s": t_compute, "time_l1_s": t_l1, "time_l2_s": t_l2,
            "time_dram_s": t_dram, "time_s": times[ib], "bound": _BOUNDS[ib],
            "ai_l1": flops / l1_bytes if l1_bytes else math.inf,
            "ai_l2": flops / l2_bytes if l2_bytes else math.inf,
            "ai_dram": flops / dram_bytes if dram_bytes else math.inf,
            "waves": float(full_waves + (1 if n_last else 0))}


def compute_peak(gpu, kernel) -> float:
    """Peak FLOP/s of ``kernel`` on ``gpu``: the dense tensor-core peak of its dtype for tensor-op kernels
    (ValueError if the GPU's tensor cores do not take it), else the CUDA cores' rate for its dtype
    (`simcore.GPU.simt_tflops_for`: SIMT fp16/bf16 never run at the tensor peak)."""
    if kernel.math == "tensorop":
        return gpu.tensor_tflops_for(kernel.dtype) * 1e12
    return gpu.simt_tflops_for(kernel.dtype) * 1e12


@functools.lru_cache(maxsize=256)
def machine_of(gpu, kernel):
    """Kernel-on-GPU figures shared by every layer: CTAs per SM, L1 ways and sets (cached per equal GPU
    and kernel, both frozen: 10 us of every `predict_layer` call, a tenth of it, went here)."""
    l1 = kernel.l1_config(gpu)
    return kernel.resident_ctas(gpu), l1.ways, l1.sets
