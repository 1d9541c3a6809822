"""dgrad's L1 hits counted on the kernel's own request stream at sampled points of its schedule (MODEL.md
section 2).

dgrad's L1 hits are re-reads of dy one tap back and across channel blocks, and of a co-resident CTA's rows and
filter lines; the model's windows (`_reuse`) judge them at each window's mean lines per set, which misses where
strided dgrad's sub-problems of different k-loop lengths run side by side on an SM (their CTAs drift out of
step, seed 65 #60: 0.76 of dy's reads hit, the windows said 0.62) or where a filter line holds several taps'
channels of a few-channel stem (seed 6 #162, C 16 fp16: 0.69 of w's reads hit, the windows said 0.44).

Counted here as the L1 sees them, from the generator's own building blocks (`traces._backward`'s CTA start and
k-step, `traces.stream`'s plan) and the simulator's own sectored LRU (`simcore.cache._access`): the grid's
blocks are dispatched as the kernel does (`_dispatch.dispatch`: the refill passes, each CTA holding its slot for
its k-steps and its stores' round), then on sampled (SM, round) points spread over the dispatched blocks the
SM's resident CTAs step round by round, slot by slot (DESIGN section 3), their load requests' sectors through
an L1 of the kernel's geometry. A layer of at most `WHOLE_TOUCHES` load sectors is replayed whole, every SM from
the first round (the count is then the simulator's); a larger one on sampled points, each replayed from a cold L1
long enough for the L1 to fill `WARM_FILL` times with misses before the `COUNT_LIVES` CTA lifetimes it counts (or
from the kernel's first round, where the real L1 is cold too). It is a sample of the schedule, not a simulation of
the layer: `SM_SAMPLES` points at most, no more once `TOUCH_BUDGET` sector lookups are replayed, the dispatch cut
at `MAX_BLOCKS` blocks (the statistics of the first blocks stand for the rest), so its cost does not grow with the
batch past that.
"""
from __future__ import annotations

import threading

import numpy as np

from simcore.cache import _access, _geometry, _new_bank, _set_of
from simcore._jit import njit
from simcore.metrics import KIND_CP_ASYNC_CG
from traces._backward import _start_dgrad, _step_dgrad
from traces._layout import (_F_KSTEPS, _F_SKIP, _KA, _KB, _NBLOCKS, _SLOTS, _SWZ, _TILES_M, _TILES_N, _TMPF,
                            _TN)
from traces.stream import _Generator, plan_stream

from ._counts import l1_counts
from ._dispatch import dispatch
from . import _threads

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel modules `_replay` compiles in
# (the generator's dgrad steps, the simulator's cache, their constants; tests/test_jit_deps.py) changes this file with them
_JIT_DEPS_SHA256 = "c5734d74aa884579"

#: sampled (SM, round) points: at most SM_SAMPLES, at least MIN_SAMPLES, no more once TOUCH_BUDGET sector lookups
#: are replayed; the dispatch stops after MAX_BLOCKS blocks
SM_SAMPLES = 1024
MIN_SAMPLES = 8
TOUCH_BUDGET = 8_000_000
#: a layer of at most this many L1 load sectors is replayed whole (every SM, every round: exact)
WHOLE_TOUCHES = 16_000_000
MAX_BLOCKS = 1 << 20
#: a sample counts COUNT_LIVES CTA lifetimes (mean rounds a block holds its slot) after a warm-up of WARM_FILL
#: L1-fills of misses (the rounds whose reads fill the L1 that often, over the pilot's miss share). Measured on the 159 dgrad cases of seeds 1, 2, 3, 5, 6, 64 and 65 over 4 M load sectors, all
#: sampled, the L1 misses' error against the simulated L2 reads, mean / p95 / max, at 4 M lookups: one lifetime
#: counted after one lifetime and two fills of reads (not misses) 2.28 / 10.7 / 23.4 % on 58 of them (65 #60: its dy
#: lines come back eight waves on); a quarter lifetime after one fill of misses 1.31 / 6.93 / 22.4 %, then with
#: windows opening before an SM's first round too 0.68 / 2.96 / 14.3 %; half a lifetime after two fills 0.62 / 2.11
#: / 12.9 % (38 s for the 159, about 0.25 s a case). Shipped at 8 M lookups, and layers of up to 16 M load sectors
#: replayed whole (held-out 34 #67, 8.6 M: 0.859 of dy's reads hit sampled at 4 M, 0.814 at 16 M, 0.818 whole and
#: simulated; a whole replay costs about 50 ns a lookup, 0.46 s there)
COUNT_LIVES = 0.5
WARM_FILL = 2.0
#: the least miss share the warm-up's fills of misses assume (a layer whose reads all hit would warm forever)
MIN_MISS = 0.05


