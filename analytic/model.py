"""`predict_layer` / `predict_network`: the closed-form traffic, timing and roofline model.

See analytic/MODEL.md for the formulas. Cost per layer is independent of batch size and of the
number of CTAs: loops run over filter positions, channel-block residue classes (<= 32), co-resident
CTA slots (<= CTAs per SM) and bounded periods.
"""
from __future__ import annotations

import math

import numpy as np

from traces.stream import check_types
from traces.kernel import KernelConfig

from ._common import TIMING_KEYS, assemble, cdiv as _cdiv, layer_time, machine_of as _machine
from ._common import operand_rows, rows_dict
from ._common import nsets as _nsets, position_phases
from ._counts import block_lines_per_row, l1_counts, lines_per_row
from ._geometry import (b_hold_in_set, b_line_hold, dgrad_a_shifts, dgrad_b_classes, dgrad_step_overlap,
                        dgrad_subproblems, geometry, geometry_check, strided_starts)
from ._l2 import (NO_EXCESS, NO_TABLE, SPREAD_SAMPLES, banded_refetch_misses, blocks_dispersion, cliff_params,
                  l2_miss_prob, pattern_cliff, swept_rereads, tile_refetch_misses)
from ._memo import memo
from ._joint_l2 import joint_columns
from ._reuse import halo_misses, l1_configs
from ._l1_rounds import a_hit_share, b_hit_share
from ._compulsory import cta_sectors
from ._filter_gaps import b_line_gaps, one_gap
from ._followers import follower_misses, follower_windows, mean_gap
from ._schedule import (CFG_AREP, CFG_PREV_A, CFG_SUB, SM_SAMPLES, filters_in_step, grid_schedule, l2_classes,
                        refetch_waves, sm_config_summary, tile_m_classes, with_columns)
from ._dispatch import dispatch, dy_reread_misses, sm_tables, strided_blocks
from ._store_only import store_only_rereads
from ._timeline import lead_share, lockstep_lead_share
from ._issue_order import one_back_tables, relative_valid
from ._tiers import tiered
from ._set_phase import dgrad_phase_share, fprop_block_phases
from ._set_thrash import b_overfull_share
from ._window import a_window, nchw_window_rounds, row_run_sectors
from ._stores import row_lines, shared_dirty_bound, stores_in_l2, strided_store_lines, wave_store_lines
from ._tensorop import bypasses_l1, operand_kinds, relabel_loads
from ._wave_windows import grid_excess
from ._refetch_window import near_cliff, refetch_window_table
from ._wgrad import predict_wgrad
from simcore import metrics as Mx
from .factors import resolve_factors

__all__ = ["predict_layer", "predict_network", "layer_time", "TIMING_KEYS"]


_NO_CORR = np.zeros((1, 1), np.float64)  # no issue-order corrections
_NO_REL = np.ones((1, 1), np.float64)
_NO_B = np.ones((1, 1), np.float64)
_NO_CLASS = np.zeros((1, 4), np.float64)  # nchw: no within-CTA L2 term
_NO_ROUNDS = np.zeros((2, 0), np.float64)  # a window of d positions holds d rounds' share of A's, B's lines
FOLLOWER_SAMPLES = 4       # waves sampled by `_followers.follower_windows`
FOLLOWER_REACH = 0.25      # a round's CTA steps below this share of the L2 leave every follower a hit
_APART = 1e12                               # the operands' lines in disjoint sets: no cross term


def _check_modelled(layer, gpu, kernel):
    check_types(layer, gpu, kernel)
    geometry_check(layer, kernel)


def predict_layer(layer, gpu, kernel=None, factors=None) -> dict:
    """Predict every metric of ``simcore.metrics`` (totals and per operand, floats) plus timing keys.

    ``factors``: an `analytic.ReuseFactors`, a path to its JSON file, or None (defaults). Every
    ``kernel.op`` (fprop, dgrad, wgrad; MODEL.md section 10); strided dgrad with dilation > 1 raises
    ValueError, as CUTLASS refuses it.
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


@tiered
def _predict(layer, gpu, kernel, f, machine):
    """One layer's prediction, a new dict (`_predict_shape`'s, memoized by the layer's shape)."""
    return dict(_predict_shape(layer, gpu, kernel, f, machine))


@memo(1024)          # a prediction's dict holds about 7 KB: 7 MB at most
def _predict_shape(layer, gpu, kernel, f, machine):
    """One layer: wgrad's own driver, grouped fprop's dense sub-problems, or the op's `Geometry` and the GEMM
    engine. Memoized by the layer's shape, the GPU, kernel and factors: a network's layers of one shape (resnet50's
    53 conv layers have 23 shapes, the grouped networks' 186 have 100) are predicted once. No figure of the
    prediction names its layer (`_memo`)."""
    if layer.groups > 1:
        from ._grouped_model import predict_grouped
        return predict_grouped(layer, gpu, kernel, f, machine)
    if kernel.op == "wgrad":
        return predict_wgrad(layer, gpu, kernel, f, machine, l1_counts(layer, kernel))
    if kernel.op == "dgrad" and layer.stride != (1, 1):
        return _predict_strided_dgrad(layer, gpu, kernel, f, machine)
    return _predict_gemm(geometry(layer, kernel), gpu, kernel, f, machine, layer)


@memo(256)
def _filter_stay(layer, kernel, gpu, machine) -> int:
    """Strided dgrad: k-steps a filter sector stays in the L1 (at most 64): the L1's lines that the SM's
    A windows (T_m dy rows each) leave, over the lines a k-step adds (a window's share of new rows at each
    of a block's taps; of the T_k filter rows, the part that the tap's step, stride_w C e bytes, moves
    past a line); 0 where the windows fill the L1 (they are read in step: the same k-step)."""
    cps, ways, sets = machine
    eb, line = kernel.elem_bytes, gpu.line_bytes
    window = kernel.tile_m * lines_per_row(layer.k, kernel.tile_k, eb, layer.k * eb, line, line)
    loading = [nr * ns for *_rest, nr, ns in strided_starts(layer) if nr and ns]
    taps = sum(loading) / len(loading)
    new_b = kernel.tile_k * min(1.0, layer.stride[1] * layer.c * eb / line)
    return min(64, int(max(0.0, ways * sets - cps * window) / (cps * (window / taps + new_b))))


