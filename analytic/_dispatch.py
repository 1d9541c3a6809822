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

from ._l2 import l2_miss_prob
from ._schedule import tile_of
from ._timeline import _union

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel modules it calls
# into (`_schedule`, `_l2`, `_timeline`; tests/test_jit_deps.py) changes this file with it
_JIT_DEPS_SHA256 = "e6c91787add32283"


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
def sm_tables(blk_tm, blk_tn, blk_steps, placed, sms, cps):
    """The loading CTAs of each SM in start order, cps to a wave, at the positions ``w sms cps + s sms + sm``
    (wave w, its slot s), from the dispatch ``placed`` (`dispatch` of ``blk_steps``): (tile_m table, tile_n
    table, start round table, end round table (its first round without the CTA), the loading CTAs they hold,
    every loading CTA of the grid). The tables -1 where an SM's wave has fewer; where the dispatch stopped
    short of the grid, only the waves that every SM completed."""
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


@njit(cache=True)
def _merge_down(tag_of, lo_of, key, tag, lo, hi) -> int:
    """Adds [lo, hi] to ``key``'s union of this window (``tag``), whose ranges come in falling order of their
    starts and ends: the units it adds."""
    if tag_of[key] != tag:
        tag_of[key] = tag
        lo_of[key] = lo
        return hi - lo + 1
    if lo >= lo_of[key]:
        return 0
    added = min(hi, lo_of[key] - 1) - lo + 1
    lo_of[key] = lo
    return added


@njit(cache=True)
def _place_units(head, nxt, los, his, touched, ntouched, buf_lo, buf_hi) -> int:
    """Channel blocks in the union of each touched place's ranges [lo, hi] (a linked list a place: ``head``,
    ``nxt``): each place's few ranges gathered, then `_timeline._union`."""
    total = 0
    for t in range(ntouched):
        n = 0
        r = head[touched[t]]
        while r >= 0:
            buf_lo[n], buf_hi[n] = los[r], his[r] + 1
            n += 1
            r = nxt[r]
        total += _union(buf_lo, buf_hi, n)
    return total


