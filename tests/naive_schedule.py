"""Slow, obviously correct references for `analytic._schedule`: enumerate every CTA of the grid.

The dispatch follows DESIGN section 3 literally: blocks in linear-id order, blocks outside the grid
skipped, passes over the SMs filling the lowest free slot, waves retiring together (every CTA takes
the same number of steps), so wave w is the w-th group of SMs x CTAs-per-SM valid blocks.
"""
from __future__ import annotations

import numpy as np

from analytic._schedule import BACK_WAVES

__all__ = ["naive_valid_blocks", "naive_sm_configs", "naive_wave_stats", "merge_configs"]


def naive_valid_blocks(tiles_m, tiles_n, swz):
    """[(tile_m, tile_n)] of the valid blocks in dispatch order (DESIGN's swizzle formulas)."""
    width = 1 << swz
    grid_x = tiles_m * width
    rows = -(-tiles_n // width)
    out = []
    for b in range(grid_x * rows):
        bx, by = b % grid_x, b // grid_x
        tm, tn = bx >> swz, (by << swz) + (bx & (width - 1))
        if tm < tiles_m and tn < tiles_n:
            out.append((tm, tn))
    return out


def _dispatch(tiles_m, tiles_n, swz, sms, cps):
    """waves[w] = {sm: [(tile_m, tile_n) by slot]} by simulating the dispatch passes."""
    blocks = naive_valid_blocks(tiles_m, tiles_n, swz)
    waves = []
    nxt = 0
    while nxt < len(blocks):
        slots = {sm: [] for sm in range(sms)}
        took = True
        while took and nxt < len(blocks):
            took = False
            for sm in range(sms):
                if len(slots[sm]) < cps and nxt < len(blocks):
                    slots[sm].append(blocks[nxt])
                    nxt += 1
                    took = True
        waves.append(slots)
    return waves


def _nearest_back(waves, w, sm, axis, tile):
    """The nearest wave 2 .. BACK_WAVES back whose CTAs on SM ``sm`` had ``tile`` (``axis`` 0: tile_m, 1:
    tile_n), where the previous wave's had not; 0 if none."""
    if w > 0 and any(t[axis] == tile for t in waves[w - 1][sm]):
        return 0.0
    for g in range(2, BACK_WAVES + 1):
        if w - g >= 0 and any(t[axis] == tile for t in waves[w - g][sm]):
            return float(g)
    return 0.0


def naive_sm_configs(tiles_m, tiles_n, swz, sms, cps):
    """Sorted list of per-CTA tuples (k, na, nb, arep, brep, prev, prev_a, prev_b, gap_a, gap_b, prev_na,
    prev_nb, ashare, back_a, na_extra, cover_a, cover_s, cover_more, back_more, brep_share, sub, back_b): gap_x
    is the slot distance to the nearest earlier slot of the SM with the same tile (0 if none), prev_nx the distinct tiles of the SM's CTAs in the previous wave (0 if none); ashare (another
    tile of an earlier slot's A window: strided dgrad's sub-problems only) is 0; back_a the nearest wave 2 ..
    BACK_WAVES back whose CTAs on the SM had this tile_m, where the previous wave's had not (0 if none);
    na_extra (the A windows of out-of-step tiles of one place: strided dgrad only) is 0; cover_a (the share of
    the tile's A window that the earlier CTA of prev_a or back_a read) is 1 where either is set (the same tile),
    else 0; cover_s, cover_more and back_more (strided dgrad's shares of the window that earlier slots and waves
    read) are 0, brep_share (a BREP row's share of filter sectors) 1, sub (its sub-problem) 0, and back_b the
    nearest wave 2 .. BACK_WAVES back whose CTAs on the SM had this tile_n, where the previous wave's had not."""
    waves = _dispatch(tiles_m, tiles_n, swz, sms, cps)
    rows = []
    for w, slots in enumerate(waves):
        for sm in range(sms):
            tiles = slots[sm]
            if not tiles:
                continue
            k = len(tiles)
            na = len({t[0] for t in tiles})
            nb = len({t[1] for t in tiles})
            prev = waves[w - 1][sm] if w > 0 else []
            pna, pnb = len({t[0] for t in prev}), len({t[1] for t in prev})
            for s, (tm, tn) in enumerate(tiles):
                back = _nearest_back(waves, w, sm, 0, tm)
                back_b = _nearest_back(waves, w, sm, 1, tn)
                same_m = [s - j for j in range(s) if tiles[j][0] == tm]
                same_n = [s - j for j in range(s) if tiles[j][1] == tn]
                rows.append((k, na, nb, float(bool(same_m)), float(bool(same_n)), float(w > 0),
                             float(any(t[0] == tm for t in prev)), float(any(t[1] == tn for t in prev)),
                             float(min(same_m, default=0)), float(min(same_n, default=0)), float(pna),
                             float(pnb), 0.0, back, 0.0,
                             float(back > 0.0 or any(t[0] == tm for t in prev)), 0.0, 0.0, 0.0, 1.0, 0.0, back_b))
    return sorted(rows)


def naive_wave_stats(tiles_m, tiles_n, swz, per_wave, gap_max, only_wave=None):
    """(hist_a, hist_b, hist_h, sums) with the meaning of `analytic._schedule.wave_stats`; with
    ``only_wave``, the histograms of that wave alone (the tiles' last reads still follow every wave)."""
    blocks = naive_valid_blocks(tiles_m, tiles_n, swz)
    nwaves = -(-len(blocks) // per_wave)
    hist_a = [0.0] * (gap_max + 1)
    hist_b = [0.0] * (gap_max + 1)
    hist_h = [0.0] * (gap_max + 1)
    sums = [0.0] * 7
    last_m, last_n = {}, {}           # tile -> last wave that read it
    for w in range(nwaves):
        wave = blocks[w * per_wave:(w + 1) * per_wave]
        ms = sorted({t[0] for t in wave})
        ns = {t[1] for t in wave}

        def gap(x):
            return min(w - last_m[x], gap_max) if x in last_m else None

        if only_wave is not None and w != only_wave:
            for x in ms:
                last_m[x] = w
            for y in ns:
                last_n[y] = w
            continue
        for x in ms:
            if gap(x) is not None:
                hist_a[gap(x)] += 1
        for y in ns:
            if y in last_n:
                hist_b[min(w - last_n[y], gap_max)] += 1
        touched = {x for x in ms} | {x - 1 for x in ms}
        for x in sorted(touched):
            if 0 <= x < tiles_m - 1:
                gaps = [g for g in (gap(x), gap(x + 1)) if g is not None]
                if gaps:
                    hist_h[min(gaps)] += 1
        runs = sum(1 for x in ms if x - 1 not in ms)
        sums[0] += len(ms)
        sums[1] += len(ns)
        sums[2] += len(wave)
        sums[3] += 1
        sums[4] += runs
        sums[5] += len(wave) * len(ms)          # each CTA sees its own wave's distinct tiles
        sums[6] += len(wave) * len(ns)
        for x in ms:
            last_m[x] = w
        for y in ns:
            last_n[y] = w
    return hist_a, hist_b, hist_h, sums


def merge_configs(rows):
    """Rows of ``analytic._schedule.sm_configs`` merged where columns 1.. are equal: weights summed in
    row order, configurations in order of first appearance (numpy array, like the model's summary)."""
    merged = {}
    for row in rows:
        key = tuple(float(x) for x in row[1:])
        if key in merged:
            merged[key] += float(row[0])
        else:
            merged[key] = float(row[0])
    return np.array([[w, *key] for key, w in merged.items()], np.float64).reshape(len(merged), rows.shape[1])