@memo(256)
def _filter_sectors_read(layer, kernel, sec) -> float:
    """Strided dgrad: the filter sectors (KRSC, its base on the sector grid) that some loading sub-problem reads:
    the taps (r, s) of every sub-problem the dispatcher does not skip (`strided_starts`), all of them unless dx
    is smaller than a stride."""
    eb = kernel.elem_bytes
    (sh, sw), read = layer.stride, np.zeros((layer.r, layer.s), np.bool_)
    for start_r, start_s, *_rest in strided_starts(layer):
        read[start_r::sh, start_s::sw] = True
    if read.all():
        return float(_cdiv(layer.params * eb, sec))
    first = ((np.arange(layer.k)[:, None] * layer.r * layer.s + np.flatnonzero(read)[None, :]) * layer.c * eb).ravel()
    spans = [np.arange(f // sec, (f + layer.c * eb - 1) // sec + 1) for f in first]
    spans = np.concatenate(spans) if spans else []
    return float(np.unique(spans).size)


def _signature(geo) -> tuple:
    """Every figure of a sub-problem's geometry that the GEMM engine reads."""
    return (geo.win, geo.gemm_n, geo.ksteps, tuple(geo.counts.items()), geo.b_rows, geo.row_b, geo.pos_b,
            geo.lpr_b, geo.ncls.tobytes(), geo.uniq_b, geo.share_b_blk, geo.reuse_b1, geo.flops)


@memo(256)
def _distinct_subproblems(layer, kernel) -> tuple:
    """Strided dgrad's sub-problems (`dgrad_subproblems`) alike in every figure the GEMM engine reads,
    gathered: ((Geometry, its members' indices among `dgrad_subproblems`), ...); a group counts as many times as it
    has members. alexnet conv1 has 9 distinct of 16 (a100: 1.23-1.25 -> 0.90-1.19 ms a prediction when each is
    computed once)."""
    groups = {}
    for i, (geo, _share) in enumerate(dgrad_subproblems(layer, kernel)):
        groups.setdefault(_signature(geo), (geo, []))[1].append(i)
    return tuple((geo, np.array(members, np.float64)) for geo, members in groups.values())


def _predict_strided_dgrad(layer, gpu, kernel, f, machine):
    """Strided dgrad: the sum of its sub-problems (`_geometry.dgrad_subproblems`), each on the GEMM
    engine with the L1 co-residency of the whole grid, with dy's compulsory reads shared: every sub-problem reads (nearly) all of dy,
    one after the other in block order, so a later one finds it in L2 unless the tiles between evict
    it (their traffic against the L2, the engine's cliff), the store-only CTAs' stores among them
    (`_store_only`); co-resident tiles of one place in other sub-problems are repeats where in step
    (`_geometry.dgrad_a_shifts`)."""
    ex = l1_counts(layer, kernel)
    subs = dgrad_subproblems(layer, kernel)
    groups = _distinct_subproblems(layer, kernel)
    # co-residency on the SMs comes from the whole grid, whose loading sub-problems run side by side in
    # block order (tile_m_per_filter CTAs each): a co-resident or previous CTA shares this one's filter
    # sectors only if its sub-problem is of the same class (`_geometry.dgrad_b_classes`), and reads its
    # A window if it has the same place in its sub-problem (`_dgrad_places.a_key`); each sub-problem's own
    # grid has its wave statistics (L2)
    cps, swz = machine[0], kernel.swizzle_log
    tpf = _cdiv(layer.n * _cdiv(layer.h, layer.stride[0]) * _cdiv(layer.w, layer.stride[1]), kernel.tile_m)
    bcls = dgrad_b_classes(layer, kernel, gpu.sector_bytes)
    # positional only: a keyword argument sends Numba's dispatcher through its slow path (0.35 ms a call, measured)
    tables = _dispatch_tables(layer, kernel, gpu.sms, cps, tpf) or (None, None, 1.0, None, None)
    # a slot that shares an earlier slot's class of filter sectors finds, at one k-step, the sectors both
    # sub-problems' taps read then: all of them for the same sub-problem, a share for another
    # (`_geometry.dgrad_step_overlap`, per pair: CFG_BREP_SHARE)
    overlap = None
    if len(set(bcls.tolist())) < bcls.shape[0]:
        overlap = dgrad_step_overlap(layer, kernel, gpu.sector_bytes, _filter_stay(layer, kernel, gpu, machine))
    cfg = sm_config_summary(tpf * bcls.shape[0], _cdiv(layer.c, kernel.tile_n), swz, gpu.sms, cps, SM_SAMPLES,
                            tpf, bcls, *dgrad_a_shifts(layer, kernel, gpu.line_bytes), *tables, overlap)
    cfg = filters_in_step(cfg, _lockstep_share(layer, kernel, gpu, machine, tpf))
    # each group of alike sub-problems sees its own CTAs' configurations (CFG_SUB): their windows differ (2 x 2
    # taps against 1), and so does where they run (seed 9 #65: the first sub-problem's tiles lead their SMs, the
    # later ones find their windows read)
    stats = {}
    acc = None
    uniq_sum = reread_sum = 0.0
    # each configuration's group (its sub-problem's): one look-up, not an `np.isin` a group
    group_of = np.empty(len(subs), np.int64)
    for g, (_geo, subs_of) in enumerate(groups):
        group_of[subs_of.astype(np.int64)] = g
    cfg_group = group_of[cfg[:, CFG_SUB].astype(np.int64)]
    counted = subproblem_fills_wave(layer, kernel, gpu.sms, cps, tpf)
    same_loop = _co_resident_loops(layer, kernel, gpu.sms, cps, tpf)
    for g, (geo, subs_of) in enumerate(groups):
        mult = subs_of.shape[0]
        key = (_cdiv(geo.win.n * geo.win.p * geo.win.q, kernel.tile_m), _cdiv(geo.gemm_n, kernel.tile_n))
        if key not in stats:
            stats[key] = grid_schedule(key[0], key[1], swz, gpu.sms, cps)[1]
        mine = cfg_group == g
        sched = {key: (cfg[mine] if mine.any() else cfg, stats[key])}
        rows, uniq_a, reread_a = _predict_gemm(geo, gpu, kernel, f, machine, layer, timing=False, sched=sched,
                                               counted=counted, followers=False, same_loop=same_loop)
        uniq_sum += mult * uniq_a
        reread_sum += mult * reread_a
        # the sub-problems' per-operand figures summed (45 of them), then made a dict once (a dict a sub-problem,
        # summed over its ~200 keys: with the lockstep share's closed form, the dgrad benchmark's strided layers
        # 45.6 -> 39.2 ms a pass, measured)
        if acc is None:
            acc = [mult * x for x in rows]
        else:
            acc = [x + mult * y for x, y in zip(acc, rows)]
    total = relabel_loads(rows_dict(acc), operand_kinds(kernel, layer))
    # store-only CTAs (no tap reaches their rows) write zeros: scale the output side to every store
    stored = total[Mx.L1_ST_SECTORS]
    if stored and ex["sec_C"] != stored:
        scale = ex["sec_C"] / stored
        for key in (Mx.L2_WR_SECTORS, Mx.L2_WR_HITS, Mx.L2_WR_MISSES, Mx.DRAM_WR_SECTORS, Mx.L2_DIRTY_AT_END):
            for k in (key, key + ":C"):
                total[k] *= scale
    eb = kernel.elem_bytes
    SEC, LINE = gpu.sector_bytes, gpu.line_bytes
    uniq_dy = float(_cdiv(layer.n * layer.p * layer.q * layer.k * eb, SEC))
    # the sub-problems' dirty dx shares one L2 with dy, which each of them re-reads (`_stores.shared_dirty_bound`)
    uniq_dx = float(_cdiv(layer.n * layer.h * layer.w * layer.c * eb, SEC))
    ctas = sum(_cdiv(g.win.m, kernel.tile_m) for g, _ in subs) * _cdiv(layer.c, kernel.tile_n)
    nload = int((_strided_steps(layer, kernel)[1] >= 0).sum())      # the loading sub-problems: each reads dy once
    bound = shared_dirty_bound(gpu, f, uniq_dx, ctas,
                               uniq_dy + _filter_sectors_read(layer, kernel, SEC), uniq_dy * nload / max(ctas, 1))
    extra = total[Mx.L2_DIRTY_AT_END] - bound
    if extra > 0.0:
        for k in (Mx.L2_DIRTY_AT_END, Mx.L2_DIRTY_AT_END + ":C"):
            total[k] -= extra
        for k in (Mx.DRAM_WR_SECTORS, Mx.DRAM_WR_SECTORS + ":C"):
            total[k] += extra
    # in block order (tile_m fastest) sub-problem f + 1's tile i follows f's tile i by the tile_m_per_filter
    # blocks of one sub-problem: in the same wave when that is under a wave, else after their lines
    cap_lines = gpu.l2_bytes / LINE * f.l2_capacity
    if len(subs) > 1:
        per_wave = machine[0] * gpu.sms
        # a dx sector that the next sub-problem stores again (pixels of consecutive w phases share it where C x
        # elem bytes is under a sector: the sub-problems' distinct sectors past dx's) was last stored tpf blocks
        # back, by its tile i: dy's window; a sub-problem's own repeated stores of a sector are at once
        p_next = _next_subproblem_miss(layer, kernel, gpu, f, subs, tpf, per_wave, cap_lines)
        again = min(total[Mx.L2_WR_HITS], max(0.0, strided_store_lines(layer, kernel, SEC, layer.c) - uniq_dx)) * p_next
        for key in (Mx.L2_WR_HITS, Mx.L2_WR_HITS + ":C"):
            total[key] -= again
        for key in (Mx.L2_WR_MISSES, Mx.L2_WR_MISSES + ":C", Mx.DRAM_WR_SECTORS, Mx.DRAM_WR_SECTORS + ":C"):
            total[key] += again
        if tpf >= per_wave:
            reread = (len(subs) - 1) * uniq_dy * p_next
            fix = min(uniq_sum, uniq_dy + reread) - uniq_sum
        elif len(subs) * tpf * _cdiv(layer.c, kernel.tile_n) > per_wave:
            # later waves: every re-read of a tile's dy rows on the whole grid's rounds, side by side and by
            # later waves (`_later_wave_rereads`), the sub-problems' own grids' re-reads by later waves replaced
            # (67 #86: each sub-problem's grid alone re-read dy once a band of columns, 0.7 x its sectors more a
            # sub-problem than the whole grid does)
            reread = _later_wave_rereads(layer, kernel, gpu, f, len(subs), tpf, per_wave, uniq_dy, cap_lines,
                                         total[Mx.L2_WR_SECTORS] * SEC / LINE)
            fix = uniq_dy + reread - uniq_sum - reread_sum
        else:
            reread = _coresident_rereads(subs, layer, kernel, gpu, f, uniq_dy, cap_lines, tpf, per_wave)
            fix = min(uniq_sum, uniq_dy + reread) - uniq_sum
        fix = min(fix, total[Mx.L2_RD_HITS + ":A"])
        for key in (Mx.DRAM_RD_SECTORS, Mx.DRAM_RD_SECTORS + ":A", Mx.L2_RD_MISSES, Mx.L2_RD_MISSES + ":A"):
            total[key] = max(0.0, total[key] + fix)
        for key in (Mx.L2_RD_HITS, Mx.L2_RD_HITS + ":A"):
            total[key] = max(0.0, total[key] - fix)
    # every filter sector some sub-problem reads comes from DRAM at least once: the groups' own counts (each
    # bounded by its L1 misses) can fall short where they share sectors (65 #2, C 5 fp16 11x11 stride 4: 908 filter
    # sectors, 428 predicted once each group saw only its own CTAs' configurations)
    short = _filter_sectors_read(layer, kernel, SEC) - total[Mx.DRAM_RD_SECTORS + ":B"]
    if short > 0.0:
        for key in (Mx.DRAM_RD_SECTORS, Mx.DRAM_RD_SECTORS + ":B", Mx.L2_RD_MISSES, Mx.L2_RD_MISSES + ":B"):
            total[key] += short
        for key in (Mx.L2_RD_HITS, Mx.L2_RD_HITS + ":B"):
            total[key] = max(0.0, total[key] - short)
    # store-only CTAs' stores between two reads of dy (`_store_only`): those re-reads come from DRAM too
    more = min(store_only_rereads(layer, kernel, gpu, f, machine, tpf, uniq_dy, cap_lines), total[Mx.L2_RD_HITS + ":A"])
    if more > 0.0:
        for key in (Mx.DRAM_RD_SECTORS, Mx.DRAM_RD_SECTORS + ":A", Mx.L2_RD_MISSES, Mx.L2_RD_MISSES + ":A"):
            total[key] += more
        for key in (Mx.L2_RD_HITS, Mx.L2_RD_HITS + ":A"):
            total[key] -= more
    # exact L1 request / sector counts of the whole layer
    for key, name, ops in ((Mx.L1_LD_REQUESTS, "req", "AB"), (Mx.L1_LD_SECTORS, "sec", "AB"),
                           (Mx.L1_ST_REQUESTS, "req", "C"), (Mx.L1_ST_SECTORS, "sec", "C")):
        for op in ops:
            total[f"{key}:{op}"] = float(ex[f"{name}_{op}"])
        total[key] = sum(total[f"{key}:{op}"] for op in "ABC")
    ksteps = max((g.ksteps for g, _ in subs), default=0)
    total.update(layer_time(layer, gpu, kernel, total, machine, (max(ctas, 1), ksteps, float(layer.flops))))
    return total


@memo(256)
def _co_resident_loops(layer, kernel, sms, cps, tpf) -> float:
    """Strided dgrad: the share of the first wave's co-resident CTA pairs (blocks b and b + j x sms on one SM,
    j < cps) whose k-loops have the same length (sub-problems of as many taps; store-only blocks none): those
    run in step. Replayed (scratch `l1sdnet.py`), resnet50 layer3.0.conv2 dgrad on a v100 at batch 32: SM 0
    holds block 0 (2 x 2 taps) and block 80 (2 x 1), whose k-step lines are in one set of four; 73 % of A's
    re-reads one tap back hit, their windows 128-160 lines of 192 ways where the other CTA reads another set,
    past 400 where it reads the same."""
    _blk_tm, _blk_tn, steps = _strided_grid(layer, kernel, tpf)
    n = steps.shape[0]
    first = steps[:min(n, sms)]
    same = pairs = 0
    for j in range(1, cps):                     # the first wave's slot j of each SM (numpy: 0.18 ms -> 0.02 ms)
        other = steps[j * sms:min(n, (j + 1) * sms)]
        pairs += other.shape[0]
        same += int((first[:other.shape[0]] == other).sum())
    return same / pairs if pairs else 1.0


def subproblem_fills_wave(layer, kernel, sms, cps, tpf) -> bool:
    """Strided dgrad: whether a sub-problem's grid (tile_m_per_filter ``tpf`` x the column tiles) fills the
    SMs' ``cps`` x ``sms`` slots. Blocks run in order, a sub-problem's after the one before, so its CTAs then
    share their SMs with its own tiles alone (but where a wave straddles two sub-problems), whose dy rows are
    other than this tile's: its reuses one tap back are judged on their counted windows, as a dense layer's
    are (`_predict_gemm`'s ``counted``). Where sub-problems share a wave, co-resident tiles of one place in
    other sub-problems read the same dy rows, and the window stays the configurations' averaged one
    (`_dgrad_places.a_key`). MODEL.md section 9 ("Strided dgrad's counted windows where a sub-problem fills a
    wave"): 5 #341 L2 -75.3 -> -33.0 %, 67 #69 -35.0 -> -26.2 %; held out 56 #30 -39.4 -> +14.0 %."""
    return tpf * _cdiv(layer.c, kernel.tile_n) >= cps * sms


def _next_subproblem_miss(layer, kernel, gpu, f, subs, tpf, per_wave, cap_lines) -> float:
    """Strided dgrad whose sub-problems each fill a wave or more (tile_m_per_filter >= a wave's CTAs): the L2 miss
    probability of a dy line's read by sub-problem f + 1's tile i, its previous read being f's tile i, tpf blocks
    before. Between lie the other tiles of f's sweep (their rows span all of dy once), the dx lines their band of
    columns stores (`_stores.strided_store_lines`: a stride's pixels touch more lines than their bytes fill) and
    their filters. But the CTAs of the first read's wave read their rows beside it, some before it, and those of
    the last read's wave some after it: their dy lines leave the window, between none and a wave's (per_wave /
    tpf of dy), uniform (`_l2.SPREAD_SAMPLES` places). Seed 66 #76 (11x11 stride 4, C 6 fp32, 111 tiles a
    sub-problem on 60 slots; scratch `stackdist_line.py`, the L2 stream's distinct lines since the line's last
    touch): the re-reads lie at 0.65-1.05 of the L2 (0.73-1.04 here); 65 #55 (200 tiles, 56 slots) 0.65-0.95,
    mean 0.82 (0.74-0.90, mean 0.82)."""
    eb, line = kernel.elem_bytes, gpu.line_bytes
    dy_lines = _cdiv(layer.n * layer.p * layer.q * layer.k * eb, line)
    band = min(layer.c, (1 << kernel.swizzle_log) * kernel.tile_n)
    gap = dy_lines + (strided_store_lines(layer, kernel, line, band) + _cdiv(layer.params * eb, line)) / len(subs)
    shrink = dy_lines * min(1.0, per_wave / tpf)        # up to a wave's dy lines out of the window
    ways, cliff = float(gpu.l2_ways), cliff_params(gpu, f)
    miss = 0.0
    for i in range(SPREAD_SAMPLES):
        x = gap - (i + 0.5) / SPREAD_SAMPLES * shrink
        miss += l2_miss_prob(max(0.0, x) / cap_lines, ways, cliff)
    return miss / SPREAD_SAMPLES


@memo(256)
def _strided_steps(layer, kernel) -> tuple:
    """Strided dgrad's sub-problems f (every one of the grid): the steps a block of f takes (0: skipped, its first
    dx pixel outside dx; nblk taps + 1 where it loads; 1 where no tap reaches its rows and it only stores), its
    place among the loading ones (-1: store only), and whether every block takes the same steps and loads (the
    grid runs in lockstep). DESIGN 3a. Memoized (`_memo`; read-only arrays): GPU-independent."""
    sh, sw = layer.stride
    nblk = _cdiv(layer.k, kernel.tile_k)
    steps = np.zeros(sh * sw, np.int64)               # the skipped ones (absent from `strided_starts`): 0
    loading = np.zeros(sh * sw, np.bool_)
    for start_r, start_s, _h, _w, nr, ns in strided_starts(layer):
        steps[start_r * sw + start_s] = nblk * nr * ns + 1
        loading[start_r * sw + start_s] = nr * ns > 0
    lockstep = len(set(steps.tolist())) == 1 and bool(loading.all())
    place = np.where(loading, np.cumsum(loading) - 1, -1).astype(np.int64)
    for arr in (steps, place):
        arr.setflags(write=False)
    return steps, place, lockstep


@memo(256)
def _strided_grid(layer, kernel, tpf) -> tuple:
    """Strided dgrad's grid block by block (`_dispatch.strided_blocks`: every block that takes a slot, with its
    loading tile_m, tile_n and steps). Memoized (`_memo`; read-only arrays): GPU-independent, and 0.2 ms for a
    batch-64 stem's 25,088 blocks."""
    steps, place, _lockstep = _strided_steps(layer, kernel)
    out = strided_blocks(tpf * layer.stride[0] * layer.stride[1], _cdiv(layer.c, kernel.tile_n), kernel.swizzle_log,
                         tpf, steps, place)
    for arr in out:
        arr.setflags(write=False)
    return out


@memo(256)
def _strided_dispatch(layer, kernel, sms, cps, tpf) -> tuple:
    """Strided dgrad's grid block by block (`_dispatch.strided_blocks`: every block that takes a slot, with its
    loading tile_m, tile_n and steps) and the dispatcher's placement of its first `_DISPATCH_BLOCKS` blocks
    (`_dispatch.dispatch`: SM, slot, start round)."""
    blk_tm, blk_tn, blk_steps = _strided_grid(layer, kernel, tpf)
    placed = dispatch(blk_steps, sms, cps, _DISPATCH_BLOCKS)
    placed.setflags(write=False)
    return blk_tm, blk_tn, blk_steps, placed


@memo(256)
def _dispatch_tables(layer, kernel, sms, cps, tpf) -> tuple:
    """Strided dgrad: where its blocks do not all take the same steps (sub-problems of other tap counts, store-only
    blocks, skipped ones), the dispatcher's own waves (`_dispatch.sm_tables`: each SM's loading CTAs in start order,
    cps to a wave; the loading grid's tile_m and tile_n at each position, -1 where an SM's wave holds fewer), the
    share of the grid's CTAs each CTA past the first wave stands for, and each position's start and end rounds, for
    `_schedule.sm_config_summary`; () where
    they run in lockstep (the regular waves are the dispatcher's). Seed 2 #239 (1x1 stride 2: 3 of 4 sub-problems
    store only; 128 blocks on 224 slots): SM 0 holds blocks 0, 56 and 112, all of tile_m 0, whose A reads hit 56 %
    simulated; the loading grid alone put one CTA an SM and predicted none. The dispatch stops after
    `_DISPATCH_BLOCKS` blocks."""
    if _strided_steps(layer, kernel)[2]:
        return ()
    blk_tm, blk_tn, blk_steps, placed = _strided_dispatch(layer, kernel, sms, cps, tpf)
    tab_tm, tab_tn, tab_st, tab_end, held, total = sm_tables(blk_tm, blk_tn, blk_steps, placed, sms, cps)
    first = int((tab_tm[:sms * cps] >= 0).sum())
    later = (total - first) / (held - first) if held > first else 1.0
    for tab in (tab_tm, tab_tn, tab_st, tab_end):
        tab.setflags(write=False)
    return tab_tm, tab_tn, later, tab_st, tab_end


# strided dgrad's dispatch follows at most this many blocks (`_dispatch_tables`): 5 ms on this VM
_DISPATCH_BLOCKS = 1 << 16


def _lockstep_share(layer, kernel, gpu, machine, tpf) -> float:
    """Strided dgrad's co-resident filter sharing on the dispatcher's timeline against that in lockstep
    (`_timeline.lead_share` with the sub-problems' own lengths, over that with one length for all):
    the share of the lockstep configurations' shared filter reads that still find a leader close enough.
    Runs in block order: per grid row of columns, sub-problem after sub-problem (idle ones skipped,
    store-only ones one round, reading nothing), tile_m_per_filter CTAs per column of the row; at most
    `_TIMELINE_ROWS` grid rows (later rows repeat the pattern). A leader helps while the rounds between
    fit the L1: its ways x sets lines over the lines the SM's CTAs touch in a round (each CTA's distinct
    dy and filter bytes over its rounds). Seed 1
    #188 (5x5 stride 2: 9, 6, 6 and 4 taps): filter L1 hits simulated 23 %, 45 % predicted in lockstep;
    with a 4x4 or 6x6 filter (equal taps) the lockstep prediction is within 1.3 % of the simulation."""
    nblk = _cdiv(layer.k, kernel.tile_k)
    taps_of = [nr * ns for _r, _s, _h, _w, nr, ns in strided_starts(layer)]
    lengths = [nblk * taps + 1 for taps in taps_of]
    loads = [taps > 0 for taps in taps_of]
    if len({length for length, load in zip(lengths, loads) if load}) <= 1 and all(loads):
        return 1.0
    cps, ways, sets = machine
    tiles_n, lane = _cdiv(layer.c, kernel.tile_n), 1 << kernel.swizzle_log
    run_len, run_n, run_load = [], [], []
    for row in range(min(_cdiv(tiles_n, lane), _TIMELINE_ROWS)):
        lanes = min(lane, tiles_n - row * lane)
        run_len += lengths
        run_n += [tpf * lanes] * len(lengths)
        run_load += loads
    run_len, run_n, run_load = (np.array(run_len, np.int64), np.array(run_n, np.int64),
                                np.array(run_load, np.bool_))
    # the lines the SM's CTAs touch in a round: each CTA's distinct dy and filter bytes over its rounds
    eb, line = kernel.elem_bytes, gpu.line_bytes
    rate = 0.0
    for length, load, taps in zip(lengths, loads, taps_of):
        if load:
            a_lines = min(kernel.tile_m, tpf * kernel.tile_m) * nblk * min(kernel.tile_k, layer.k) * eb / line
            b_lines = layer.k * taps * min(layer.c, kernel.tile_n) * eb / line
            rate += (a_lines + b_lines) / length / sum(loads)
    fit = int(ways * sets / (cps * rate))
    own = lead_share(run_len, run_n, run_load, gpu.sms, cps, fit)
    same = lockstep_lead_share(run_n, run_load, gpu.sms, cps)        # `lead_share` of equal lengths
    return min(1.0, own / same) if same > 0 else 1.0


# strided dgrad's timeline follows at most this many grid rows of columns (`_lockstep_share`)
_TIMELINE_ROWS = 4


def _coresident_rereads(subs, layer, kernel, gpu, f, uniq_dy, cap_lines, tpf, per_wave):
    """dy sectors read again from DRAM when strided dgrad's sub-problems run in the same wave.

    Sub-problem j has T_j taps per channel block k0 (k-steps ``for k0: for taps``), so it reaches block
    k0 at time k0 T_j: the sub-problems read one dy line (rows of one tile index, channels of block
    k0) in increasing order of T, and between two consecutive reads (times k0 T_prev and k0 T_j) the
    wave touches every dy line of the blocks from the slowest's position to the fastest's, (k0
    T_prev / T_max, k0 T_j / T_1] (blocks of all resident tile indices: the co-resident sub-problems
    cover every tile index) and the filters of those blocks, never more than dy and w hold (a block
    swept twice adds no distinct line). Averaged over k0; past the last block, CTAs that replace
    finished ones keep touching lines at the same rate when the grid has more CTAs than a wave. (Counting also the dx rows that finished sub-problems store, a CTA's stores coming at
    its end, over-predicted dy's DRAM reads on a100/h100 resnet50 b32 by 37-47 %: MODEL.md 9.)"""
    eb, LINE = kernel.elem_bytes, gpu.line_bytes
    nblk = _cdiv(layer.k, kernel.tile_k)
    taps = sorted(g.ksteps / nblk for g, _ in subs)
    dy_lines = _cdiv(layer.n * layer.p * layer.q * layer.k * eb, LINE)
    w_lines = _cdiv(layer.params * eb, LINE)
    more = tpf * len(subs) * _cdiv(layer.c, kernel.tile_n) > per_wave
    return swept_rereads(np.array(taps), nblk, dy_lines + w_lines, more, 32, cap_lines, float(gpu.l2_ways),
                         cliff_params(gpu, f), uniq_dy)


# places of a strided dgrad sub-problem whose dy reads `_later_wave_rereads` follows through the grid (the first
# `_DY_READERS` reads of each), and the channel blocks of each (evenly spread)
_DY_PLACES = 8
_DY_READERS = 32
_DY_BLOCKS = 2


def _later_wave_rereads(layer, kernel, gpu, f, nsub, tpf, per_wave, uniq_dy, cap_lines, store_lines):
    """dy sectors read again from DRAM by a later wave of strided dgrad's grid: the rows of place i
    (a sub-problem's tile i) are read by tile i of every sub-problem of every CTA column, in block order
    (tile_m fastest over the sub-problems' tiles, bands of 2^swizzle columns). Between two reads that start
    in different rounds of the dispatcher (`_strided_dispatch`) the L2 takes the dx tiles stored and the dy
    rows of the other places read in between, and the filters (`_dispatch.dy_reread_misses`, the engine's
    cliff). Followed at `_DY_PLACES` places. Seed 4 #65 (3x3 stride 2, four 32-wide columns of four
    sub-problems' 59 tiles, 2.6 waves): simulated dy DRAM reads 2 x its distinct sectors, where the
    sub-problems' own grids (one wave each) put every column's re-read in step."""
    tiles_n = _cdiv(layer.c, kernel.tile_n)
    if nsub * tpf * tiles_n <= per_wave:
        return 0.0
    eb, LINE = kernel.elem_bytes, gpu.line_bytes
    dy_lines = _cdiv(layer.n * layer.p * layer.q * layer.k * eb, LINE)
    blk_tm, blk_tn, blk_steps, placed = _strided_dispatch(layer, kernel, gpu.sms, per_wave // gpu.sms, tpf)
    places = min(_DY_PLACES, tpf)
    nblk = _cdiv(layer.k, kernel.tile_k)
    # every block that takes a slot stores its dx tile, store-only ones too; a k-step's filter lines: its K / nblk
    # rows of the column's tile_n channels
    step_b_lines = layer.k / nblk * lines_per_row(layer.c, kernel.tile_n, eb, layer.r * layer.s * layer.c * eb,
                                                  layer.stride[1] * layer.c * eb, LINE)
    miss, pairs = dy_reread_misses(blk_tm, blk_tn, blk_steps, placed, tpf, tiles_n, places, _DY_READERS, nblk,
                                   min(nblk, _DY_BLOCKS), store_lines / blk_steps.shape[0], dy_lines / tpf / nblk,
                                   step_b_lines, cap_lines, float(gpu.l2_ways), cliff_params(gpu, f))
    if pairs == 0:
        return 0.0
    # past the dispatch's cap, the read pairs followed stand for the rest
    return uniq_dy * miss / pairs * (nsub * tiles_n - 1)


def _line_blocks(C, tk, eb, line, nhwc) -> int:
    """Channel blocks of T_k that share one line of a pixel (1 where a block fills a line, or pixels are
    narrower than a line, or nchw)."""
    if nhwc and C * eb >= line and tk * eb < line:
        return line // (tk * eb)
    return 1


def _wave_loads(dens_l, tm, delta, b_slice_lines, na, nb, runs):
    """Lines a wave loads: its distinct tile_m's rows (``na`` of them in ``runs`` runs of adjacent tiles,
    one halo of ``delta`` rows a run) and its distinct tile_n's filter slices."""
    return dens_l * (na * tm + runs * delta) + nb * b_slice_lines


def _tile_refetches(core, bnd, f1, fnew, df, share_a, grid_key, parts, nline, nblk, cap_lines, l2_ways, cliff,
                    excess, tab=NO_TABLE):
    """A's re-fetches of a tile_m by later waves (core rows and halo rows). A full wave's re-read meets a
    full wave's lines (`wave_stats`' rows less the last one's; their mean over every wave with a small
    last wave was short: seed 5 #44, dgrad 7x1 with 2 1/4 waves: one full wave touches 61k lines simulated,
    47.2k predicted, re-reads 57.7k lines apart at the median); the last wave's re-reads meet half the full
    wave's loads and half its own, with the full wave's stores. The earlier CTA touched the line last up to
    (n - 1) blocks after the place it is read again (n channel blocks a line): seed 1 #277 (tensor-op, 2
    blocks a line of 6): its lines' first re-reads 41.9k-51.0k lines apart, a full wave 51.9k
    (`spread_refetch_misses`). ``grid_key``: (tiles_m, tiles_n, swizzle, SMs, CTAs an SM). ``excess``: per gap,
    the lines of the tiles the window holds more than once (`_wave_windows`)."""
    dens_l, tm, delta, b_slice_lines, c_lines, full = parts
    means, last, core_in, core_last, halo_in, halo_last = refetch_waves(*grid_key)
    na, nb, nc, runs = means
    loads_f = _wave_loads(dens_l, tm, delta, b_slice_lines, na, nb, runs)
    f_in = f_last = f1
    if last[2] > 0.0:
        loads_l = _wave_loads(dens_l, tm, delta, b_slice_lines, last[0], last[1], last[3])
        f_in = loads_f + nc * c_lines + full
        f_last = 0.5 * (loads_f + loads_l) + nc * c_lines + full
    shrink = loads_f * (nline - 1) / nblk if nblk > 1 else 0.0
    return tile_refetch_misses(core_in, core_last, halo_in, halo_last, core, bnd, f_in, f_last, fnew, df, share_a,
                               cap_lines, l2_ways, cliff, shrink, excess, tab)


def _wave_cliff(gpu, cliff, win, eb, line, nhwc, share_a):
    """The L2 cliff of a window of whole waves (a tile re-fetched by a later wave), whose A lines, a share
    ``share_a`` of it, are the pixels the filter reads: where a strided filter skips pixels (1x1 stride 2:
    C e bytes every 2 C e) those lines fill the sets far less evenly than contiguous ones
    (`_l2.blocks_dispersion`), and the window's dispersion is its lines' mean. resnet50 layer2.0.downsample.0
    on the a100, batch 32: re-fetches 0.92 L2s apart miss 56 % simulated; D 3.44 for its pixels, 0.51
    contiguous."""
    if not nhwc or win.sw <= 1 or share_a <= 0.0:
        return cliff
    pix = win.c * eb
    covered = sorted({(s * win.dw) % win.sw for s in range(win.s)})
    d_a = blocks_dispersion(gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, win.sw * pix,
                            tuple((r * pix, pix) for r in covered), line)
    share = min(1.0, share_a)
    return (cliff[0], share * d_a + (1.0 - share) * cliff[1])


@memo(1024)
def _follower_windows(tiles_m, tiles_n, swz, sms, cps, along_n) -> tuple:
    """`_followers.follower_windows` on `FOLLOWER_SAMPLES` waves, memoized per grid and machine (measured: 65-185 µs
    a call for grids of 80-1,056 CTAs a wave; a network's layers of one grid share it)."""
    out = follower_windows(tiles_m, tiles_n, swz, sms, cps, FOLLOWER_SAMPLES, along_n)
    for a in out[:3]:
        a.setflags(write=False)
    return out


def _one_back_sectors(hist, rows_total, reads, spr) -> float:
    """Sectors a reuse one position back reads, for rows narrower than a sector: a tile column's A sector
    reads (``reads``) less ``spr`` for each of the histogram's other row accesses, over its reuses one
    position back (at most ``spr``). A 7x7 stride-4 stem of 28-byte pixels (seed 2 #120): a row's first
    touch stands for 3.5 sectors, its six later taps read 1.79 each, of which 1.53 sectors are not new."""
    one = float(hist[:, 1].sum()) if hist.shape[1] > 1 else 0.0
    if one <= 0.0:
        return spr
    return min(spr, max(0.0, (reads - (rows_total - one) * spr) / one))


@memo(4096)
def _block_classes(C, tk, eb, step, pos_step, line, sec, lpr_a, nhwc) -> tuple:
    """((A lines per row access, share of A's sectors, share of the k-steps), ...) per class of channel
    blocks: nhwc with a partial last block (C mod T_k > 0) reads fewer lines a row in its k-steps, and
    the taps' reuses inside a block (the filter positions run inside a channel block) meet that block's
    window, not the average's: seed 13 #54 (dgrad, K = 48 fp32 in blocks of 32 and 16, 192-byte dy rows,
    two CTAs an SM in a 48 KB L1): 192 lines a CTA and k-step in the first block, 128 in the second; the
    average, 160, put both inside the L1 (simulated A hits 50 %, predicted 81 %). The L2 window of those
    reuses keeps the average (`_reuse.l1_configs`' ``l2_scale``): the SMs' CTAs are not in step, so the
    GPU's k-step reads every block's lines in their shares (seed 1 #148, the same blocks: DRAM +3.7 →
    +43.5 % with the first block's lines in the L2 window too). Elsewhere one class of the blocks'
    average (`_counts.lines_per_row`)."""
    nblk = -(-C // tk)
    if not nhwc or nblk < 2 or C % tk == 0:
        return ((lpr_a, 1.0, 1.0),)
    out = []
    for first, last in ((0, nblk - 1), (nblk - 1, nblk)):
        out.append((block_lines_per_row(C, tk, eb, step, pos_step, line, first, last),
                    block_lines_per_row(C, tk, eb, step, pos_step, sec, first, last) * (last - first),
                    (last - first) / nblk))
    secs = sum(o[1] for o in out)
    return tuple((lpr, s / secs, ks) for lpr, s, ks in out)


@memo(4096)
def _band_stores(c_lines, ctas_wave, tiles_m, tiles_n, rows, tn, K, eb, swz, line, nhwc, wave=None):
    """The stores of the grid's bands of 2^swz tile_n columns (the grid walks one band's tile_m after
    another, `_schedule.last_before`). Between a tile_m's read in one band and its re-read in the next,
    the CTAs store their rows' lines, each CTA the lines its T_m rows of the band's outputs touch over the
    band's columns (``rows``: a tile's mean rows): a line two bands share is touched by each (K = 64 fp16
    in 32-wide columns: a row's 128-byte line touched once a column, twice the layer's mean distinct
    lines a CTA), and a partial last column stores fewer. Returns (lines a full band's wave stores
    beyond the mean ``c_lines`` a CTA, the last band's wave minus a full band's, the share of A's
    band-crossing re-reads that cross into the last band, the share of B's re-reads within it). Zeros
    for one band. ``wave``: (CTAs a full wave, M, T_m), to count the stores of waves that span bands."""
    width = 1 << swz
    full_rows = tiles_n >> swz
    rem = tiles_n - full_rows * width
    nbands = full_rows + (rem > 0)
    if nbands < 2:
        return 0.0, 0.0, 0.0, 0.0

    # the bands one wave's CTAs span: a window that holds several adjacent bands touches their shared
    # lines once (`ctas_wave` ~ tiles_m x width: about one band a window)
    span = max(1, min(nbands, int(round(ctas_wave / (tiles_m * width)))))
    if span > 1 and nhwc and wave is not None and tiles_m * tiles_n >= wave[0]:
        # waves across several bands, each at its own offset in them: their stores counted wave by wave
        # (`_stores.wave_store_lines`; seed 13 #10, a wave of 56 CTAs down 36-tile columns of 64 bytes a
        # row: 13,312 lines simulated, where the bands' mean took two columns a line, 10,000)
        per_wave, M, tm = wave
        c_full = wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, line) / per_wave
        return ctas_wave * (c_full - c_lines), 0.0, 1.0 / (nbands - 1), (rem if rem else width) / tiles_n

    def band(b):                                  # lines a CTA of band b stores (with the next span - 1)
        c0 = b * width
        cols = min(span * width, tiles_n - c0)
        lo, hi = c0 * tn, min(K, (c0 + cols) * tn)
        if nhwc:
            return row_lines((hi - lo) * eb, K * eb, lo * eb, line) * rows / cols
        return c_lines * tiles_n / K * (hi - lo) / cols     # nchw: a CTA's planes, one an output column

    seen = {}
    for b in range(nbands - 1):                   # full bands differ only by their offset in a line
        key = (b * width * tn * eb % line, min(span * width, tiles_n - b * width))
        if key not in seen:
            seen[key] = [band(b), 0]
        seen[key][1] += 1
    c_full = sum(v * n for v, n in seen.values()) / (nbands - 1)
    c_last = band(nbands - 1) if span == 1 else c_full
    ncols = rem if rem else width
    return ctas_wave * (c_full - c_lines), ctas_wave * (c_last - c_full), 1.0 / (nbands - 1), ncols / tiles_n


def _predict_gemm(geo, gpu, kernel, f, machine, layer, timing=True, sched=None, counted=True, followers=True,
                  same_loop=1.0):
    """Every metric of the dense GEMM ``geo``. ``counted``: judge the reuses one filter position back on
    their counted windows (`_issue_order`); strided dgrad's sub-problems only where one fills a wave: measured,
    where they share a wave their counted windows put seed 1 #292 at +28.7 % and seed 4 #70 at 11.9 % (MODEL.md
    section 9), their co-resident tiles of one place being judged in the configurations (`_dgrad_places`).
    ``followers``: count the same-round sharers of a tile on other SMs (`_followers`) on ``geo``'s own grid;
    strided dgrad's sub-problems do not, their CTAs being placed by the whole layer's grid (`_later_wave_rereads`).
    ``timing`` False (strided dgrad's sub-problems): (`_common.operand_rows`' figures, A's compulsory sectors, the later
    waves' re-reads of A in its DRAM reads) instead of the metric dict."""
    win = geo.win
    N, C, H, W, R, S = win.n, win.c, win.h, win.w, win.r, win.s
    sh, sw, dh, dw = win.sh, win.sw, win.dh, win.dw
    P, Q = win.p, win.q
    K = geo.gemm_n
    M = N * P * Q
    eb = kernel.elem_bytes
    nhwc = kernel.layout == "nhwc"
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    SEC = gpu.sector_bytes
    LINE = gpu.line_bytes
    sms = gpu.sms

    ex = geo.counts
    sec_a, sec_b, sec_c = ex["sec_A"], ex["sec_B"], ex["sec_C"]

    # ---- grid, occupancy, waves -----------------------------------------------------------------
    tiles_m = _cdiv(M, tm)
    tiles_n = _cdiv(K, tn)
    rows_tm = M / tiles_m                                # a tile_m's mean rows (the last one is partial)
    ctas = tiles_m * tiles_n
    cps, ways, sets = machine
    per_wave = cps * sms
    ksteps = geo.ksteps

    # ---- schedule: co-residency per SM (L1), tiles per wave and their re-reads (L2) --------------
    swz = kernel.swizzle_log
    if sched is None or (tiles_m, tiles_n) not in sched:
        stats = grid_schedule(tiles_m, tiles_n, swz, sms, cps)
        if sched is not None:
            sched[(tiles_m, tiles_n)] = stats
    else:
        stats = sched[(tiles_m, tiles_n)]
    cfg, (hist_ra, hist_rb, hist_rh, wsum, wave_tab) = stats
    n_waves = wsum[3]
    na_wave, nb_wave, ctas_wave, runs_wave = wsum[0] / n_waves, wsum[1] / n_waves, wsum[2] / n_waves, \
        wsum[4] / n_waves

    # ---- L1 working set per k-step (lines) and the sets they map to -------------------------------
    unit = C * eb if nhwc else eb                  # bytes per input column w
    if nhwc:
        nsa = _nsets((sw * unit, sh * W * unit, H * W * unit), sets, LINE)
    else:
        nsa = sets
    row_b = geo.row_b
    # a B row's block that spans (or straddles into) more than one line also reaches the sets after its
    # first line's: ceil(lines per row) of them from each set the row pitch reaches
    nsb = min(sets, _nsets((row_b,), sets, LINE) * math.ceil(geo.lpr_b))
    nmax = max(nsa, nsb)

    (hist, rows_t, rows_total, span, lpr_a, lpw_a, lpm_a, share_blk, uniq_a, uniq_a_lines, run_sectors, ref,
     hist_line, gap_p, halo_tab) = a_window(win, tm, tk, eb, nhwc, SEC, LINE, f.l1_tile_edge)
    lo, hi = f.l1_hit_lo, f.l1_hit_hi
    nblk = _cdiv(C, tk) if nhwc else C
    dense = unit < SEC
    if run_sectors is not None:
        spr = run_sectors / rows_total if rows_total else 0.0
    elif dense:
        spr = nblk * sw * unit / SEC            # consecutive rows share sectors: bytes / 32
    else:
        spr = sec_a / (tiles_n * rows_total) if rows_total else 0.0
        if nhwc:
            # a row's sector that its neighbour row also reads is fetched once (a request's rows share it
            # already in ``sec_a``)
            spr = min(spr, row_run_sectors(sw * unit, C, tk, eb, SEC))
    dscale = 1.0 if nhwc else 1.0 / tk          # filter-position distance -> rounds
    lpr_b = geo.lpr_b
    # B tile classes come with the geometry (the M tile classes: `_schedule.tile_m_classes`)
    ncls = geo.ncls
    # one CTA's B lines per round (class average) and the lines of a tile's whole B slice (one or two classes:
    # Python's sums, not numpy's dot, cost 3 % of a pass over the fprop networks)
    b_lines_round = b_slice_lines = 0.0
    for lines_round, weight, lines_slice in ncls.tolist():
        b_lines_round += lines_round * weight
        b_slice_lines += lines_slice * weight
    share_b_blk = geo.share_b_blk
    reuse_b1 = geo.reuse_b1
    # the sets a CTA lifetime's lines reach
    ns_life_b = sets
    if nhwc:
        # a filter row's lifetime lines: fprop reads the whole row; dgrad the tile's channels of each filter position
        # it walks, positions ``pos_b`` apart along s and stride x S C e along r (the column's lines of a position
        # in the sets from its first)
        if geo.op == "fprop":
            ns_life_b = _nsets((row_b,) + ((LINE,) if row_b > LINE else ()), sets, LINE)
        else:
            ns_life_b = min(sets, _nsets((row_b, geo.pos_b, layer.stride[0] * layer.s * layer.c * eb), sets, LINE)
                            * math.ceil(lpr_b))
        ns_life = max(_nsets((sw * unit, sh * W * unit, H * W * unit) + ((LINE,) if unit > LINE else ()),
                             sets, LINE), ns_life_b)
    else:
        ns_life = sets
    fb_set = ns_life / ns_life_b
    # B lines of consecutive filter positions (one channel block) per filter and round, relative
    bfrac = geo.pos_b / LINE / lpr_b if nhwc else 1e9
    # L2 distance of within-CTA reuses that miss L1, per line of L2 capacity: the wave's distinct A
    # tiles (lines_a_t counts one CTA's A lines times na) and its B lines per round
    cap_lines = gpu.l2_bytes / LINE * f.l2_capacity
    delta = win.reach                                    # the filter's reach in GEMM rows (a tile's halo)
    # same-round sharers of a tile on other SMs (`_followers`): only where a round's CTA steps (a tile's A
    # lines and a CTA's filter lines of one k-step) could fill a share of the L2
    a_step, b_step = rows_tm * lpr_a, b_lines_round
    follow = followers and ctas_wave * (a_step + b_step) > FOLLOWER_REACH * cap_lines
    if nhwc:
        # per class of waves alike in their tiles (`_schedule.l2_classes`): the L2 cliff is convex, and a
        # grid whose waves differ (a partial last wave; swizzled column pairs, then a lone column) misses
        # where its larger waves reach the cliff, not where their average does; a wave's tiles' windows
        # overlap where the filter reaches far, and count at most its distinct A lines
        l2cls = l2_classes(wave_tab, tiles_m, cap_lines, b_lines_round, uniq_a_lines / M, rows_tm, delta)
        l2cls_halo = l2cls                    # the halo term: no follower columns
        if follow:
            # a shared tile's first reader re-reads d rounds on behind the tile's last follower: its window is
            # the round's lines less those between its first and last copies (`_followers`; `_reuse.miss_rows`
            # takes that shift for the share of tiles that are shared)
            _, wraps, rounds, _, shared = _follower_windows(tiles_m, tiles_n, swz, sms, cps, False)
            shift = mean_gap(rounds, wraps, a_step, b_step) / cap_lines
            l2cls = with_columns(l2cls, shared, shift)
    else:
        l2cls = l2cls_halo = _NO_CLASS
    l2_ways = float(gpu.l2_ways)
    cliff = cliff_params(gpu, f)
    # a within-CTA reuse's L2 window holds one channel block of consecutive rows: where those skip
    # lines, the cliff of that pattern through the GPU's own slice and set functions
    l2_tab = pattern_cliff(gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, float(f.l2_capacity),
                           sw * C * eb, min(C, tk) * eb, LINE) if nhwc else None
    l2_tab = NO_TABLE if l2_tab is None else l2_tab
    if l2_tab.shape[0] > 1 and geo.op == "fprop":
        # the windows of a few k-steps with their filter lines where they land (`_joint_l2`), the halo's too:
        # near the cliff only
        grid = (tiles_m, tiles_n, swz, per_wave, tm)         # the waves' places (`wave_places`), where needed
        args = (rows_tm * lpr_a, b_lines_round, cap_lines, sw * C * eb, min(C, tk) * eb, grid)
        joint = joint_columns(layer, kernel, gpu, f, l2cls_halo, *args)
        if joint is not None:
            l2cls = joint if l2cls is l2cls_halo else joint_columns(layer, kernel, gpu, f, l2cls, *args)
            l2cls_halo = joint
    # L1 set class of each filter position's A lines (nhwc, line-aligned pixels): positions whose
    # offsets differ by other than a multiple of the set step put their lines in other sets
    nphase = sets // nsa if nhwc and (C * eb) % LINE == 0 and nsa < sets else 1
    phase = position_phases(R, S, W, dh, dw, C * eb // LINE, nphase, win.reverse)
    # strided dgrad: a co-resident CTA whose k-loop has another length walks the classes of sets its k-step
    # lines fall in (a channel block's line a pixel: sets / nsa of them) at another pace, so its round's A lines
    # are in this CTA's class one time in sets / nsa (`_co_resident_loops`)
    q_set = same_loop + (1.0 - same_loop) * nsa / sets if nhwc and unit % LINE == 0 and nsa < sets else 1.0
    # tensor-op B by cp.async.cg: never in the L1, so no B lines in A's L1 windows and no B hits
    kinds = operand_kinds(kernel, layer)
    ncls_l1, b_round_l1, b_slice_l1 = ncls, b_lines_round, b_slice_lines
    b_bypass = bypasses_l1(kinds)
    if b_bypass:
        ncls_l1 = ncls.copy()
        ncls_l1[:, 0] = 0.0
        ncls_l1[:, 2] = 0.0
        b_round_l1 = b_slice_l1 = 0.0
    nchw_fprop = not nhwc and geo.op == "fprop"        # A's CTA sectors and lines counted exactly
    if nchw_fprop:
        # a CTA lifetime's A lines, exact (`_compulsory`): a plane's run of a tile's rows takes whole
        # lines, not C sw e / 128 of them a row (seed 5 #23, 32-row fp16 tiles of a 1x1 layer: 240 lines,
        # not 96, and the previous wave's filter lines no longer fit the L1: simulated B hits 50 %)
        rows_cta = hist[:, 0].sum() * tm / M
        if rows_cta > 0:
            lpm_a = cta_sectors(layer, kernel, LINE) / _cdiv(M, tm) / rows_cta
    corr, rel, b_ratio = _NO_CORR, _NO_REL, _NO_B
    if counted and nhwc and R * S > 1:
        # a reuse one filter position back: the reads' places in their k-steps, the tile's own valid rows
        # and, for dgrad, the filter lines in the reused line's set (`_issue_order`)
        corr, valid, b_ratio = one_back_tables(win, tm, tk, kernel.threads, kernel.vector, eb, LINE, sets, geo.op,
                                               K, geo.row_b, geo.pos_b, tn, kernel.math == "tensorop")
        # a tile's valid rows over the layer's mean share at each position
        rel = relative_valid(valid, rows_t, float(M))
    b_hold, b_gap = b_line_hold(kernel.layout, C, R, S, tk, eb, LINE) if geo.op == "fprop" else (0.0, 1.0)
    # per class of filter lines, the rounds between two CTAs' reads of it one wave apart (`_filter_gaps`)
    b_gaps = b_line_gaps(kernel.layout, C, R, S, K, tn, tk, eb, LINE) if geo.op == "fprop" else one_gap(ksteps)
    phase_p, phase_rpl = fprop_block_phases(layer, kernel, unit, row_b, sets, LINE) if geo.op == "fprop" else (1, 1)
    phase_p, phase_rpl = float(phase_p), float(phase_rpl)
    step_b = bool(nhwc and unit % LINE == 0 and row_b % LINE == 0)
    b_visits = b_hold > 0.0 and nhwc and nmax < ns_life
    if b_visits:
        b_hold = b_hold_in_set(b_hold, ksteps, ns_life / nmax)
    # unit-stride dgrad: dy's and w's k-step lines share a set only where their phases agree (`_set_phase`);
    # elsewhere B's windows count none of dy's lines (A's windows count the filter lines in their set on
    # their own: `_issue_order`'s b_ratio)
    same = 1.0
    if nhwc and geo.op == "dgrad" and sh == 1 and sw == 1 and layer.stride == (1, 1):
        same = dgrad_phase_share(layer, kernel, unit, row_b, nsa, nsb, sets, LINE)
    miss_frac_a = hit_b = miss2_frac_a = first_b = one_a = 0.0
    # nchw fprop: the A and B lines of a window of d filter positions, in rounds (a k-step's taps of one input
    # row share lines with the next k-step's, and its filter bytes with the next k-step's)
    a_rounds = nchw_window_rounds(win, tm, tk, eb, LINE) if nchw_fprop and R * S > 1 else _NO_ROUNDS
    mcls_arr = tile_m_classes(tm, tiles_m, M)
    for lpr_k, sec_w, ks_w in _block_classes(C, tk, eb, sw * C * eb, math.gcd(dw * C * eb, dh * W * C * eb),
                                             LINE, SEC, lpr_a, nhwc):
        m1 = hb = m2 = fm = o1 = 0.0
        for cross, share in ((float(nmax), same), (_APART, 1.0 - same)):   # A's lines in B's windows
            if share <= 0.0:
                continue
            r = l1_configs(
                hist, phase, nphase, rows_t, cfg, mcls_arr, ncls_l1, float(M), R, S,
                float(tm), float(tn), float(ksteps), lpr_k, lpw_a, lpr_b, float(nsa), float(nsb), float(nmax),
                float(ways), lo, hi, dscale, share_blk, share_b_blk, reuse_b1, lpm_a, b_round_l1, b_slice_l1,
                float(ns_life), bfrac, l2cls,
                l2_ways, cliff, span, ref, hist_line, l2_tab, gap_p, corr, rel, b_ratio, a_rounds, b_gaps, lpr_a / lpr_k,
                b_hold, b_gap, cross, b_visits, phase_p, phase_rpl, step_b, q_set, fb_set)
            m1, hb, m2, fm = m1 + share * r[0], hb + share * r[1], m2 + share * r[2], fm + share * r[3]
            o1 += share * r[4]
        miss_frac_a += sec_w * m1
        miss2_frac_a += sec_w * m2
        one_a += sec_w * o1
        hit_b += ks_w * hb
        first_b += ks_w * fm
    # rows narrower than a sector (``dense``): a row's first touch stands for the sectors of its whole stride
    # period (``spr``) and the next taps' reads for reuses one position back (`_window.a_window`). Such a
    # reuse that misses re-fetches the sectors of its own access, not a period's: the reads the histogram's
    # other rows (first touches, reuses further back) do not stand for, shared by its reuses one back
    spr_one = _one_back_sectors(hist, rows_total, sec_a / tiles_n, spr) if dense and run_sectors is None else spr
    miss_a = min(float(sec_a), miss_frac_a * rows_total * tiles_n * spr
                 + one_a * rows_total * tiles_n * (spr_one - spr))     # + 0.0 where spr_one is spr
    if nchw_fprop:
        # at least each CTA's distinct sectors, for the CTAs whose tile no other CTA of their SM holds or
        # held last wave (`_compulsory`: the first touches above count one filter position at a time)
        first = cfg[:, 0][(cfg[:, CFG_AREP] < 0.5) & (cfg[:, CFG_PREV_A] < 0.5)].sum() / max(cfg[:, 0].sum(), 1e-300)
        miss_a = min(float(sec_a), max(miss_a, cta_sectors(layer, kernel, SEC) * tiles_n * first))
    # pixels not whole lines: A's L1 hits counted on sampled SMs' rounds (`_l1_rounds` says where)
    counted_a = a_hit_share(geo, layer, kernel, gpu, cps, ways, sets)
    if counted_a is not None:
        miss_a = float(sec_a) * (1.0 - counted_a)
    l1_hit_a = sec_a - miss_a
    if counted_a is not None and not b_bypass:
        # and B's, each sampled wave after the SM's waves before (`_l1_rounds.b_hit_share`)
        counted_b = b_hit_share(geo, layer, kernel, gpu, cps, ways, sets)
        if counted_b is not None:
            hit_b = counted_b
    l1_hit_b = 0.0 if b_bypass else sec_b * min(1.0, hit_b)
    miss_b = sec_b - l1_hit_b

    # ---- compulsory (unique) sectors of each tensor ----------------------------------------------
    uniq_a = min(float(uniq_a), miss_a) if miss_a else 0.0
    uniq_b = min(geo.uniq_b, miss_b)
    uniq_c = float(_cdiv(M * K * eb, SEC))

    # ---- L2: tiles re-read by later waves, within-CTA reuses beyond the L2 ------------------------
    # A in "m-space": a tile reads rows [x TM, (x + 1) TM) of the GEMM plus a halo of `delta` rows
    # (the filter's reach); adjacent tiles share a boundary region of min(delta, TM) rows, a tile's
    # own core is the rest. Densities: A sectors (lines) per GEMM row.
    dens = uniq_a / M
    dens_l = uniq_a_lines / M
    core = max(0.0, tm - delta)
    bnd = min(delta, float(tm))
    b_slice = uniq_b / tiles_n
    c_lines = _cdiv(M * K * eb, LINE) / ctas
    # lines touched in one wave, and per further wave (tiles not shared with the wave before)
    f1 = _wave_loads(dens_l, rows_tm, delta, b_slice_lines, na_wave, nb_wave, runs_wave) + ctas_wave * c_lines
    fnew = max(0.0, f1 - dens_l * tm * float(hist_ra[1]) / n_waves - b_slice_lines * float(hist_rb[1]) / n_waves)
    # the stores between a re-read and its read: the lines each band of columns touches (a partial last
    # column's fewer)
    full, df, share_a, share_b = _band_stores(c_lines, ctas_wave, tiles_m, tiles_n, rows_tm, tn, K, eb, swz, LINE,
                                              nhwc, (per_wave, M, tm))
    f1 += full
    fnew = max(0.0, fnew + full)
    wave_cliff = cliff
    if nhwc and sw > 1:                                 # elsewhere `_wave_cliff` keeps the GPU's own cliff
        a_share = _wave_loads(dens_l, rows_tm, delta, 0.0, na_wave, nb_wave, runs_wave) / max(f1, 1e-300)
        wave_cliff = _wave_cliff(gpu, cliff, win, eb, LINE, nhwc, a_share)
    # a window of g waves holds a tile the grid's walk comes back to once (`_wave_windows`: seed 6 #6, a
    # column of 2.86 waves' tiles re-read after three waves); only re-reads two waves on or more have such tiles
    twice_a = twice_b = NO_EXCESS
    twice = grid_excess(tiles_m, tiles_n, swz, sms, cps)
    if twice is not None:
        tile_lines = dens_l * tm
        twice_a = twice[0, 0] * tile_lines + twice[0, 1] * b_slice_lines
        twice_b = twice[1, 0] * tile_lines + twice[1, 1] * b_slice_lines
    # the window's own lines against the sets where a later wave re-reads A near the L2's capacity
    # (`_refetch_window`: stores a fixed stride apart crowd some sets below the cliff, held-out 148 #87)
    tab_a = NO_TABLE
    walked = geo.op == "fprop" or (geo.op == "dgrad" and layer.stride == (1, 1))   # not strided dgrad's sub-grids
    if walked and near_cliff(hist_ra, f1, fnew, cap_lines):
        tab = refetch_window_table(layer, kernel, gpu, f.l2_capacity, tiles_m, tiles_n, swz, per_wave, cliff)
        tab_a = NO_TABLE if tab is None else tab
    reread_a = _tile_refetches(dens * core, dens * bnd, f1, fnew, df, share_a, (tiles_m, tiles_n, swz, sms, cps),
                               (dens_l, rows_tm, delta, b_slice_lines, c_lines, full),
                               _line_blocks(C, tk, eb, LINE, nhwc), nblk, cap_lines, l2_ways, wave_cliff, twice_a,
                               tab_a)
    reread_b = banded_refetch_misses(hist_rb, b_slice, f1, fnew, df, share_b, False, cap_lines, l2_ways, wave_cliff,
                                     twice_b, NO_TABLE)
    if not b_bypass:
        # a later wave re-fetches a slice from L2 only where its first holders miss it in the L1 (seed 5 #38:
        # each SM keeps its tile_n and its L1 the slice; the L2 sees the compulsory reads alone)
        reread_b *= min(1.0, first_b)
    # within-CTA reuses (across filter positions) that miss L1 and L2: once per wave and tile_m (the
    # wave's other CTAs with that tile_m read the same sectors in the same round, right behind it)
    inner = miss2_frac_a * rows_total * spr
    # halo sectors an adjacent tile of the same wave read some positions before (its first touches are
    # no reuse inside the CTA): the wave's windows of those positions against the L2 (tiles whose
    # neighbour runs in the same wave: all but a run's first)
    halo = 0.0
    if halo_tab is not None and wsum[0] > 0:         # (nhwc: None for nchw)
        same_wave = max(0.0, wsum[0] - wsum[4]) / wsum[0]
        halo = same_wave * spr * halo_misses(halo_tab[0], halo_tab[1], (tm / M) * lpr_a, l2cls_halo, l2_ways, cliff,
                                             l2_tab)
    # the wave's other CTAs of a tile re-read its sectors in the same round from other SMs, behind the CTAs
    # placed between (`_followers`)
    follow_a = follow_b = 0.0
    if follow:
        grid = (tiles_m, tiles_n, swz, sms, cps)
        wins, _, _, weight, _ = _follower_windows(*grid, False)
        follow_a = follower_misses(wins, a_step, b_step, weight, miss_a / ctas, cap_lines, l2_ways, cliff)
        wins, _, _, weight, _ = _follower_windows(*grid, True)
        follow_b = follower_misses(wins, a_step, b_step, weight, miss_b / ctas, cap_lines, l2_ways, cliff)
    dram_a = min(miss_a, uniq_a + reread_a + inner + halo + follow_a)
    dram_b = min(miss_b, uniq_b + reread_b + follow_b)
    # a k-step's filter lines that overfill their L2 set miss at every read (`_set_thrash`): that share of the
    # reads the L2 would otherwise have kept
    overfull = b_overfull_share(layer, kernel, gpu)
    if overfull > 0.0:
        dram_b += overfull * (miss_b - dram_b)
    dirty, dram_w = stores_in_l2(gpu, f, uniq_a, uniq_b, uniq_c, M, tm, delta, tiles_n, ctas, per_wave, wsum)
    if not timing:
        # strided dgrad's sub-problem: its figures per operand (`_common.operand_rows`, summed over the sub-problems
        # before they become a dict), A's compulsory sectors, and the later waves' re-reads of A in dram_a (strided
        # dgrad follows them on the whole grid instead, `_later_wave_rereads`)
        return (operand_rows(ex, sec_a, sec_b, sec_c, l1_hit_a, l1_hit_b, miss_a, miss_b, dram_a, dram_b, dram_w,
                             dirty, uniq_c),
                uniq_a, dram_a - min(miss_a, uniq_a + inner + halo + follow_a))
    out = relabel_loads(assemble(ex, sec_a, sec_b, sec_c, l1_hit_a, l1_hit_b, miss_a, miss_b, dram_a, dram_b,
                                 dram_w, dirty, uniq_c), kinds)
    out.update(layer_time(layer, gpu, kernel, out, machine, (ctas, ksteps, geo.flops)))
    return out