@njit(cache=True)
def dy_reread_misses(blk_tm, blk_tn, blk_steps, placed, tpf, tiles_n, places, readers, nblk, nk, store_lines,
                     block_lines, step_b_lines, cap_lines, ways, cliff):
    """Strided dgrad: the L2 miss chances of dy's re-reads, place by place, on the dispatcher's rounds.

    Place i (tile i of every sub-problem: the same dy rows, `strided_blocks`' tile_m mod ``tpf``) is read by one
    CTA of every sub-problem and column; ``places`` sampled places are followed through their first ``readers``
    reads, at ``nk`` of the ``nblk`` channel blocks (both evenly spread). A CTA of T taps
    that starts in round s reads channel block k0 (of ``nblk``) in rounds s + k0 T .. s + k0 T + T - 1 (DESIGN 3a:
    blocks outermost), so CTAs side by side with other tap counts read a line of block k0 rounds apart, and a
    later CTA of the place reads it after all of them; taken in time order, a read that comes after every
    earlier one ended finds what was touched since the latest of them. In between the L2 takes the dx tiles of the CTAs
    that store in those rounds (their last round; ``store_lines`` each), the dy lines of the channel blocks
    that CTAs read in those rounds (``block_lines`` a block of a place, once a place and block) and their filter
    lines (``step_b_lines`` a k-step, once a column, sub-problem and k-step): the engine's cliff of that over
    ``cap_lines``, averaged over the blocks. Counted in rounds, not in waves of blocks: blocks of other lengths
    (other tap counts, store-only blocks) move the waves, a run of blocks that starts together ends together,
    and a line is read again after what was touched since its last read, not since its reader started (67 #86,
    3x3 stride 2, 9-, 5- and 3-round blocks on 30 slots: sub-problem 1's tile i starts in the round after
    sub-problem 0's wave stored; counted in waves of blocks, 40 % of the re-reads lay two waves on, and the
    whole filter, 5,184 lines, lay between any two).
    Returns (summed miss chances, read pairs counted), over the dispatched blocks."""
    nb = placed.shape[0]
    starts = np.empty(nb, np.int64)
    ends = np.empty(nb, np.int64)
    nsub = 1
    for b in range(nb):
        starts[b] = placed[b, 2]
        ends[b] = placed[b, 2] + blk_steps[b]
        if blk_tm[b] >= 0:
            nsub = max(nsub, blk_tm[b] // tpf + 1)
    # per block: its place (-1: store only), taps, and (column, sub-problem) key
    blk_place = np.full(nb, -1, np.int64)
    blk_taps = np.ones(nb, np.int64)
    blk_key = np.zeros(nb, np.int64)
    for b in range(nb):
        if blk_tm[b] >= 0:
            blk_place[b] = blk_tm[b] % tpf
            blk_taps[b] = (blk_steps[b] - 1) // nblk
            blk_key[b] = blk_tn[b] * nsub + blk_tm[b] // tpf
    ends_sorted = np.sort(ends)
    # per place, the window it last took a range in and its list of ranges (``head``, ``r_next``); per column and
    # sub-problem, the window and the start of its union so far
    a_tag = np.full(tpf, -1, np.int64)
    head = np.full(tpf, -1, np.int64)
    touched = np.empty(nb, np.int64)
    r_lo = np.empty(nb, np.int64)
    r_hi = np.empty(nb, np.int64)
    r_next = np.empty(nb, np.int64)
    buf_lo = np.empty(nb, np.int64)
    buf_hi = np.empty(nb, np.int64)
    b_tag = np.full(tiles_n * nsub, -1, np.int64)
    b_lo = np.zeros(tiles_n * nsub, np.int64)
    miss = 0.0
    pairs = 0
    tag = 0
    mine = np.empty(nb, np.int64)
    alive_next = np.empty(nb, np.int64)
    first_rd = np.empty(nb, np.int64)
    for pi in range(places):
        i = int((pi + 0.5) * tpf / places)
        n = 0
        for b in range(nb):
            if blk_place[b] == i:
                mine[n] = b
                n += 1
        n = min(n, readers)
        if n < 2:
            continue
        pairs += n - 1
        for kk in range(nk):
            k0 = (2 * kk + 1) * nblk // (2 * nk)          # sampled channel blocks, evenly spread
            # each reader's rounds of block k0, in time order; a read after every earlier one ended meets the
            # window since the latest of them
            for j in range(n):
                first_rd[j] = starts[mine[j]] + k0 * blk_taps[mine[j]]
            order = np.argsort(first_rd[:n], kind="mergesort")
            t0 = -1
            # the blocks not yet ended before a window, linked in start order (t0 only rises: an ended block is
            # dropped for good)
            head_alive = 0
            for b in range(nb):
                alive_next[b] = b + 1
            for jj in range(n):
                b = mine[order[jj]]
                t1 = first_rd[order[jj]]
                if jj > 0 and t1 > t0 + 1:
                    # dx tiles stored in rounds t0 + 1 .. t1 - 1 (a CTA stores in its last round, end - 1)
                    stored = np.searchsorted(ends_sorted, t1, side="right") - \
                        np.searchsorted(ends_sorted, t0 + 1, side="right")
                    # dy's channel blocks (per place: its sub-problems' windows share most rows) and the filters'
                    # k-steps (per column and sub-problem) read in rounds t0 + 1 .. t1 - 1, by the CTAs running
                    # then. Taken in rising start order, the CTAs of one column and sub-problem (one length) read
                    # ranges that start and end no later than the one before: each such union is merged as they come
                    tag += 1
                    b_units = 0
                    ntouched = 0
                    nr = 0
                    prev = -1
                    c = head_alive
                    while c < nb and starts[c] < t1:
                        if ends[c] <= t0 + 2:                   # ended before the window: dropped
                            if prev < 0:
                                head_alive = alive_next[c]
                            else:
                                alive_next[prev] = alive_next[c]
                            c = alive_next[c]
                            continue
                        j = blk_place[c]
                        if j >= 0:
                            lo = max(t0 + 1, starts[c]) - starts[c]          # its k-steps in the window
                            hi = min(t1 - 1, ends[c] - 2) - starts[c]
                            if a_tag[j] != tag:
                                a_tag[j] = tag
                                head[j] = -1
                                touched[ntouched] = j
                                ntouched += 1
                            r_lo[nr], r_hi[nr], r_next[nr] = lo // blk_taps[c], hi // blk_taps[c], head[j]
                            head[j] = nr
                            nr += 1
                            b_units += _merge_down(b_tag, b_lo, blk_key[c], tag, lo, hi)
                        prev = c
                        c = alive_next[c]
                    a_units = _place_units(head, r_next, r_lo, r_hi, touched, ntouched, buf_lo, buf_hi)
                    lines = stored * store_lines + a_units * block_lines + b_units * step_b_lines
                    miss += l2_miss_prob(lines / cap_lines, ways, cliff) / nk
                t0 = max(t0, t1 + blk_taps[b] - 1)             # the block's last read by this CTA
    return miss, pairs
