"""Strided dgrad's block dispatch, block by block (DESIGN section 3), for the SM co-residency statistics.

Strided dgrad's blocks take different numbers of steps: a sub-problem of T taps per channel block runs
nblk T k-steps (nblk = ceil(K / tile_k)) and its stores, one that no tap reaches only its stores, and one
whose first dx pixel lies outside dx is skipped (it never takes a slot). So the dispatcher's waves drift
apart from the regular ``block i -> SM i mod SMs`` of a grid in lockstep: seed 9 #65 (5x5 stride 4: 12-,
6- and 3-round blocks) gives SM 0 seven CTAs and SM 100 nine, and SM 0's second set of CTAs holds
sub-problems 8, 11 and 13 where the lockstep grid puts 8, 10, 12 and 14. `sm_tables` follows the
dispatcher itself: refill passes at each round's start (every SM in order with a free slot takes the next
block into its lowest free slot, until a pass takes none), a CTA of k k-steps holding its slot for k + 1
rounds; and lays each SM's loading CTAs out, in start order, cps to a "wave", on the positions
``w SMs cps + s SMs + sm`` that `_schedule.sm_config_summary` reads. It stops after ``max_blocks`` blocks
(the statistics of the first waves stand for the rest), so its cost does not grow with the batch.
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._schedule import tile_of

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel module it calls
# into (`_schedule`; tests/test_jit_deps.py) changes this file with it
_JIT_DEPS_SHA256 = "4cec8599dc2b0051"


@njit(cache=True)
def dispatch(blk_steps, sms, cps, max_blocks):
    """Dispatch blocks ``0 .. min(n, max_blocks) - 1`` (in block order, each holding its slot ``blk_steps``
    rounds) over ``sms`` SMs of ``cps`` slots (DESIGN section 3).
    Returns (sm, slot, start round) of each dispatched block. The slots that free in a round are kept in one
    list per round (greedy dispatch ends by the blocks' steps over the slots plus the longest block's): 23,760
    blocks in 1.0 ms, not 2.3 with a heap (this VM)."""
    nb = min(blk_steps.shape[0], max_blocks)
    nslot = sms * cps
    longest = 1
    work = 0
    for b in range(nb):
        longest = max(longest, blk_steps[b])
        work += blk_steps[b]
    head = np.full(work // nslot + 2 * longest + 2, -1, np.int64)     # first slot freeing in each round
    link = np.full(nslot, -1, np.int64)                                 # the next slot freeing in its round
    busy = np.zeros(nslot, np.bool_)
    free = np.full(sms, cps, np.int64)
    out = np.empty((nb, 3), np.int64)
    nxt = 0
    rnd = 0
    while nxt < nb:
        took = True
        while took and nxt < nb:                      # refill passes
            took = False
            for sm in range(sms):
                if free[sm] == 0:
                    continue
                sl = 0
                while busy[sm * cps + sl]:
                    sl += 1
                idx = sm * cps + sl
                busy[idx] = True
                free[sm] -= 1
                end = rnd + blk_steps[nxt]
                link[idx] = head[end]
                head[end] = idx
                out[nxt, 0], out[nxt, 1], out[nxt, 2] = sm, sl, rnd
                nxt += 1
                took = True
                if nxt == nb:
                    break
        if nxt == nb:
            break
        # the next round a slot frees, and every slot that frees then
        rnd += 1
        while head[rnd] < 0:
            rnd += 1
        idx = head[rnd]
        while idx >= 0:
            busy[idx] = False
            free[idx // cps] += 1
            idx = link[idx]
    return out


@njit(cache=True)
def strided_blocks(tiles_m, tiles_n, swz, tpf, sub_steps, sub_place):
    """The blocks of strided dgrad's grid (``tiles_m`` = sub-problems x ``tpf``) that take a slot, in block
    order (`_schedule.tile_of`): (tile_m in the grid of loading sub-problems, tile_n, steps); sub-problem f
    is skipped where ``sub_steps[f]`` is 0 (its first dx pixel outside dx), reads nothing where
    ``sub_place[f]`` is -1 (tile_m -1: its stores only)."""
    blk_tm = np.empty(tiles_m * tiles_n, np.int64)
    blk_tn = np.empty(tiles_m * tiles_n, np.int64)
    blk_steps = np.empty(tiles_m * tiles_n, np.int64)
    i = 0
    for v in range(tiles_m * tiles_n):
        tm, tn = tile_of(v, tiles_m, tiles_n, swz)
        f = tm // tpf
        if sub_steps[f] == 0:
            continue
        blk_tm[i] = sub_place[f] * tpf + tm % tpf if sub_place[f] >= 0 else -1
        blk_tn[i] = tn if sub_place[f] >= 0 else -1
        blk_steps[i] = sub_steps[f]
        i += 1
    blk_tm, blk_tn, blk_steps = blk_tm[:i], blk_tn[:i], blk_steps[:i]
    return blk_tm, blk_tn, blk_steps


@njit(cache=True)
def sm_tables(blk_tm, blk_tn, blk_steps, sms, cps, max_blocks):
    """The loading CTAs of each SM in start order, cps to a wave, at the positions ``w sms cps + s sms + sm``
    (wave w, its slot s): (tile_m table, tile_n table, start round table, end round table (its first round
    without the CTA), the loading CTAs they hold, every loading CTA of the grid). The tables -1 where an SM's
    wave has fewer; where the dispatch stopped at ``max_blocks``, only the waves that every SM completed."""
    placed = dispatch(blk_steps, sms, cps, max_blocks)
    nb = placed.shape[0]
    count = np.zeros(sms, np.int64)
    total = 0
    for b in range(blk_tm.shape[0]):
        if blk_tm[b] >= 0:
            total += 1
    for b in range(nb):
        if blk_tm[b] >= 0:
            count[placed[b, 0]] += 1
    if nb < blk_tm.shape[0]:
        waves = count.min() // cps
    else:
        waves = (count.max() + cps - 1) // cps
    per_wave = sms * cps
    tab_tm = np.full(max(waves, 1) * per_wave, -1, np.int64)
    tab_tn = np.full(max(waves, 1) * per_wave, -1, np.int64)
    tab_st = np.full(max(waves, 1) * per_wave, -1, np.int64)
    tab_end = np.full(max(waves, 1) * per_wave, -1, np.int64)
    seen = np.zeros(sms, np.int64)
    held = 0
    for b in range(nb):
        if blk_tm[b] < 0:
            continue
        sm = placed[b, 0]
        j = seen[sm]
        seen[sm] += 1
        w = j // cps
        if w >= waves:
            continue
        v = w * per_wave + (j % cps) * sms + sm
        tab_tm[v] = blk_tm[b]
        tab_tn[v] = blk_tn[b]
        tab_st[v] = placed[b, 2]
        tab_end[v] = placed[b, 2] + blk_steps[b]
        held += 1
    return tab_tm, tab_tn, tab_st, tab_end, held, total
