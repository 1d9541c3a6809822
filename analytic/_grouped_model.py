"""The model of grouped and depthwise fprop (MODEL.md section 6a, "Grouped and depthwise layers").

L1 requests and sectors are exact (`analytic._counts_grouped`). A's L1 misses: each CTA's first reads of
its pixels in its groups' channel range, plus the re-reads (by later taps of a group, by later groups)
whose window of other lines does not fit the L1 sets they map to (`reuse_misses`, `a_misses`), judged per
class of tiles (`_tile_pixels`, exact). B: each CTA's filter slice once from L2, but for the CTAs whose
slice an earlier co-resident slot of their SM has just read (`_b_shared`). DRAM reads: x's and w's
distinct sectors, and the re-reads that miss L2 too (`_l2_rereads`). The write side comes
from the dense engine on the layer's dense part (`dense_equivalent`), scaled to the exact store sectors.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from simcore import metrics as Mx
from simcore._jit import njit
from traces.grouped import group_mode, groups_per_cta

from ._common import _TEMPLATE, cdiv, layer_time, nsets, tile_samples, uniq_input
from ._counts import _ramp, l1_counts
from ._l1_rounds import a_hit_share, b_hit_share, sweep_miss_shares
from ._l2 import PATTERN_X, cliff_params, l2_miss_prob, l2_miss_window, lines_cliff, pattern_cliff
from ._counts_grouped import block_classes, block_lines as _block_lines, grouped_a_blocks, tile_pixel_counts
from ._grouped_filters import filter_rows, in_set_ratio, round_lines
from ._grouped_returns import returning_share
from ._grouped_rereads import (_class_shifts, _issue_order, _reread_misses, _reread_table, _window_pixels,
                               residency_classes, tap_phases)
from ._geometry import _fprop, grid
from ._memo import memo
from ._readers import later_windows, reader_windows
from ._schedule import SM_SAMPLES, column_pair_gaps, grid_schedule, refetch_waves, sm_config_summary, tile_of
from ._stores import grid_write_side

# Numba's on-disk cache checks only this file's own time stamp; the kernels here compile in nothing from
# the modules above, but tests/test_jit_deps.py counts every kernel module they import: updating this
# digest of them after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "ed8564043627ec02"


@memo()
def dense_equivalent(layer, kernel):
    """(the dense layer of one sub-problem, its `Geometry`, number of sub-problems) of a grouped
    ``layer``; memoized (it depends on neither the GPU nor the factors)."""
    cg, kg = layer.c_per_group, layer.k_per_group
    tiles_n = cdiv(layer.k, kernel.tile_n)
    if group_mode(layer, kernel) == "multiple":
        channels, filters, copies = min(groups_per_cta(layer, kernel) * cg, layer.c), kernel.tile_n, tiles_n
    else:
        channels, filters, copies = cg, kg, layer.groups
    sub = dataclasses.replace(layer, c=channels, k=filters, groups=1, name=f"{layer.name}[dense part]")
    return sub, _fprop(sub, kernel), copies


def _period_sectors(lo, hi, pitch, eb, sec) -> tuple:
    """(the sectors, cyclically numbered, that channels [lo, hi) of consecutive pixels (pitch bytes apart)
    touch over one period of the pixel alignments (lcm(pitch, sec) bytes), the period in pixels)."""
    period = sec // math.gcd(pitch, sec)
    nsec = period * pitch // sec
    return {x % nsec for i in range(period)
            for x in range((i * pitch + lo * eb) // sec, (i * pitch + hi * eb - 1) // sec + 1)}, period


def _sectors_per_pixel(lo, hi, pitch, eb, sec):
    """Distinct sectors per pixel that channels [lo, hi) of consecutive pixels (pitch bytes apart) cover:
    counted cyclically over one period of the pixel alignments (`_period_sectors`), so pixels narrower than
    a sector share theirs."""
    touched, period = _period_sectors(lo, hi, pitch, eb, sec)
    return len(touched) / period


def a_misses(layer, kernel, sec, cross_miss, intra_miss=0.0) -> tuple:
    """A's L1 misses (first reads by each CTA, re-reads, the re-reads by later groups among them): per
    CTA, the distinct sectors it reads (its tile's pixels, `_tile_pixels`, x the channel range of its
    groups, blocks past a group's end included), plus the fraction ``cross_miss`` of the re-reads by its
    later groups (each group's k-steps read their own channel blocks' sectors of the
    same pixels) and the fraction ``intra_miss`` of a group's re-reads of a pixel at its later taps
    (`reuse_misses`)."""
    pixels, per_pixel, per_group = _pixel_sectors(layer, kernel, sec)
    cross = pixels * cross_miss * max(0.0, per_group - per_pixel)
    return pixels * per_pixel, cross + pixels * intra_miss * per_group, cross


@memo()
def _pixel_sectors(layer, kernel, sec) -> tuple:
    """`a_misses`'s figures that depend on neither the GPU nor the factors: (input pixels all M tiles
    read, distinct sectors per pixel a CTA's groups read, the sectors per pixel its groups' blocks read one
    group at a time)."""
    eb, gpc = kernel.elem_bytes, groups_per_cta(layer, kernel)
    pixels = _tile_pixels(layer, kernel, sec)[0]
    per_pixel = _column_units(layer, kernel, sec)
    per_group = sum(mult * _sectors_per_pixel(start, start + width, layer.c * eb, eb, sec)
                    for start, width, mult in grouped_a_blocks(layer, kernel, gpc).tolist())
    return pixels, per_pixel, per_group


@memo()
def _column_units(layer, kernel, unit) -> float:
    """Distinct ``unit``-byte units (sectors, lines) per pixel that the CTA columns' channel ranges cover,
    summed over the columns (a column's groups, blocks past a group's end included)."""
    eb = kernel.elem_bytes
    total = 0.0
    for col in range(cdiv(layer.k, kernel.tile_n)):
        channels = _column_channels(layer, kernel, col)
        if channels is not None:
            total += _sectors_per_pixel(*channels, layer.c * eb, eb, unit)
    return total


def _column_channels(layer, kernel, col):
    """The channels [lo, hi) CTA column ``col`` reads in each pixel: its groups' (kMultipleGroup: tile_n / K_g
    of them), each in whole tile_k blocks, the last clipped to C; None for a column past the last group."""
    tk, cg = kernel.tile_k, layer.c_per_group
    first = col * kernel.tile_n // layer.k_per_group
    last = min(first + groups_per_cta(layer, kernel), layer.groups) - 1
    if last < first:
        return None
    return first * cg, min(last * cg + (cdiv(cg, tk) - 1) * tk + tk, layer.c)


@memo()
def _pixel_units(layer, eb, unit) -> float:
    """A whole pixel's distinct ``unit``-byte units (all its channels), over the pixels' alignments."""
    return _sectors_per_pixel(0, layer.c, layer.c * eb, eb, unit)


# tiles whose distinct input pixels `_tile_pixels` counts one by one (evenly spaced over the grid's
# tiles_m: tiles differ by where they start in the image)
_TILE_SAMPLES = 24
_READER_SAMPLES = 8


@memo()
def _layer_pixels(layer, sec) -> float:
    """The layer's distinct in-image input pixels (`uniq_input` with one unit a pixel)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    return uniq_input(layer.n, 1, layer.h, layer.w, layer.p, layer.q, layer.r, layer.s, sh, sw, ph, pw, dh, dw,
                      sec, True, sec)


@memo()
def _tile_pixels(layer, kernel, sec):
    """(input pixels all M tiles read, counted once per tile; those of one tile, on average; classes
    (pixels of a tile, share of the GEMM rows in such tiles)): the distinct
    in-image input pixels of a tile's T output rows over every filter position (taps ``dil`` apart,
    padding, image boundaries inside the tile), counted exactly on up to `_TILE_SAMPLES` tiles evenly
    spaced along M (a cost independent of the batch)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    M, tm = layer.gemm_m, min(kernel.tile_m, layer.gemm_m)
    tiles_m = cdiv(M, tm)
    P, Q, H, W = layer.p, layer.q, layer.h, layer.w
    picks, stands = tile_samples(M, tm, _TILE_SAMPLES)
    counts = tile_pixel_counts(picks, tm, M, P, Q, H, W, layer.r, layer.s, sh, sw, ph, pw, dh, dw)
    rows = np.minimum((picks + 1) * tm, M) - picks * tm
    total = float(np.dot(stands, counts))
    share = stands * rows.astype(np.float64) / M     # GEMM rows in tiles like each sample
    values, where = np.unique(counts.astype(np.float64), return_inverse=True)
    classes = tuple(zip(values.tolist(), np.bincount(where, weights=share).tolist()))
    return max(_layer_pixels(layer, sec), total), total / tiles_m, classes


@memo()
def _readers(layer, kernel) -> tuple:
    """`_readers.later_windows` of the layer's tiles, on up to `_READER_SAMPLES` sampled tiles."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    M, tm = layer.gemm_m, min(kernel.tile_m, layer.gemm_m)
    picks, stands = tile_samples(M, tm, _READER_SAMPLES)
    out = later_windows(*reader_windows(
        picks, stands, tm, M, layer.p, layer.q, layer.h, layer.w, layer.r, layer.s, sh, sw, ph, pw, dh, dw))
    for a in out[1:]:
        a.setflags(write=False)
    return out