@njit(cache=True)
def _blocks(prm, fpos, max_blocks):
    """The grid's blocks that take a slot, in dispatch order (`traces._generate._refill`: blocks outside the
    grid and strided dgrad's blocks of a skipped starting position take none): (tile_m, tile_n, starting position,
    rounds held: k-steps and the stores' round), at most ``max_blocks``."""
    swz = prm[_SWZ]
    tiles_m, tiles_n, tmpf = prm[_TILES_M], prm[_TILES_N], prm[_TMPF]
    nblocks = prm[_NBLOCKS]
    grid_x = tiles_m << swz
    cap = min(nblocks, max_blocks)
    out = np.empty((cap, 4), np.int64)
    n = 0
    for b in range(nblocks):
        if n == cap:
            break
        bx = b % grid_x
        tm = bx >> swz
        tn = ((b // grid_x) << swz) + (bx & ((1 << swz) - 1))
        if tm >= tiles_m or tn >= tiles_n:
            continue
        f = tm // tmpf
        if fpos[f, _F_SKIP]:
            continue
        out[n, 0], out[n, 1], out[n, 2], out[n, 3] = tm, tn, f, fpos[f, _F_KSTEPS] + 1
        n += 1
    return out[:n]


@njit(cache=True, nogil=True)
def _replay(prm, maps, rows, scratch, first, count, secs, blk, place, sm_start, sm_blocks, samples, bank, geo,
            line_shift, sector_shift, sector_mask, warm_rounds, count_rounds, budget, min_samples):
    """(A sector hits, A sector reads, B sector hits, B sector reads) over the ``samples`` (SM, first counted round):
    each SM's resident CTAs (``place``: SM, slot, start round of each block of ``blk``;
    ``sm_blocks[sm_start[sm]:sm_start[sm + 1]]`` the SM's blocks in start order) step round by round,
    slot by slot, their k-steps' load requests through one L1 (``bank``, emptied for each sample) from
    ``warm_rounds`` before the counted ``count_rounds`` (or from round 0); with the touches replayed. Free of
    the GIL (`_count` replays samples on threads, `_threads.in_order`)."""
    tn_size = prm[_TN]
    slots = prm[_SLOTS]
    bypass_a = prm[_KA] == KIND_CP_ASYNC_CG
    bypass_b = prm[_KB] == KIND_CP_ASYNC_CG
    table, rec, sline, lru, last = bank[0][0], bank[1][0], bank[2][0], bank[3][0], bank[4][0]
    sets, ways, kind, sbits, hshift, hmask = geo
    cur = np.full(slots, -1, np.int64)
    a_hits = a_reads = b_hits = b_reads = 0
    spent = 0
    done = 0
    for i in range(samples.shape[0]):
        if done >= min_samples and spent >= budget:
            break
        sm = samples[i, 0]
        t_count = samples[i, 1]
        t0 = max(0, t_count - warm_rounds)
        t1 = t_count + count_rounds
        # an empty cache (`simcore.cache._new_bank`'s initial rows)
        table[:] = -1
        rec[:] = -1
        rec[3::4] = 0
        lru[:] = -1
        lru[2::3] = 0
        sline[:] = -1
        last[:] = -1
        cur[:] = -1
        j = sm_start[sm]
        end = sm_start[sm + 1]
        done += 1
        for t in range(t0, t1):
            # the blocks that start by round t and hold their slot at t (a block started before t0 joins
            # where it stands)
            while j < end and place[sm_blocks[j], 2] <= t:
                b = sm_blocks[j]
                if place[b, 2] + blk[b, 3] > t:
                    cur[place[b, 1]] = b
                    _start_dgrad(prm, maps, rows, sm * slots + place[b, 1], blk[b, 0], blk[b, 2])
                j += 1
            busy = False
            for s in range(slots):
                b = cur[s]
                if b < 0:
                    continue
                ks = t - place[b, 2]
                if ks >= blk[b, 3] - 1:                   # the stores' round (no L1 lookup), then the slot frees
                    cur[s] = -1
                    continue
                busy = True
                q1, nreq, nsec = _step_dgrad(prm, maps, rows, scratch, blk[b, 2], sm * slots + s, ks,
                                             blk[b, 1] * tn_size, first, count, secs, 0, 0)
                counted = t >= t_count
                for q in range(nreq):
                    is_a = q < q1
                    if bypass_a if is_a else bypass_b:
                        continue
                    for u in range(first[q], first[q] + count[q]):
                        a = secs[u]
                        line = a >> line_shift
                        r = _access(table, rec, sline, lru, last, line, _set_of(line, sets, kind, sbits),
                                    (a >> sector_shift) & sector_mask, False, ways, hshift, hmask)
                        spent += 1
                        if counted:
                            hit = (r & 3) == 0
                            if is_a:
                                a_reads += 1
                                a_hits += hit
                            else:
                                b_reads += 1
                                b_hits += hit
            if not busy and j >= end:
                break
    return a_hits, a_reads, b_hits, b_reads, spent


_COMPILED = {"blocks": _blocks, "dispatch": dispatch, "replay": _replay}
_CACHE: dict = {}
_CACHE_SIZE = 2048
_CACHE_LOCK = threading.Lock()      # inserts and evictions (threads predicting at once); reads need none
_MISSING = object()


def replayed(layer, kernel, gpu) -> bool:
    """Whether `dgrad_hit_shares` counts ``layer``'s L1 hits: dgrad, nhwc SIMT, more than one filter tap."""
    return (kernel.op == "dgrad" and kernel.layout == "nhwc" and kernel.math == "simt" and layer.groups == 1
            and layer.r * layer.s > 1)


def dgrad_hit_shares(layer, kernel, gpu):
    """(A's, B's) shares of L1 load sector reads that hit, counted on sampled points of the schedule (module
    docstring), or None where not counted (`replayed`); either share None where no read was counted. Cached per
    layer shape, kernel and GPU."""
    if not replayed(layer, kernel, gpu):
        return None
    key = (layer.shape, kernel, gpu)
    out = _CACHE.get(key, _MISSING)          # one look-up: another thread may evict between two
    if out is not _MISSING:
        return out
    out = _count(layer, kernel, gpu)
    with _CACHE_LOCK:
        while len(_CACHE) >= _CACHE_SIZE:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = out
    return out


def _count(layer, kernel, gpu):
    plan = plan_stream(layer, gpu, kernel)
    prm = plan.params
    gen = _Generator(plan, plan.step_sectors)
    bufs = gen.new_buffers()
    blk = _COMPILED["blocks"](prm, plan.fpos, MAX_BLOCKS)
    if blk.shape[0] == 0:
        return None
    sms, slots = plan.sms, plan.slots
    place = _COMPILED["dispatch"](np.ascontiguousarray(blk[:, 3]), sms, slots, blk.shape[0])
    order = np.argsort(place[:, 0], kind="stable")              # each SM's blocks in start order
    sm_start = np.searchsorted(place[order, 0], np.arange(sms + 1)).astype(np.int64)
    life = float(blk[:, 3].mean())
    # an SM's sector reads a round: the layer's (exact, `_counts.l1_counts`) over its CTAs' k-steps, times the slots
    ex = l1_counts(layer, kernel)
    fpos = plan.fpos
    tms = np.arange(int(prm[_TILES_M]))
    steps = np.where(fpos[tms // int(prm[_TMPF]), _F_SKIP] != 0, 0, fpos[tms // int(prm[_TMPF]), _F_KSTEPS])
    per_round = slots * (ex["sec_A"] + ex["sec_B"]) / max(1.0, float(steps.sum()) * int(prm[_TILES_N]))
    l1 = kernel.l1_config(gpu)
    fill_rounds = l1.size_bytes / l1.sector_bytes / max(per_round, 1e-9)      # rounds whose reads fill the L1 once
    warm = WARM_FILL * fill_rounds
    # the samples: (SM, round) points spread evenly over the SMs' busy rounds (an SM picked in proportion to the rounds
    # from its first block's start to its last block's end, the round within them by golden-ratio steps), in
    # bit-reversed order: those taken before the budget runs out spread over the grid; each counts every slot of its
    # SM. Picked per block instead, strided dgrad's one-tap sub-problems were counted as often as its four-tap ones
    # (65 #253: 0.193 of dy's reads hit, 0.229 simulated); windows opening where blocks start counted their first,
    # coldest k-steps too often (1 #0: 0.141, 0.157); picked per block's rounds, an SM of two busy slots had twice a
    # share of the picks and twice the reads a pick (64 #262, 44 of 132 SMs holding two CTAs that thrash the L1:
    # 0.31 of dy's reads hit, 0.47 simulated)
    first = np.full(sms, np.iinfo(np.int64).max, np.int64)
    last = np.zeros(sms, np.int64)
    np.minimum.at(first, place[:, 0], place[:, 2])
    np.maximum.at(last, place[:, 0], place[:, 2] + blk[:, 3])
    busy = np.where(last > 0, last - np.minimum(first, last), 0)
    ends = np.cumsum(busy)
    span = max(1, int(round(COUNT_LIVES * life)))          # a sample's counted rounds
    n = min(SM_SAMPLES, int(ends[-1]))
    bits = max(0, (n - 1).bit_length())
    picks = []
    for order_i in range(1 << bits):
        i = int(format(order_i, f"0{bits}b")[::-1], 2) if bits else 0
        if i < n:
            sm = int(np.searchsorted(ends, (2 * i + 1) * int(ends[-1]) // (2 * n), side="right"))
            # a window may open before the SM's first round (counting from there): every busy round is then
            # covered as often (windows opening in the busy rounds alone cover the first and last ones less: 1 #43,
            # one wave on 660 slots, 0.925 of dy's reads hit counted past its cold first rounds, 0.891 simulated)
            picks.append((sm, first[sm] - span + 1 + int((i * 0.6180339887498949) % 1.0 * (busy[sm] + span - 1))))
    samples = np.array(picks, np.int64)
    budget, count = TOUCH_BUDGET, span
    if ex["sec_A"] + ex["sec_B"] <= WHOLE_TOUCHES:
        # every SM from the first round to the last: the count is the simulated L1's (tests/test_l1_sampled.py)
        samples = np.stack([np.arange(sms), np.zeros(sms, np.int64)], axis=1)
        warm, count, budget = 0.0, float(place[:, 2].max() + blk[:, 3].max()), 1 << 62
    bank = _new_bank(l1, 1)
    line_shift = l1.line_bytes.bit_length() - 1
    sector_shift = l1.sector_bytes.bit_length() - 1

    geo = _geometry(l1)
    sector_mask = l1.line_bytes // l1.sector_bytes - 1

    def run(samples, warm, budget, least):
        warm_rounds, count_rounds = int(round(warm)), max(1, int(round(count)))
        if _threads.sample_threads() < 2 or samples.shape[0] < 2:
            return _COMPILED["replay"](
                prm, gen.maps, gen.rows, gen.scratch, bufs[6], bufs[7], bufs[8], blk, place, sm_start, order, samples,
                bank, geo, line_shift, sector_shift, sector_mask, warm_rounds, count_rounds,
                budget, least)[:4]
        # one sample a call on threads, each thread its own stream state and L1 (each sample starts from an empty
        # cache and its slots' CTAs restart their rows), taken in order while the rule holds: one thread's counts.
        # Measured (2-core development VM, kernels loaded): resnet50 dgrad batch 16 on a v100 s
        local = threading.local()

        def one(i):
            own = getattr(local, "own", None)
            if own is None:
                mine = _Generator(plan, plan.step_sectors)
                own = local.own = (mine, mine.new_buffers(), _new_bank(l1, 1))
            mine, buf, own_bank = own
            return _COMPILED["replay"](
                prm, mine.maps, mine.rows, mine.scratch, buf[6], buf[7], buf[8], blk, place, sm_start, order,
                samples[i:i + 1], own_bank, geo, line_shift, sector_shift, sector_mask,
                warm_rounds, count_rounds, 1 << 62, 1)

        totals = [0, 0, 0, 0]
        spent = done = 0
        for got in _threads.in_order(one, range(samples.shape[0]), lambda: done >= least and spent >= budget):
            for k in range(4):
                totals[k] += got[k]
            spent += got[4]
            done += 1
        return tuple(totals)

    if budget < 1 << 62:
        # the L1 holds what the last WARM_FILL fills of *misses* brought, which take 1 / (1 - h) fills of reads:
        # a pilot of MIN_SAMPLES samples gives the hit share h (65 #60, 0.76 of dy's reads hitting in an h200's
        # 192 KB L1, re-read by a later sub-problem's CTA eight waves on: 0.70 counted after two fills of reads)
        pilot = run(samples[:MIN_SAMPLES], warm, 1 << 62, MIN_SAMPLES)
        reads = pilot[1] + pilot[3]
        if reads:
            miss = max(1.0 - (pilot[0] + pilot[2]) / reads, MIN_MISS)
            warm = max(warm, WARM_FILL * fill_rounds / miss)
    a_hits, a_reads, b_hits, b_reads = run(samples, warm, budget, MIN_SAMPLES)
    return (a_hits / a_reads if a_reads else None, b_hits / b_reads if b_reads else None)