@memo()
def _window_lines(layer, kernel, line) -> tuple:
    """((lines a pixel's channel window covers, share of the channel blocks), ...): every group's
    channel blocks [g C_g + c0, + T_k) (clipped to C) at every alignment of a pixel to the line (pixels
    C e bytes apart), the lines of each block averaged over the alignments; pixels narrower than a line
    share it (at most C e / line lines a pixel). Where a block sits in the pixel decides whether it
    straddles a line: mobilenet_v2's depthwise 144-channel fp32 pixels (4.5 lines) straddle for 14 of
    every 32 groups, every other pixel, and those groups' windows are 1.5 lines a pixel, not 1.22."""
    values, index = block_classes(layer, kernel, line)
    counts = np.bincount(index, minlength=len(values))
    return tuple(zip(values, (counts / counts.sum()).tolist()))


@memo()
def _window_lines_l2(layer, kernel, line, columns) -> np.ndarray:
    """`_window_lines`' classes with the lines the L2 sees a pixel and busy CTA column: under kMultipleGroup
    the ``columns`` busy columns (in block order, chunks of consecutive columns) read, in one group step,
    blocks GPC groups apart, and those share lines: a block that straddles into the next line straddles into
    the next column's own line, and blocks closer than a line share it (the union of the columns' lines,
    counted per step and alignment, over the columns). Seed 12 #140 (768 depthwise fp16 channels, 12 columns
    of 64 groups, 32-byte windows): in the 15 straddling steps of 64 the replay's L2 sees 18,813 distinct
    lines a step, the pixels' 12 columns' lines, not twice as many: the model counted 2 lines a pixel and
    column, at 1.15 L2s, and DRAM reads +4,781 %. Seed 10 #93 (16 columns' 32-byte windows 64 bytes apart):
    8 lines a pixel, half a line a column."""
    out = _as_array(_window_lines, layer, kernel, line).copy()
    if columns < 2 or group_mode(layer, kernel) != "multiple" or layer.c * kernel.elem_bytes <= line:
        out.setflags(write=False)
        return out
    lines, first, last = _block_lines(layer, kernel, line)
    gpc, nblk = groups_per_cta(layer, kernel), len(range(0, layer.c_per_group, kernel.tile_k))
    per_col = gpc * nblk                                  # a column's blocks, in step order
    ncols = cdiv(lines.shape[0], per_col)
    pad = ncols * per_col - lines.shape[0]                # a partial last column: its missing blocks, none
    f = np.concatenate((first, np.full((pad, first.shape[1]), -1))).reshape(ncols, per_col, -1)
    l_ = np.concatenate((last, np.full((pad, last.shape[1]), -2))).reshape(ncols, per_col, -1)
    eff = np.zeros((ncols, per_col))
    for c0 in range(0, ncols, columns):
        fs, ls = f[c0:c0 + columns], l_[c0:c0 + columns]
        # the union of the columns' line ranges, ascending: each adds the lines past the ones before
        count = np.zeros(fs.shape[1:])
        top = np.full(fs.shape[1:], -1)
        for c in range(fs.shape[0]):
            valid = ls[c] >= fs[c]
            count += np.where(valid, np.maximum(0, ls[c] - np.maximum(fs[c], top + 1) + 1), 0)
            top = np.where(valid, np.maximum(top, ls[c]), top)
        present = (ls >= fs).sum(axis=0)
        eff[c0:c0 + columns] = (count / np.maximum(present, 1)).mean(axis=1)
    eff = np.minimum(eff.ravel()[:lines.shape[0]], lines)
    rounded = np.round(lines, 6)
    for i, value in enumerate(out[:, 0]):
        out[i, 0] = float(eff[rounded == round(value, 6)].mean())
    out.setflags(write=False)
    return out


def _floor_ceil(x) -> tuple:
    """((floor x, its weight), (floor x + 1, its weight)): x as a mix of its two neighbouring integers."""
    lo = math.floor(x)
    return (lo, 1.0 - (x - lo)), (lo + 1, x - lo)


@memo()
def _same_class_residents(layer, kernel, gpu, resident, nclass) -> float:
    """Co-resident CTAs' window lines (this CTA's included, ``resident`` CTAs in all) in the class of L1 sets of a line
    of this CTA's window, in tiles' windows, where the pixels reach only 1 / nclass of the sets: a pixel pitch a
    whole number of set strides puts a group step's lines in the sets its channel block's place in the pixel picks.
    Slot s of an SM holds the CTA sms s blocks after slot 0's: its column's first group dg groups of C_g on (taken
    from the grid's blocks, `_slot_groups`; past the grid's end, dcol = s sms / tiles_m columns and dcol T_n / K_g
    groups on, floor or ceiling weighted by the remainder); its window's lines in each of this window's lines'
    class, `_class_lines` (a window of one line: 1 where it falls in the class). Seed 1 #34 (64 groups of 6
    channels, 1,536-byte pixels in one set of 4, 7 CTAs an SM, the 6 others of other columns) counted all 7 in its
    set. Checked against an enumeration of blocks and byte offsets (tests/test_grouped_model.py). A swizzle steps
    consecutive blocks along a band of 2^swz columns first: the columns between the two slots' blocks are taken from
    the grid (`_schedule.tile_of`, up to 64 blocks sampled); held-out seed 9 #123 (swizzle 3: slots 5 columns apart,
    2.5 lines, another set) counted the other slot in its set half the time (A L1 misses +163 %)."""
    if nclass <= 1:
        return resident
    tiles_m = cdiv(layer.gemm_m, kernel.tile_m)
    tiles_n = cdiv(layer.k, kernel.tile_n)
    ctas = tiles_m * tiles_n
    line = gpu.line_bytes
    out = _class_lines(layer, kernel, line, nclass, 0)
    s = 1
    while s < resident:
        # the columns between block v and block v + s sms (`_schedule.tile_of`: with a swizzle, consecutive
        # blocks step along the columns of a 2^swz band first), over sampled v
        span = ctas - s * gpu.sms
        if span > 0:
            take = min(span, _SLOT_SAMPLES)
            dgs = [(int(d), n / take) for d, n in zip(*np.unique(
                _slot_groups(tiles_m, tiles_n, kernel.swizzle_log, s * gpu.sms, span, take, kernel.tile_n,
                             layer.k_per_group), return_counts=True))]
        else:
            dgs = [(dg, wc * wg) for dcol, wc in _floor_ceil(s * gpu.sms / tiles_m)
                   for dg, wg in _floor_ceil(dcol * kernel.tile_n / layer.k_per_group)]
        same = sum(wg * _class_lines(layer, kernel, line, nclass, dg) for dg, wg in dgs)
        out += min(1.0, resident - s) * same
        s += 1
    return out


@memo(4096)
def _class_lines(layer, kernel, line, nclass, dg) -> float:
    """Lines of the window of a CTA ``dg`` groups on that fall in the class of sets of a line of this CTA's window, in
    the mean over this CTA's window lines and its channel blocks (`_block_lines`: every group's blocks, clipped to
    C, at the pixels' alignments; a block of group g meets the same block of group g + dg, the other CTA at the same
    group step), the groups with a partner that far on or back, each way half. A straddling window puts a line in
    each of two classes: held-out seed 16 #276 (64 depthwise fp32 channels, 256-byte pixels in 2 of 4 sets, columns
    of 32 groups): column 0's windows straddle into column 1's line at 31 of 32 steps, so on an SM of two CTAs of
    each column a set holds all four tiles' pixels, 128 lines on 96 ways (replayed), where counting first lines
    alone put two in it (A L1 misses -98.6 %). ``dg`` = 0: this CTA's own lines in the class (1 for a window of at
    most ``nclass`` lines)."""
    _, first, last = _block_lines(layer, kernel, line)
    groups = layer.groups
    if dg >= groups:
        return 0.0
    per = first.shape[0] // groups                 # channel blocks a group
    first, last = first.reshape(groups, per, -1), last.reshape(groups, per, -1)
    early, late = slice(0, groups - dg), slice(dg, groups)
    out = 0.0
    for mine, other in ((early, late), (late, early)):  # the other CTA dg groups on, or dg groups back
        f0, l0, f1, l1 = first[mine], last[mine], first[other], last[other]
        total = np.zeros(f0.shape)
        for i in range(int((l0 - f0).max()) + 1):        # this window's i-th line, where it has one
            ell = f0 + i
            total += np.where(ell <= l0, (l1 - ell) // nclass - (f1 - ell - 1) // nclass, 0)
        out += 0.5 * float((total / (l0 - f0 + 1)).mean())
    return out


@njit(cache=True)
def _slot_groups(tiles_m, tiles_n, swz, step, span, take, tn, kg):
    """|groups| between the first groups of block v's and block v + step's CTA columns (`_schedule.tile_of`;
    column j starts at group j tn // kg), for ``take`` blocks v spread over the first ``span``."""
    out = np.empty(take, np.int64)
    for i in range(take):
        v = i * span // take
        j0 = tile_of(v, tiles_m, tiles_n, swz)[1]
        j1 = tile_of(v + step, tiles_m, tiles_n, swz)[1]
        out[i] = abs(j1 * tn // kg - j0 * tn // kg)
    return out


@njit(cache=True)
def _slot_columns(tiles_m, tiles_n, swz, sms, slots, take):
    """Distinct CTA columns among an SM's ``slots`` co-resident CTAs (slot s holds block v + s sms,
    `_schedule.tile_of`), the mean over ``take`` blocks v spread over the grid: the distinct filter tiles they
    read. Held-out seed 33 #134 (8 columns in bands of 8, 132 SMs, 8 CTAs an SM): slots 132 blocks apart are 4
    columns apart, so an SM's 8 CTAs read 2 filter tiles, not 8 (A's L1 hits -63 % when every CTA's filter
    lines were counted in the re-read's set)."""
    ctas = tiles_m * tiles_n
    span = max(1, ctas - (slots - 1) * sms)
    n = min(span, take)
    seen = np.empty(max(slots, 1), np.int64)
    total = 0
    for i in range(n):
        v = i * span // n
        k = 0
        for s in range(slots):
            b = v + s * sms
            if b >= ctas:
                break
            col = tile_of(b, tiles_m, tiles_n, swz)[1]
            new = True
            for q in range(k):
                if seen[q] == col:
                    new = False
                    break
            if new:
                seen[k] = col
                k += 1
        total += k
    return total / n


_ONE_WINDOW = np.ones((1, 2), np.float64)
_SLOT_SAMPLES = 64          # blocks sampled for the columns between two slots of an SM


def _tile_classes(layer, kernel, sec) -> tuple:
    return _tile_pixels(layer, kernel, sec)[2]


@memo()
def _as_array(table, layer, kernel, unit) -> np.ndarray:
    """A memoized table of pairs (``table(layer, kernel, unit)``) as a read-only float array."""
    out = np.array(table(layer, kernel, unit), np.float64)
    out.setflags(write=False)
    return out


def reuse_misses(layer, kernel, gpu, machine, f) -> tuple:
    """(miss chance of a tile's re-read of a pixel by the next group, summed miss chances of its re-reads inside
    a group), per (pixel, tile) pair, and the same per class of window lines and per distance
    (`_grouped_rereads._reread_misses`' ``by_class`` and ``by_dist``, in `_window_lines`' classes: where one L1
    class stands for them all, each at its share) for the L2 side, `_l2_rereads`. A tile reads a pixel at the
    taps whose output row falls in it (`_reread_table`); between two reads, d k-steps apart by rows dm GEMM rows
    apart, each co-resident CTA (per class of SMs by the CTAs present over a CTA's group steps,
    `_present_classes`; where the pixels reach some of the sets, those in this CTA's class of sets:
    `_same_class_residents`) reads its tile's distinct pixels of those k-steps in the re-read's class of sets
    (`tap_phases`): inside a group, `_window_pixels` scaled to the tile's class (`_tile_pixels`); for the next
    group's re-read, which wraps around the sweep, the tile's pixels but those read only at the taps between its
    first and last read (`_cross_windows`). They are stretched or shrunk by where the two rows sit in the
    k-step's issue order (`_jittered_miss`), into the L1 sets that one tap's pixels reach, with the filter lines
    of the rounds between (`_b_lines_round`, at most the group's slice; the SM's columns' slices one block where
    they share a line, `_filter_blocks`): x = CTAs x lines / (ways x those sets), per class of channel-block
    windows (`_window_lines`). Inside a group against the dense engine's L1 ramp (``l1_hit_lo`` /
    ``l1_hit_hi``); the next group's re-read replays the same walk, a step at the ways
    (`_grouped_rereads._cyclic_miss`)."""
    cps, ways, sets = machine
    tiles_m, tiles_n = cdiv(layer.gemm_m, kernel.tile_m), cdiv(layer.k, kernel.tile_n)
    ctas = tiles_m * tiles_n
    reach = nsets((layer.c * kernel.elem_bytes,), sets, gpu.line_bytes)
    # the sets one tap's pixels reach (`tap_phases`): the windows count the pixels of the re-read's class
    nphase, nsa = tap_phases(layer, kernel.elem_bytes, sets, gpu.line_bytes)[1:]
    # lines of a pixel's channel window in those sets, per class of channel blocks (`_window_lines`); a
    # window that straddles into a set the pixels do not reach is not counted there
    windows, classes, b_round, b_slice, intra_rows, cross_rows, longest, win_tile, order = _reread_figures(
        layer, kernel, gpu.line_bytes, gpu.sector_bytes, sets)
    windows_all = windows
    windows = windows if reach == sets else _ONE_WINDOW
    b_round, b_slice = b_round / (ways * sets), b_slice / (ways * sets)
    # co-resident CTAs of one CTA column read the same filter lines in step: the SM's distinct filter tiles are
    # the distinct columns of its slots (`_slot_columns`)
    residents = np.array([(resident, _same_class_residents(layer, kernel, gpu, resident, sets // reach), share,
                           _filter_blocks(layer, kernel, gpu.line_bytes, min(resident, _slot_columns(
                               tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, math.ceil(resident), _SLOT_SAMPLES))))
                          for resident, share in _present_classes(layer, kernel, ctas, gpu.sms, cps)], np.float64)
    # the sets a pixel's window fills in the next group's walk: a tap's sets times the lines the window covers
    # (1x1 depthwise C 256 fp32: 1,024-byte pixels reach one set, 128-byte windows straddle into a second; the
    # round's filter line lands in one of the two, `tests/test_grouped_cyclic.py`)
    a_sets = min(float(sets), nsa * math.ceil(float(windows_all[:, 0] @ windows_all[:, 1]) - 1e-9))
    cross, intra, by_class, by_dist = _reread_misses(
        intra_rows, cross_rows, longest, windows, classes, residents, float(ways * nsa), b_round, b_slice, win_tile,
        f.l1_hit_lo, f.l1_hit_hi, order,
        (float(ways), float(sets), a_sets, float(nphase), in_set_ratio(layer, kernel, sets, gpu.line_bytes)))
    if windows.shape[0] < windows_all.shape[0]:   # one L1 class: each class of the L2's at its share
        by_class = by_class[0][None, :] * windows_all[:, 1:2]
        by_dist = by_dist[0][None, :, :] * windows_all[:, 1][:, None, None]
    return cross, intra, by_class, by_dist


def _present_classes(layer, kernel, ctas, sms, cps) -> tuple:
    """`residency_classes` over the time a CTA's re-reads run: under kMultipleGroup a partial last CTA column
    has fewer groups, so where the grid runs in one wave its CTAs finish first and their co-residents run the
    rest alone (the L2's `_busy_periods` alike). The wave's CTAs are tallied SM by SM (`_present_tally`: block
    v on SM v mod SMs, DESIGN section 3's passes; its column from the grid, `_schedule.tile_of`; each CTA's
    group steps with the co-residents still running, weighted by its steps). The slots past the first hold
    the grid's last blocks, the partial column's: mobilenet_v2 ``features.7.conv.1.0`` (v100, batch 32: 49
    x 2 CTAs on 80 SMs, columns of 128 and 64 groups) runs 24.5 % of its re-reads beside a second CTA, where
    pairs drawn at random said 30.6 % (replayed: a re-read 2 taps on misses 63 % on SM 0, its partner there
    in 60 % of the windows). Seed 4 #99 (40 CTAs of 32 and 16 groups on 30 SMs): its SMs' second CTA is
    there for 2 of 3 re-reads, replayed."""
    classes = residency_classes(ctas, sms, cps)
    tiles_n = cdiv(layer.k, kernel.tile_n)
    if ctas > sms * cps or tiles_n == 1 or group_mode(layer, kernel) != "multiple":
        return classes
    g_full = kernel.tile_n // layer.k_per_group
    g_last = (layer.k - (tiles_n - 1) * kernel.tile_n) // layer.k_per_group
    if g_last >= g_full:
        return classes
    tally = _present_tally(cdiv(layer.gemm_m, kernel.tile_m), tiles_n, kernel.swizzle_log, sms, g_full, g_last)
    return tuple((k + 1.0, float(v)) for k, v in enumerate(tally.tolist()) if v > 0.0)


@functools.lru_cache(maxsize=1024)
def _present_tally(tiles_m, tiles_n, swz, sms, g_full, g_last) -> np.ndarray:
    """`_present_classes`' one-wave tally: [k - 1] the share of the CTAs' group steps run with k CTAs on the SM."""
    out = _present_steps(tiles_m, tiles_n, swz, sms, g_full, g_last)
    out /= out.sum()
    out.setflags(write=False)
    return out


@njit(cache=True)
def _present_steps(tiles_m, tiles_n, swz, sms, g_full, g_last):
    """Group steps run with k CTAs on the SM ([k - 1]), summed over the wave's CTAs: block v on SM v mod sms,
    its steps g_last in the last column, else g_full; all start together, so between two of an SM's finishing
    steps the CTAs not yet finished each run that stretch beside one another."""
    ctas = tiles_m * tiles_n
    slots = (ctas + sms - 1) // sms
    out = np.zeros(slots)
    steps = np.empty(slots, np.int64)
    for sm in range(min(sms, ctas)):
        n = 0
        for v in range(sm, ctas, sms):
            steps[n] = g_last if tile_of(v, tiles_m, tiles_n, swz)[1] == tiles_n - 1 else g_full
            n += 1
        ends = np.sort(steps[:n])
        prev = 0
        for i in range(n):                        # CTAs i .. n - 1 run from prev to ends[i]
            if ends[i] > prev:
                out[n - i - 1] += (n - i) * (ends[i] - prev)
                prev = ends[i]
    return out


def _filter_blocks(layer, kernel, line, tiles) -> float:
    """Separate blocks of filter lines that ``tiles`` CTA columns read at one group step: under kMultipleGroup
    column c reads group c GPC + gi, T_n R S C_g e bytes after column c - 1's, so where the columns' slices
    all lie within a line they are one block (seed 4 #99: 1x1 depthwise fp16, two columns' 2-byte slices 64
    bytes apart, one line in one set, not one in each of two)."""
    if tiles <= 1.0 or group_mode(layer, kernel) != "multiple":
        return tiles
    eb = kernel.elem_bytes
    stride = kernel.tile_n * layer.r * layer.s * layer.c_per_group * eb
    slice_bytes = layer.k_per_group * layer.r * layer.s * layer.c_per_group * eb
    return 1.0 if (tiles - 1.0) * stride + slice_bytes <= line else tiles


@memo()
def _reread_figures(layer, kernel, line, sec, sets) -> tuple:
    """`reuse_misses`' figures that depend on neither the GPU's caches nor the factors, in one lookup:
    (window lines per class of channel blocks, tile classes, a round's and a group step's filter lines,
    the re-read table's intra, cross and longest rows, a tile's distinct pixels between taps, the issue
    order)."""
    table = _reread_table(layer, kernel, sets, line)
    # the issue order's rows in classes of sets, per dm of the re-read table's rows (`_class_shifts`)
    dms = np.unique(np.concatenate((table[0][:, 2], table[1][:, 1]))).astype(np.int64)
    return (_as_array(_window_lines, layer, kernel, line), _as_array(_tile_classes, layer, kernel, sec),
            *_b_lines(layer, kernel, line), *table, _window_pixels(layer, kernel, sec, sets, line),
            _class_shifts(_issue_order(layer, kernel, sets, line), dms))


def _busy_periods(layer, kernel, gpu, machine) -> tuple:
    """The L2 windows of the next group's re-reads (`_l2_rereads`): ((share of the re-reads, distinct
    input pixels of the busy tiles), ...). Busy CTAs: CTAs per SM x SMs, or the grid; consecutive CTAs
    share pixels (a dilated filter's tiles read nearly the whole image), so their pixels are at most the
    busy tiles' share of the layer's distinct pixels plus a tile's halo, and at most the layer's, per CTA
    column. Waves run in step (DESIGN section 3: every CTA has the same k-steps), so a partial last wave's
    re-reads meet its own, fewer, busy CTAs: two periods, the full waves' and the last one's, each weighted by
    its CTAs (3 #111, a depthwise 7x1 of 188 CTAs on 120 slots: the last 68 CTAs' straddling group steps fill
    0.36 of the L2, not 0.64, and miss none; with the full waves' window for every re-read DRAM reads were
    +113.7 %). Under kMultipleGroup a partial last column has fewer groups, so where the grid runs in one wave
    it finishes first and the other columns re-read their later groups beside one column less: two
    periods, each weighted by the group steps run in it (mobilenet_v2 features.7.conv.1.0, batch 32 on
    v100: 98 CTAs in 2 columns of 128 and 64 groups; one window of both columns for every re-read gave
    DRAM reads +83 %)."""
    tiles_m, tiles_n = cdiv(layer.gemm_m, kernel.tile_m), cdiv(layer.k, kernel.tile_n)
    ctas = tiles_m * tiles_n
    busy = min(float(ctas), float(machine[0] * gpu.sms))
    tile_px = _tile_pixels(layer, kernel, gpu.sector_bytes)[1]
    pixels = _layer_pixels(layer, gpu.sector_bytes)

    def window(busy_ctas, columns=None):
        per_column, busy_cols = busy_columns(busy_ctas, tiles_m, tiles_n, kernel.swizzle_log)
        return (min(per_column * tile_px, pixels * per_column / tiles_m + tile_px, pixels)
                * _group_windows(layer, kernel, busy_cols if columns is None else columns))

    if busy < ctas:
        rest = ctas - busy * math.floor(ctas / busy)          # the last wave's CTAs
        if rest < 1.0:
            return ((1.0, window(busy)),)
        return ((1.0 - rest / ctas, window(busy)), (rest / ctas, window(rest)))
    last = layer.k - (tiles_n - 1) * kernel.tile_n
    if tiles_n == 1 or last == kernel.tile_n or group_mode(layer, kernel) != "multiple":
        return ((1.0, window(busy)),)
    g_full, g_last = kernel.tile_n // layer.k_per_group, last // layer.k_per_group
    both = g_last * tiles_n                       # group steps with every column running
    rest = (g_full - g_last) * (tiles_n - 1)      # after the last column finished
    return ((both / (both + rest), window(busy, float(tiles_n))), (rest / (both + rest), window(busy, tiles_n - 1.0)))


def busy_columns(busy, tiles_m, tiles_n, swz) -> tuple:
    """(busy CTAs a column, busy columns): the grid's first ``busy`` blocks in block order (DESIGN 3: tile_m =
    bx >> swizzle_log, the columns of a band of 2^swizzle_log vary fastest). Unswizzled, a column's tile_m's, then
    the next column's; swizzled, each tile_m's band columns side by side, so ``busy`` CTAs short of the band's
    tiles hold busy / band tile_m's in each of its columns. Seed 6 #158 (4 columns, swizzle_log 3, 168 busy
    CTAs of 208 tile_m's): 42 tile_m's in 4 columns, where one column's 168 tile_m's doubled the L2 window's
    pixels and put the re-reads at 0.9 L2s (DRAM +165 %; replayed: no re-read misses)."""
    band = min(1 << swz, tiles_n)
    if busy >= tiles_m * band:
        return float(tiles_m), busy / tiles_m
    columns = min(float(band), busy)
    return busy / columns, columns


def _l2_rereads(layer, kernel, gpu, f, machine, by_class, by_dist, swept=None) -> tuple:
    """Chances that re-reads which missed the L1 miss the L2 too: (the next group's, those inside a
    group), each averaged over the re-reads that miss the L1 (``by_class``, ``by_dist``: `reuse_misses`'
    miss chances per class of window lines and per distance in taps). L1 hits never reach the L2's LRU
    order, so a re-read's L2 window runs back to the pixel's previous L1 miss and counts only the lines
    that missed the L1 since, per class of window lines (`_window_misses`):

    * where the previous read missed the L1 too, the busy tiles' pixels of the d taps between
      (`_window_pixels`' and `_cross_windows`' windows in every set; CTAs of one tile_m share them,
      `_group_windows` columns of channels), those whose lines missed there;
    * else a group step back (the walk repeats its misses group after group): the busy tiles' pixels
      (`_busy_periods`) whose lines miss the L1 at some read of it, those whose longest re-read misses
      (`_grouped_rereads._tile_rereads`' longest rows: a pixel whose longest gap fits the L1 never misses).
      A missing pixel misses M / h of its n reads (M the class's misses a pixel and group step, h the share
      that misses at all), so the read before a miss missed too with chance (M / h - 1) / (n - 1).

    Replayed (scratch `l2ws2`, `l2gap`: the L2 reads of every group step, and each same-CTA L2 re-read's
    distance to its previous L2 read): mobilenet_v2 features.14.conv.1.0 (3x3 stride 2, v100 batch 32)
    misses the L1 once a pixel and group step and its L2 re-reads are all 9 k-steps (one group step)
    apart, 61,130 lines a straddling step (88 % L2 misses), 30,565 the others (2 %); mobilenet_v2
    features.7.conv.1.0 misses 1.35 times a pixel and group step, 97 % of its lines, and 66 % of its L2
    re-reads are a group step apart (the model: 1.31, all, 70 %); held-out 9 #186 (3x3
    stride 2, every read an L1 miss) re-reads at the L2 1, 2, 3, 4, 6, 7 and 9 k-steps apart, missing 0, 2,
    2, 9, 29, 10 and 30 %: its tap distances. A class whose windows straddle a line thrashes the L1 where
    the others fit it, so its re-reads meet its own thrashing neighbours, not the layer's mean miss rate
    (efficientnet_b0 features.4.0.block.1.0: 15 k lines a step where pixels fit a line, 43-50 k where
    they straddle, against the L2's 49 k; the mean miss rate counted 0.37 of every class's pixels).
    Seed 1 #86 (a quarter of the P100's L2, 448 busy CTAs of 128 rows): one k-step's lines are seven times
    the L2's, and 91 % of A's L2 reads go to DRAM.

    ``swept``: the replay's per-class share of a sweep's lines that miss the L1 at all
    (`_l1_rounds.sweep_miss_shares`), where counted: the windows' share of the busy tiles' lines where it is below
    the pairs' own (MODEL.md section 6a: 67 #150's lines that stay in the L1 from one group step to the next).

    Each against the L2's capacity (the dense engine's cliff, `_l2`), per class of window lines: in one
    group step every pixel reads that group's block, so where the pixel pitch is a multiple of the line
    the straddling groups double the working set at once, and the convex cliff is averaged over the
    classes rather than taken at their mean."""
    cap = gpu.l2_bytes / gpu.line_bytes * f.l2_capacity
    ways, cliff = float(gpu.l2_ways), cliff_params(gpu, f)
    tiles_m, tiles_n = cdiv(layer.gemm_m, kernel.tile_m), cdiv(layer.k, kernel.tile_n)
    busy = min(float(tiles_m * tiles_n), float(machine[0] * gpu.sms))
    per_column, busy_cols = busy_columns(busy, tiles_m, tiles_n, kernel.swizzle_log)
    step_tiles = per_column * _group_windows(layer, kernel, busy_cols)
    lead, last_w, last_px, first_w, first_px = _readers(layer, kernel)
    columns = math.ceil(min(busy_cols, tiles_n))
    return _window_misses(_window_lines_l2(layer, kernel, gpu.line_bytes, columns),
                          np.array(_busy_periods(layer, kernel, gpu, machine), np.float64), by_class, by_dist,
                          _tile_pixels(layer, kernel, gpu.sector_bytes)[1] / (layer.r * layer.s), step_tiles / cap,
                          1.0 / cap, ways, cliff,
                          _window_cliffs(layer, kernel, gpu, f, columns, per_column), lead,
                          last_w, last_px, first_w, first_px, _NO_SWEEPS if swept is None else swept)


@memo(4096)
def _window_cliffs(layer, kernel, gpu, f, columns, per_column=1.0) -> np.ndarray:
    """Per class of window lines (`_window_lines`), the L2 cliff of the busy CTAs' window: in each pixel the
    busy tiles read, each of the first ``columns`` CTA columns' window, its lines from its first channel's
    line, the pixels in the order the busy tiles (``per_column`` a column) first read them, tap by tap
    (`_real_window_lines`); NaN rows where those lines are contiguous (the GPU's cliff, `l2_miss_prob`).
    A depthwise layer's columns read a line or two every 512 bytes of a 2,048-byte pixel: such lines, a fixed
    stride apart, crowd some sets and leave others (seed 1 #228, 1,024 channels fp16, 4 columns on a v100 with
    0.75 of its L2: re-reads 1.03-1.08 L2s of lines apart miss 70 % in the simulation, 95 % on the contiguous
    cliff, 52 % on this one). A strided filter's taps read every other pixel of every other row, whose lines
    crowd the sets further: seed 68 #150 (a 1x1 stride-2 depthwise layer of 384 fp32 channels, 112 busy
    CTAs of 128 rows on a p100) puts 51 % of a straddling group step's lines in over-full sets, where all
    pixels' lines in address order put 26 % (simulated: 13 % of the re-reads one k-step apart miss; 22 % of
    the groups straddle). Memoized per GPU and factors."""
    line, eb = gpu.line_bytes, kernel.elem_bytes
    windows = _window_lines(layer, kernel, line)
    out = np.full((len(windows), PATTERN_X.shape[0]), np.nan)
    starts = tuple(sorted({(col * kernel.tile_n // layer.k_per_group) * layer.c_per_group * eb // line * line
                           for col in range(columns)}))
    rows = min(layer.gemm_m, math.ceil(per_column - 1e-9) * kernel.tile_m)
    cap = gpu.l2_slices * gpu.l2_sets_per_slice * gpu.l2_ways * float(f.l2_capacity)
    for i, (lines, _w) in enumerate(windows):
        width = math.ceil(lines - 1e-9) * line
        tab = _real_window_cliff(layer.shape, layer.c * eb, starts, width, line, rows, gpu.l2_slices,
                                 gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, cap)
        if tab is not None:
            out[i] = tab
    out.setflags(write=False)
    return out


#: lines of the busy tiles' window that count as contiguous (the GPU's cliff holds): their share of the span
#: between the first and the last
CONTIGUOUS_SHARE = 0.97


@functools.lru_cache(maxsize=1024)
def _real_window_cliff(shape, pitch, starts, width, line, rows, slices, sets, ways, index, cap):
    """`_l2.lines_cliff` of `_real_window_lines`; None where they are contiguous. Cached per layer shape and GPU
    geometry (a study pays it once; `clear_memo` keeps it)."""
    need = int(PATTERN_X[-1] * cap) + 1
    lines, busy = _real_window_lines(shape, pitch, starts, width, line, rows, need)
    head = lines[:min(need, busy)]                       # the busy tiles' own window
    if head.shape[0] == 0 or head.shape[0] >= CONTIGUOUS_SHARE * (int(head.max()) - int(head.min()) + 1):
        return None
    tab = lines_cliff(slices, sets, ways, index, cap, lines)
    tab.setflags(write=False)                            # cached: every caller shares it
    return tab


#: chunks of busy tiles `_real_window_lines` reads exactly before it repeats them (each chunk the next tiles')
WINDOW_CHUNKS = 4


def _real_window_lines(shape, pitch, starts, width, line, rows, need):
    """(The distinct lines of the busy tiles' window, in the order the tiles first read them, then the next tiles'
    until ``need`` lines; how many the busy tiles' own are). The busy tiles are the first ``rows`` GEMM rows, the
    next ones each the next ``rows``; tap by tap (traces/KERNELS.md's grouped fprop: r, then s) their in-image
    pixels not read before, each pixel's lines of ``width`` bytes from each of ``starts`` (``pitch`` bytes a
    pixel). Past `WINDOW_CHUNKS` chunks the lines so far come again, moved on by their span (the tiles after read
    pixels alike; windows that long are past the cliff, the model's own stay within the busy tiles' and their
    halo); past the layer's rows there are no more lines. Numpy, linear in the taps' rows: 7-30 ms a table for
    3x3 to 7x7 layers, 0.25 s for an 11x11 stem's 121 taps of 240 tiles of 128 rows (3.7 M pixel reads a chunk);
    the 270 tables of the grouped networks at batch 1 and 64 on v100, a100 and h100 2.6 s in all, once a study
    (development VM)."""
    n, _c, h, w, _k, r, s, (sh, sw), (ph, pw), (dh, dw), _g = shape          # `ConvLayer.shape`'s order
    p_out = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    q_out = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    m_all, rows = n * p_out * q_out, max(1, rows)
    firsts = np.array(starts, np.int64)
    reach = np.arange((width - 1) // line + 2, dtype=np.int64)             # the most lines ``width`` bytes reach
    images = (min(m_all, WINDOW_CHUNKS * rows) - 1) // (p_out * q_out) + 1          # the images the rows reach
    seen = np.zeros(images * h * w, np.bool_)
    line_seen = np.zeros((images * h * w * pitch + int(firsts.max()) + width) // line + 2, np.bool_)
    parts, busy = [], 0
    for lo in range(0, min(m_all, WINDOW_CHUNKS * rows), rows):
        m = np.arange(lo, min(m_all, lo + rows), dtype=np.int64)
        img, pq = m // (p_out * q_out), m % (p_out * q_out)
        y0, x0 = (pq // q_out) * sh - ph, (pq % q_out) * sw - pw
        for rr in range(r):
            for ss in range(s):
                y, x = y0 + rr * dh, x0 + ss * dw
                pix = ((img * h + y) * w + x)[(y >= 0) & (y < h) & (x >= 0) & (x < w)]
                pix = pix[~seen[pix]]                 # one tap's rows read distinct pixels
                seen[pix] = True
                byte = pix[:, None] * pitch + firsts[None, :]                   # pixel x column
                cand = byte[:, :, None] // line + reach[None, None, :]
                cand = cand[cand <= (byte[:, :, None] + (width - 1)) // line]
                cand = cand[~line_seen[cand]]         # lines no earlier tap reached (repeats within the tap kept)
                line_seen[cand] = True
                parts.append(cand)
        count = int(line_seen.sum())
        busy = count if lo == 0 else busy
        if count >= need:
            break
    lines = _first_touch(np.concatenate(parts))
    if busy == 0 or lines.shape[0] >= need or WINDOW_CHUNKS * rows >= m_all:
        return lines, busy
    span = int(lines.max() - lines.min()) + 1
    copies = -(-need // lines.shape[0])
    return (lines[None, :] + span * np.arange(copies, dtype=np.int64)[:, None]).ravel()[:need], busy


def _first_touch(values):
    """``values`` without repeats, each where it first occurs."""
    _, first = np.unique(values, return_index=True)
    return values[np.sort(first)]


@njit(cache=True)
def _window_miss(x, ways, cliff, tabs, i):
    """`l2_miss_window` on class i's cliff (`_window_cliffs`), the contiguous one where it has none."""
    if np.isnan(tabs[i, 0]):
        return l2_miss_prob(x, ways, cliff)
    return l2_miss_window(x, ways, cliff, tabs[i])


@njit(cache=True)
def _window_misses(windows, periods, by_class, by_dist, tap_px, step_x, cross_x, ways, cliff, tabs, lead, last_w,
                   last_px, first_w, first_px, swept) -> tuple:
    """`_l2_rereads`' averages over the classes of window lines, the busy periods and the re-reads'
    distances. Per class, M misses of n reads a pixel and group step; the pixels that miss at all are those
    whose longest re-read misses (``by_class[:, 3]``, a share h), each missing M / h of its n reads: with
    chance q = (M / h - 1) / (n - 1) the read before missed too, and the window is the busy tiles' pixels of
    the d taps between (``by_dist``' windows) whose lines missed there, 1 - (1 - q)^j of them (j reads a
    pixel: d / (R S) of a group step's n reads of ``tap_px`` R S pixels, over the window's pixels), at most
    a group step's; else the group step's pixels whose lines miss the L1, h of them, for the share ``lead``
    of the pairs whose tile reads the pixel first in the step, and for the others the busy tiles' first reads
    of the taps since another tile's read of it (`_readers.later_windows`: ``last_w`` / ``last_px`` back to
    the other tiles' last read, weighed by the chance that a read past a pair's first misses the L1,
    (M − h) / (n − 1); ``first_w`` / ``first_px`` back to the latest of their first reads, the rest)."""
    cross = 0.0
    cross_w = 0.0
    intra = 0.0
    intra_w = 0.0
    top = periods[0, 1]
    for i in range(windows.shape[0]):
        lines, w = windows[i, 0], windows[i, 1]
        if w <= 0.0 or by_class[i, 2] <= 0.0:
            continue
        big = (by_class[i, 0] + by_class[i, 1]) / w   # M
        n = by_class[i, 2] / w
        # the pixels whose lines miss the L1 at all (h): those whose longest re-read misses; each misses M / h
        # of its n reads, so the read before a miss missed too with chance q = (M / h - 1) / (n - 1)
        h = min(1.0, by_class[i, 3] / w)
        # the share of the busy tiles' lines that reach the L2 in a group step (the windows below): where counted on
        # the replay (`_l1_rounds.sweep_miss_shares`), the class's lines a sweep reads that miss the L1 at all, where
        # fewer than the pairs' longest re-reads say (a line the next sweep's first taps re-read from the L1)
        hw = min(h, swept[i]) if i < swept.shape[0] and swept[i] >= 0.0 else h
        q = min(1.0, max(0.0, (big / h - 1.0) / (n - 1.0))) if h > 0.0 and n > 1.0 else 1.0
        # the other tiles' re-reads reach the L2 where they miss their L1: a read's chance past its first
        again = min(1.0, max(0.0, (big - h) / (n - 1.0))) if n > 1.0 else 0.0
        for j in range(periods.shape[0]):
            full = cross_x * periods[j, 1] * hw
            tiles = step_x * periods[j, 1] / top
            # the pair's first L1 miss of the group step: the group step's window where its tile reads the
            # pixel first, else the busy tiles' first reads since another tile's read of it (`_readers`): its
            # last where the other tiles' re-reads miss their L1, else the latest of their first reads
            p_full = lead * _window_miss(full * lines, ways, cliff, tabs, i)
            for c in range(last_w.shape[0]):
                p_full += again * last_w[c] * _window_miss(min(full, tiles * last_px[c] * hw) * lines, ways, cliff,
                                                           tabs, i)
            for c in range(first_w.shape[0]):
                p_full += (1.0 - again) * first_w[c] * _window_miss(min(full, tiles * first_px[c] * hw) * lines, ways,
                                                                    cliff, tabs, i)
            for d in range(by_dist.shape[1]):
                for k in range(2):
                    miss = by_dist[i, d, 2 * k]
                    if miss <= 0.0:
                        continue
                    pixels = by_dist[i, d, 2 * k + 1] / miss
                    near = 1.0 - (1.0 - q) ** max(1.0, d * tap_px * n / max(pixels, 1e-300))
                    p = periods[j, 0] * miss * (q * _window_miss(min(full, tiles * pixels * near) * lines, ways,
                                                                 cliff, tabs, i)
                                                + (1.0 - q) * p_full)
                    if k == 0:
                        intra += p
                    else:
                        cross += p
        cross_w += by_class[i, 0]
        intra_w += by_class[i, 1]
    return cross / cross_w if cross_w > 0.0 else 0.0, intra / intra_w if intra_w > 0.0 else 0.0


_NO_TAB = np.zeros(1, np.float64)
_NO_SWEEPS = np.zeros(0, np.float64)


@memo(4096)
def _column_reread_miss(layer, kernel, gpu, f, machine) -> float:
    """The share of a CTA column's first reads of sectors the columns before read (the same group's
    channels under kSingleGroup, a sector two groups' channels share) that miss the L2: the dense
    engine's re-fetch of a tile_m by later waves (`_schedule.wave_stats`' gaps, `_l2.refetch_misses`'s sum),
    a wave's lines its tiles' pixels in one column's channels (each tile's share, one halo a run of
    adjacent tiles), the filter slices and the stores. Column re-reads in the wave that read the tile
    first hit (read in step). Seed 2 #47 (16 groups of 24 fp16 channels, two 32-filter columns a group,
    v100): DRAM reads 1.74 x the distinct sectors, where every column's first reads were taken for L2
    hits (now 1.26 x predicted: its A lines, 6 apart, are judged on their own pattern's cliff,
    `_l2.pattern_cliff`; its stores, 16 lines apart, on the contiguous one). Memoized per GPU and
    factors."""
    tiles_m, tiles_n = cdiv(layer.gemm_m, kernel.tile_m), cdiv(layer.k, kernel.tile_n)
    if tiles_n < 2:
        return 0.0
    line = gpu.line_bytes
    hist_ra, hist_rb, _, wsum, _ = grid_schedule(tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, machine[0])[1]
    waves = wsum[3]
    # a re-read meets a full wave's lines (the dense engine's `model._tile_refetches`): the means of the full
    # waves, not of every wave with a small last one; a re-read in the last wave half of each, and a full
    # wave's stores (seed 68 #11, 133 CTAs a column on 112 slots and 7 1/8 waves: 25.4k store lines a wave
    # averaged, 28.5k a full wave, whose re-reads sit at 0.98 of the L2, not 0.87)
    (na, nb, nc, runs), last, hist_in, hist_last, _, _ = refetch_waves(tiles_m, tiles_n, kernel.swizzle_log,
                                                                       gpu.sms, machine[0])
    pixels = _pixel_sectors(layer, kernel, gpu.sector_bytes)[0]
    lines_px = _column_units(layer, kernel, line) / tiles_n  # a pixel's lines in one column's channels
    own = _layer_pixels(layer, gpu.sector_bytes) / tiles_m  # a tile's share of the pixels, and its halo:
    halo = max(0.0, pixels / tiles_m - own)                 # a run of adjacent tiles reads one (`wave_stats`)
    b_slice = _b_lines_slice(layer, kernel, line)
    c_cta = layer.gemm_m * layer.k * kernel.elem_bytes / line / (tiles_m * tiles_n)
    # a wave's columns of other channels read other lines of the same pixels (kSingleGroup: K_g / T_n
    # columns share a group's channels)
    share = max(1.0, layer.k_per_group / kernel.tile_n) if group_mode(layer, kernel) == "single" else 1.0
    ranges = max(1.0, nc / max(na, 1e-300) / share)
    loads = ranges * (na * own + runs * halo) * lines_px + nb * b_slice
    f1 = f_last = loads + nc * c_cta
    if last[2] > 0.0:
        ranges_l = max(1.0, last[2] / max(last[0], 1e-300) / share)
        f_last = 0.5 * (loads + ranges_l * (last[0] * own + last[3] * halo) * lines_px + last[1] * b_slice) \
            + nc * c_cta
    fnew = max(0.0, f1 - (hist_ra[1] * own * lines_px + hist_rb[1] * b_slice) / waves)
    cap = gpu.l2_bytes / line * f.l2_capacity
    # a column's channel range in each pixel: lines a pixel pitch apart reach a fraction of the sets
    width = min(cdiv(layer.c_per_group * groups_per_cta(layer, kernel), kernel.tile_k) * kernel.tile_k,
                layer.c) * kernel.elem_bytes
    tab = pattern_cliff(gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, float(f.l2_capacity),
                        layer.c * kernel.elem_bytes, width, line)
    tab = _NO_TAB if tab is None else tab
    ways, cliff = float(gpu.l2_ways), cliff_params(gpu, f)

    def missed(hist, first=f1):                             # re-reads g >= 1 waves on meet g waves' lines
        return sum(float(hist[g]) * l2_miss_window((first + (g - 1) * fnew) / cap, ways, cliff, tab)
                   for g in np.flatnonzero(hist).tolist() if g >= 1)

    if share == 1.0:
        return (missed(hist_in) + missed(hist_last, f_last)) / (tiles_m * (tiles_n - 1))
    # kSingleGroup with share columns a group: a group's later columns re-read all its sectors, its first
    # column only those it shares with the group before; so the pairs weigh by the sectors they share
    hists = _group_pair_gaps(tiles_m, tiles_n, kernel.swizzle_log, gpu.sms * machine[0], int(share))
    weights = _pair_overlaps(layer, kernel, gpu.sector_bytes, int(share))
    pairs = sum(w * float(hist.sum()) for hist, w in zip(hists, weights))
    return sum(w * missed(hist) for hist, w in zip(hists, weights)) / pairs if pairs > 0.0 else 0.0


@functools.lru_cache(maxsize=1024)
def _group_pair_gaps(tiles_m, tiles_n, swz, per_wave, share) -> tuple:
    """`_schedule.column_pair_gaps` with ``_PAIR_SAMPLES`` tiles, memoized per grid, read-only."""
    hists = column_pair_gaps(tiles_m, tiles_n, swz, per_wave, share, _PAIR_SAMPLES)
    for hist in hists:
        hist.setflags(write=False)
    return hists


@memo()
def _pair_overlaps(layer, kernel, sec, share) -> tuple:
    """Sectors per pixel that CTA column j shares with column j - 1 (their channel ranges' common sectors,
    over one period of the pixel alignments; a column's range as in `_column_units`), averaged over the pairs
    of one group (j not a multiple of ``share``) and over a group's first column and the column before."""
    eb = kernel.elem_bytes

    def sectors(col):
        channels = _column_channels(layer, kernel, col)
        return _period_sectors(*channels, layer.c * eb, eb, sec) if channels is not None else (set(), 1)

    sums, counts = [0.0, 0.0], [0, 0]
    prev = sectors(0)[0]
    for col in range(1, cdiv(layer.k, kernel.tile_n)):
        cur, period = sectors(col)
        kind = 0 if col % share else 1
        sums[kind] += len(prev & cur) / period
        counts[kind] += 1
        prev = cur
    return tuple(s / n if n else 0.0 for s, n in zip(sums, counts))


# tile_m rows sampled for `_group_pair_gaps` (every one up to this many)
_PAIR_SAMPLES = 256


def _group_windows(layer, kernel, columns) -> float:
    """Distinct channel windows a pixel has among ``columns`` busy CTA columns at one step: one a column,
    but under kSingleGroup T_n / K_g columns share a group (two 32-filter columns of a 64-filter group
    read the same channels: seed 2 #47, whose busy CTAs' L2 window was counted twice)."""
    if group_mode(layer, kernel) == "single":
        return max(1.0, columns * kernel.tile_n / layer.k_per_group)
    return max(1.0, columns)


@memo()
def _b_lines(layer, kernel, line) -> tuple:
    """(`_b_lines_round`, `_b_lines_slice`), memoized."""
    return _b_lines_round(layer, kernel, line), _b_lines_slice(layer, kernel, line)


def _b_lines_slice(layer, kernel, line) -> float:
    """Filter lines of a CTA's group step: its rows (kMultipleGroup: the group's K_g filters;
    kSingleGroup: its T_n), R S C_g elements each, one contiguous block."""
    return filter_rows(layer, kernel) * layer.r * layer.s * layer.c_per_group * kernel.elem_bytes / line + 1.0


def _b_lines_round(layer, kernel, line) -> float:
    """Filter lines a CTA reads in one round (`_grouped_filters.round_lines`: its rows' k-step channels, at the
    rows' own alignments to a line)."""
    return round_lines(layer, kernel, line)


def _b_shared(layer, kernel, gpu, f, machine) -> float:
    """Fraction of the CTAs whose filter slice an earlier co-resident slot of their SM reads in the same
    rounds (the dense engine's BREP configurations, `_schedule.sm_config_summary`), times the chance
    that its lines are still in the L1 one slot later: between the two reads, the earlier slot's other
    B lines and each slot's A lines of the round, against the ways of the sets they reach (the dense
    engine's ramp, ``l1_hit_lo`` / ``l1_hit_hi``). ResNeXt-like layers with one CTA column (K <= T_n)
    share every slice on an SM. A CTA whose SM ran a CTA of its column in the previous wave (PREV_B) finds
    the slice if one lifetime of the SM's lines fits the L1 (each CTA's distinct A lines and its slice):
    seed 3 #76 (kSingleGroup, 1x1 stride 2, 32x32 tiles on h100) simulated 94 % filter hits where 66 %
    were predicted."""
    cps, ways, sets = machine
    tiles_m, tiles_n = cdiv(layer.gemm_m, kernel.tile_m), cdiv(layer.k, kernel.tile_n)
    cfg = sm_config_summary(tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, cps, SM_SAMPLES)
    weight = cfg[:, 0].sum()
    if not weight:
        return 0.0
    lines_b, lines_a, life, pitch_b = _slice_lines(layer, kernel, gpu.line_bytes, gpu.sector_bytes)
    nsb = nsets((pitch_b,), sets, gpu.line_bytes)
    # a round's A lines lie in the ``reach`` sets its pixel pitch reaches: a filter line's set holds them all or
    # none, the first with the chance that puts `in_set_ratio` times their mean a set in it (seed 16 #279,
    # 4,608-byte filter rows and 1,024-byte pixels: a round's 32 filter lines and the tile's 32 pixel lines all
    # in one set, BREP re-reads there missed 99.4 % simulated; held-out 22 #288, 2-line filter rows in 2 sets,
    # 8-line pixels in one of them: half the filter lines beside the 64 pixel lines, 42 % hits simulated, 80 %
    # predicted at the mean)
    reach = nsets((layer.c * kernel.elem_bytes,), sets, gpu.line_bytes)
    chance = min(1.0, in_set_ratio(layer, kernel, sets, gpu.line_bytes) * reach / sets)
    life_x = life / (ways * sets)
    out = chance * _shared_slices(cfg, (lines_b / nsb + lines_a / reach) / ways, life_x, f.l1_hit_lo, f.l1_hit_hi)
    if chance < 1.0:
        out += (1.0 - chance) * _shared_slices(cfg, lines_b / nsb / ways, life_x, f.l1_hit_lo, f.l1_hit_hi)
    return out / weight


@memo()
def _slice_lines(layer, kernel, line, sec) -> tuple:
    """`_b_shared`'s figures that depend on neither the GPU's caches nor the factors: (a round's filter
    lines, a round's A lines, one CTA lifetime's lines: its distinct A lines (its tile's pixels, the
    sectors of its groups' channel range) and its filter slice, the filter pitch in bytes)."""
    eb = kernel.elem_bytes
    lines_a = min(kernel.tile_m, layer.gemm_m) * (1.0 + (kernel.tile_k * eb - 1) / line)
    life_a = _tile_pixels(layer, kernel, sec)[1] * _row_lines_per_pixel(layer, kernel, line)
    life_b = min(kernel.tile_n, layer.k) * layer.r * layer.s * layer.c_per_group * eb / line + 1.0
    return (_b_lines_round(layer, kernel, line), lines_a, life_a + life_b,
            layer.r * layer.s * layer.c_per_group * eb)


@memo()
def _row_lines_per_pixel(layer, kernel, line) -> float:
    """Distinct lines per read input pixel of a CTA column's channel range, over one image row: the pixels
    the taps read along w (every output column, every tap), each covering its channels' bytes, lines shared
    by neighbours counted once; the mean over the columns. Pixels narrower than a line that the taps read
    side by side share lines (62 #88: 32-byte pixels, 7x7 stride 4, every pixel of a row read: a quarter
    line each, not one, and a lifetime's lines fit the L1, where the PREV_B filter re-reads all hit
    simulated); pixels the stride skips take their own lines."""
    sw, pw, dw = layer.stride[1], layer.pad[1], layer.dilation[1]
    taps = (np.arange(layer.q)[:, None] * sw + np.arange(layer.s)[None, :] * dw - pw).ravel()
    w = np.unique(taps[(taps >= 0) & (taps < layer.w)])
    if not w.size:
        return 1.0
    eb, pitch = kernel.elem_bytes, layer.c * kernel.elem_bytes
    total, cols = 0.0, cdiv(layer.k, kernel.tile_n)
    for col in range(cols):
        channels = _column_channels(layer, kernel, col)
        if channels is None:
            continue
        first = (w * pitch + channels[0] * eb) // line
        last = (w * pitch + channels[1] * eb - 1) // line
        start = np.maximum(first, np.concatenate(([first[0]], last[:-1] + 1)))
        total += float(np.maximum(last - start + 1, 0).sum())
    return total / (w.size * cols)


@njit(cache=True)
def _shared_slices(cfg, round_x, life_x, lo, hi) -> float:
    """`_b_shared`'s sum over the configurations: BREP (gap_b slots back) at the round's lines between,
    else PREV_B (the previous wave's CTA on this SM read the slice) at one lifetime of its CTAs' lines."""
    out = 0.0
    for i in range(cfg.shape[0]):
        if cfg[i, 5] > 0.5:
            out += cfg[i, 0] * _ramp(cfg[i, 10] * round_x, lo, hi)
        elif cfg[i, 8] > 0.5:
            out += cfg[i, 0] * _ramp(cfg[i, 1] * life_x, lo, hi)
    return out


# metric keys, formatted once (predict_grouped: 30 f-strings a prediction were 3 % of its time)
_LOAD_KEYS = {op: tuple(f"{key}:{op}" for key in (Mx.L1_LD_REQUESTS, Mx.L1_LD_SECTORS, Mx.L1_LD_MISSES,
                                                  Mx.L1_LD_HITS, Mx.L2_RD_SECTORS, Mx.L2_RD_MISSES,
                                                  Mx.L2_RD_HITS, Mx.DRAM_RD_SECTORS))
              for op in "AB"}
_WRITE_KEYS = tuple((key, f"{key}:C") for key in (Mx.L2_WR_SECTORS, Mx.L2_WR_HITS, Mx.L2_WR_MISSES,
                                                  Mx.DRAM_WR_SECTORS, Mx.L2_DIRTY_AT_END))
_TOTAL_KEYS = tuple((key, tuple(f"{key}:{op}" for op in "ABC"))
                    for key in (Mx.L1_LD_REQUESTS, Mx.L1_LD_SECTORS, Mx.L1_LD_HITS, Mx.L1_LD_MISSES,
                                Mx.L1_ST_REQUESTS, Mx.L1_ST_SECTORS, Mx.L2_RD_SECTORS, Mx.L2_RD_MISSES,
                                Mx.L2_RD_HITS, Mx.DRAM_RD_SECTORS))


def predict_grouped(layer, gpu, kernel, f, machine) -> dict:
    """Every metric of a grouped fprop layer."""
    geo = dense_equivalent(layer, kernel)[1]
    total = _TEMPLATE.copy()
    ex = l1_counts(layer, kernel)
    eb, sec = kernel.elem_bytes, gpu.sector_bytes
    ctas = cdiv(layer.gemm_m, kernel.tile_m) * cdiv(layer.k, kernel.tile_n)
    # B: one read of each CTA's filter slice from L2, the filter tensor once from DRAM
    slice_b = cdiv(min(kernel.tile_n, layer.k) * layer.r * layer.s * layer.c_per_group * eb, sec)
    miss_b = min(float(ex["sec_B"]), float(ctas * slice_b)) * (1.0 - _b_shared(layer, kernel, gpu, f, machine))
    uniq_b = float(cdiv(layer.params * eb, sec))
    dram_b = min(miss_b, uniq_b)
    cross_miss, intra_miss, by_class, by_dist = reuse_misses(layer, kernel, gpu, machine, f)
    first, again, cross = a_misses(layer, kernel, sec, cross_miss, intra_miss)
    # first reads of sectors an earlier CTA of the same tile left in the SM's L1 (`_grouped_returns`)
    first *= 1.0 - returning_share(layer, kernel, gpu, f, machine, _tile_pixels(layer, kernel, sec)[1],
                                   _column_channels)
    miss_a = min(float(ex["sec_A"]), first + again)
    counted_a = a_hit_share(geo, layer, kernel, gpu, *machine)      # A's L1 hits counted (`_l1_rounds`)
    if counted_a is not None:
        miss_a = float(ex["sec_A"]) * (1.0 - counted_a)
        counted_b = b_hit_share(geo, layer, kernel, gpu, *machine)  # B's, after the SM's waves before (warm)
        if counted_b is not None:
            miss_b = float(ex["sec_B"]) * (1.0 - counted_b)
            dram_b = min(miss_b, uniq_b)
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    uniq_x = uniq_input(layer.n, layer.c, layer.h, layer.w, layer.p, layer.q, layer.r, layer.s, sh, sw, ph, pw,
                        dh, dw, eb, True, sec)
    swept = sweep_miss_shares(geo, layer, kernel, gpu, *machine) if counted_a is not None else None
    cross_l2, intra_l2 = _l2_rereads(layer, kernel, gpu, f, machine, by_class, by_dist, swept)
    # first reads of sectors an earlier CTA column read (its group, or a sector its groups' channels share):
    # once a column and pixel (the tiles of a column that share a halo pixel read it in step)
    per_pixel = _pixel_sectors(layer, kernel, sec)[1]
    shared = _layer_pixels(layer, sec) * max(0.0, per_pixel - _pixel_units(layer, kernel.elem_bytes, sec))
    cols = shared * _column_reread_miss(layer, kernel, gpu, f, machine)
    dram_a = min(miss_a, uniq_x + cols + cross * cross_l2 + (again - cross) * intra_l2)
    per_op = {
        "A": (ex["req_A"], ex["sec_A"], miss_a, dram_a),
        "B": (ex["req_B"], ex["sec_B"], miss_b, dram_b),
    }
    for op, (req, sectors, miss, dram) in per_op.items():
        k_req, k_sec, k_miss, k_hit, k_l2, k_l2miss, k_l2hit, k_dram = _LOAD_KEYS[op]
        total[k_req] = float(req)
        total[k_sec] = float(sectors)
        total[k_miss] = miss
        total[k_hit] = sectors - miss
        total[k_l2] = miss
        total[k_l2miss] = dram
        total[k_l2hit] = miss - dram
        total[k_dram] = dram
    # stores: the exact sectors; the L2's write misses those of the dense part's copies (min(its store sectors,
    # its distinct output sectors), scaled to the layer's stores: the last column's copy stores only K -
    # (tiles_n - 1) TN filters), at most the layer's distinct output sectors (groups whose channels share a
    # sector store it in turn: seed 18 #133, 70,227 written against 35,114 simulated); their dirty sectors and
    # DRAM writes the whole grid's walk (`_stores.grid_write_side`)
    stored = float(geo.counts["sec_C"])
    scale = ex["sec_C"] / stored if stored else 0.0
    copy_out = float(cdiv(geo.win.n * geo.win.p * geo.win.q * geo.gemm_n * eb, sec))
    written = min(min(stored, copy_out) * scale, float(cdiv(layer.gemm_m * layer.k * eb, sec)))
    dirty, dram_w = grid_write_side(gpu, kernel, f, machine, written, uniq_x, uniq_b, cdiv(layer.gemm_m, kernel.tile_m),
                                    cdiv(layer.k, kernel.tile_n))
    for (key, key_c), value in zip(_WRITE_KEYS, (float(ex["sec_C"]), ex["sec_C"] - written, written, dram_w, dirty)):
        total[key_c] = total[key] = value
    total[f"{Mx.L1_ST_REQUESTS}:C"] = float(ex["req_C"])
    total[f"{Mx.L1_ST_SECTORS}:C"] = float(ex["sec_C"])
    for key, per in _TOTAL_KEYS:
        total[key] = total.get(per[0], 0.0) + total.get(per[1], 0.0) + total.get(per[2], 0.0)
    total.update(layer_time(layer, gpu, kernel, total, machine, grid(layer, kernel)))
    return total
