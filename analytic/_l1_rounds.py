"""A's L1 hits counted on sampled SMs' rounds (fprop nhwc SIMT, pixels not whole lines; MODEL.md section 2).

A tile re-reads at k-step t most of what it read at t - 1 (the next filter tap's pixels), and whether the line
is still in the L1 depends on the lines of its set touched in between: every co-resident CTA's k-step (DESIGN
section 3: in a round each slot takes one step, A requests then B requests), this CTA's own requests after the
line's last touch and before its next. `_reuse.miss_rows` judges that window at its mean lines per set
(`_issue_order`'s corrections, the tiles' valid rows). Where pixels are whole lines that mean is every set's
count. Where they are not (stems of C 3-8 and 12-32-byte pixels; 64-, 96- or 192-byte pixels) the windows sit at
0.9-1.1 of the ways in many layers, and three effects of a few percent each decide every hit: a run of rows
along an output row ends in a line of its own (2 #280's 57-row runs: 7 % more lines than C e sw / 128 a row),
the runs and the filter chunks end at their own places in the sets (an SM whose tiles pile into one set misses
there while the others hit), and a line shared by the rows of two warps is touched late in one k-step and early
in the next (a shorter window). Seed 2 #280 (C 3 fp32, 11x11 stride 3, five CTAs an SM on a p100's 4 x 48
ways): simulated, the re-reads one tap back hit 47, 15, 37 and 99.5 % on SMs 0, 1, 30 and 55
(`validation.l1_replay --sm`), where the mean window, 0.96-1.03 of the ways at every tap, said 23 % everywhere;
and the model's row accounting (a row's first touch standing for its stride period's sectors) balances its
errors only where those re-reads hit.

Counted here as the L1 sees them: on (wave, SM) pairs spread over the grid (waves run in step, since every CTA
has the same k-steps: wave w's valid blocks w x SMs x slots + sm + j x SMs sit on SM sm), every k-step of the
wave, each slot's requests in issue order (each warp request's distinct sectors ascending,
`PitchLinearStripminedThreadMap`) through a sectored LRU (each set's resident lines in recency order; a line
whose distance, the distinct lines of its set touched since its last touch, reached the ways was evicted, and
comes back with the sector read alone), from a cold L1. The share of A's sector reads that hit
replaces the model's A hits (`model._predict_gemm`); B's share, counted on the same layers with the SM's
`WARM_WAVES` waves before replayed first (a filter slice outlives several waves), replaces B's (seventeenth
session); the L2 side stays the model's. It is a
sample of the schedule, not a simulation of the layer: at most `SM_SAMPLES` (wave, SM) pairs, whatever the
batch. The count equals a plain LRU over the naive request stream, wave by wave (tests/test_l1_rounds.py).

Grouped and depthwise layers with taps are counted too, whatever their pixels (`_grouped_model.predict_grouped`):
a CTA walks its column's groups one after the other and the next group's channels lie in the lines the last one
read, so those re-reads sit at the ways as well (3 #152, a depthwise 7x7 stem of C 7 fp16: the windows said 97.4 %
of A's reads hit, 95.0 % simulated and counted; L2 reads -46.9 %). The k-step follows traces/KERNELS.md's grouped
fprop: ((gi CB + cb) R + r) S + s, A's channels from the group's first (read past its end while below C), B's
rows of group gi only; the steps of groups past the layer's touch nothing and are skipped.
"""
from __future__ import annotations

import functools

import numpy as np

from traces.grouped import groups_per_cta
from traces.stream import tensor_bases
from simcore._jit import njit

from ._counts_grouped import block_class_index
from ._l1_sampled import dgrad_hit_shares
from ._threads import in_order

# Numba's on-disk cache checks only this file's own time stamp; tests/test_jit_deps.py lists every kernel module this
# one imports from (`_l1_sampled`, called from Python here): this digest of it changes this file with it
_JIT_DEPS_SHA256 = "0e11024dc51edc01"

#: (wave, SM) samples: at most SM_SAMPLES, at least MIN_SAMPLES, no more once TOUCH_BUDGET sector touches are
#: replayed. Measured against the simulated A hit share (66 #13, 1 #138, 62 #52, 64 #100, 4 #81, 6 #53, 2 #280,
#: 68 #278, 66 #180): within 0.036 with 32 samples, 0.075 with 16 (62 #52: 0.344 against 0.269), 0.12 with 8.
#: Over the 520 counted cases of the twelve sweep seeds that move (simulated), L2 reads' mean error 1.11 % at 32
#: samples / 4 M touches, 0.84 % at 64 / 8 M, 0.75 % at 128 / 16 M (seventeenth session; 35 #70, a depthwise 3x3:
#: 0.927 of A's reads hit at 32 / 4 M, 0.904 over every pair and simulated). 64 / 8 M cost 0.05-0.4 s a layer shape
#: and GPU on the development VM (2.7x slower than the sessions' before), mobilenet_v2 batch 8 2.6 s in all
SM_SAMPLES = 64
MIN_SAMPLES = 8
TOUCH_BUDGET = 8_000_000
#: the most sector touches one (wave, SM) sample may hold, bounded from its k-steps with work and its rows' chunks
#: (beyond: not counted, the model's windows). 2 M on that bound admits every layer the looser bound of the
#: sixteenth session (each thread's sectors + 2) admitted at 4 M
MAX_TOUCHES = 2_000_000
#: waves replayed on a sampled SM before the one whose B reads are counted: a CTA's filter slice stays in the L1
#: while later CTAs of its column come to the SM. Measured over the twelve sweep seeds' counted cases (each sampled
#: wave from a cold L1, A's share as before): one wave (sixteenth session) left the held-out movers' L2 mean at
#: 2.77 % (23 #26 +75 %); four: the 293 cases that move 1.10 -> 0.36 % mean, 24.8 -> 4.8 % max (68 #265, 4 #221
#: -24 -> +0.3 %), held out 160 cases 0.98 -> 0.29 %, 44.8 -> 3.5 % (25 #42). A's share counted from the same warm
#: replays came out worse (its budget buys fewer samples: mean 0.44 -> 0.51 %), so A keeps its cold samples
WARM_WAVES = 4


@njit(cache=True)
def _round_plan(dims, tm, tiles_m, tiles_n, swz, sms, cps, n_sm):
    """(tile_m, tile_n of each valid block in block order; the samples (wave, SM, the wave's first block on the SM)
    of `_round_hits`, in its order): at most ``n_sm`` (wave, SM) pairs spread evenly over the grid, in bit-reversed
    order so that those taken before the budget runs out spread over it. Self-contained (`_COMPILED`)."""
    def _valid_blocks(tiles_m, tiles_n, swz, need):
        """(tile_m, tile_n) of the first ``need`` valid blocks in block order (`_schedule.tile_of`)."""
        tmv = np.empty(need, np.int64)
        tnv = np.empty(need, np.int64)
        gx = tiles_m << swz
        b = 0
        v = 0
        while v < need:
            bx = b % gx
            by = b // gx
            a = bx >> swz
            cn = (by << swz) + (bx & ((1 << swz) - 1))
            if a < tiles_m and cn < tiles_n:
                tmv[v] = a
                tnv[v] = cn
                v += 1
            b += 1
        return tmv, tnv

    ctas = tiles_m * tiles_n
    tmv, tnv = _valid_blocks(tiles_m, tiles_n, swz, ctas)
    per_wave = sms * cps
    waves = (ctas + per_wave - 1) // per_wave
    used = min(sms, ctas)
    nsm = max(1, min(n_sm, waves * used))
    bits = 0
    while (1 << bits) < nsm:
        bits += 1
    cand = np.empty((nsm, 3), np.int64)
    nc = 0
    for order in range(1 << bits):
        # the lattice's points in bit-reversed order
        i = 0
        for b_ in range(bits):
            if order & (1 << b_):
                i |= 1 << (bits - 1 - b_)
        if i >= nsm:
            continue
        # the i-th sample: a wave and an SM spread over the grid (waves run in step: wave w's valid blocks
        # w per_wave + sm + j sms on SM sm)
        # (SMs evenly spaced, shifted by the golden ratio from one wave to the next: an SM index proportional to i
        # alone follows a diagonal of the grid, and 64 #100's image boundaries put the rare hitting SMs of its
        # missing waves on one: 0.56 of A's reads hit over 64 samples, 0.45 simulated)
        pos = (i * waves * used) // nsm             # evenly spaced over the (wave, SM) pairs, wave-major
        w0 = pos // used
        sm = (pos % used + int((w0 * 0.6180339887498949) % 1.0 * used)) % used
        base = w0 * per_wave + sm
        if base >= ctas:                # an SM the partial last wave leaves idle
            continue
        cand[nc, 0] = w0
        cand[nc, 1] = sm
        cand[nc, 2] = base
        nc += 1
    return tmv, tnv, cand[:nc]


@njit(cache=True, nogil=True)
def _sample_hits(dims, tmv, tnv, w0, sm, base, tm, tn, tk, vec, threads, eb, sms, cps, line, sec, sets, ways, w_base,
                 warm, blk_class):
    """One (wave, SM) sample of `_round_hits`: (A sector hits, A sector reads, B sector hits, B sector reads, the
    touches replayed, per class of channel blocks the sweeps' lines missed and read), every k-step of wave ``w0``
    on SM ``sm`` (its first block ``base``) in rounds from a cold L1 that first replays the SM's ``warm`` waves
    before. Self-contained and free of the GIL (`_round_hits` runs samples on threads)."""
    # helpers defined inside: the kernel calls no other kernel, so `_COMPILED` compiles it whole even while
    # `_tiers` runs the model's kernels interpreted (their module globals are then Python functions: a helper at
    # module level failed to type there)
    def _touches(dims, tile_m, tile_n, step, tm, tn, tk, vec, threads, eb, sec, w_base, seq, is_a, at):
        """Append one CTA's k-step ``step`` sector touches to ``seq`` (sector ids) and ``is_a`` from ``at``: its A
        requests, then its B requests, warp by warp, each request's distinct sectors ascending (DESIGN section 3).
        Returns the new end."""
        n, h, w, c, k = dims[0], dims[1], dims[2], dims[3], dims[4]
        p, q, r_, s_ = dims[5], dims[6], dims[7], dims[8]
        sh, sw, ph, pw, dh, dw = dims[9], dims[10], dims[11], dims[12], dims[13], dims[14]
        cg, kg = dims[15], dims[16]             # channels and filters a group (C and K where not grouped)
        m_all = n * p * q
        # k-step ((gi CB + cb) R + r) S + s: the CTA's gi-th group, channel block cb (traces/KERNELS.md, grouped)
        cbs = (cg + tk - 1) // tk
        blk = step // (r_ * s_)
        gi = blk // cbs
        c0 = (blk - gi * cbs) * tk              # the step's first channel inside the group
        a0 = ((tile_n * tn) // kg + gi) * cg    # the group's first channel of x
        rs = step % (r_ * s_)
        fr = rs // s_
        fs = rs % s_
        tc = tk // vec
        ts = threads // tc
        secs = np.empty(32 * (vec * eb // sec + 2), np.int64)
        # rows with work: none of A where the step's channels lie past C, of B only the gi-th group's filters
        # below K (a depthwise CTA walks tile_n groups, of which the layer may hold fewer)
        b_lo = gi * kg
        b_hi = min(b_lo + kg, k - tile_n * tn, tn)
        # lanes whose channel lies below the limit: A's below C (the activation iterator checks c < C only), B's
        # below the group's channels
        nl_a = min(tc, max(0, (c - a0 - c0 + vec - 1) // vec))
        nl_b = min(tc, max(0, (cg - c0 + vec - 1) // vec))
        for op in range(2):
            if (a0 + c0 >= c) if op == 0 else (c0 >= cg or b_lo >= b_hi):
                continue
            iters = (tm if op == 0 else tn) // ts
            for wp in range(threads // 32):
                for j in range(iters):
                    so_a = (32 * wp) // tc + j * ts          # the request's first and last rows
                    so_b = (32 * wp + 31) // tc + j * ts
                    if (tile_m * tm + so_a >= m_all) if op == 0 else (so_b < b_lo or so_a >= b_hi):
                        continue
                    # the request's sectors row by row: a row's lanes read one contiguous run of bytes (lane l at
                    # channel c0 + l vec, vec elements; lanes at or past the limit read nothing)
                    ns = 0
                    t = 32 * wp
                    while t < 32 * wp + 32:
                        lane0 = t % tc
                        so = t // tc + j * ts
                        t_end = min(32 * wp + 32, t - lane0 + tc)       # this row's last thread in the warp + 1
                        lmax = min(lane0 + t_end - t, nl_a if op == 0 else nl_b)
                        t = t_end
                        if lmax <= lane0:
                            continue
                        if op == 0:
                            m = tile_m * tm + so
                            if m >= m_all:
                                continue
                            img = m // (p * q)
                            pq = m % (p * q)
                            hh = (pq // q) * sh - ph + fr * dh
                            ww = (pq % q) * sw - pw + fs * dw
                            if hh < 0 or hh >= h or ww < 0 or ww >= w:
                                continue
                            row = (((img * h + hh) * w + ww) * c + a0) * eb
                        else:
                            kk = tile_n * tn + so
                            if kk >= k or so // kg != gi:      # the gi-th group's filters only
                                continue
                            row = w_base + (kk * r_ * s_ + rs) * cg * eb
                        first = row + (c0 + lane0 * vec) * eb
                        last = row + (c0 + (lmax - 1) * vec + vec) * eb - 1
                        for x in range(first // sec, last // sec + 1):
                            secs[ns] = x
                            ns += 1
                    # the request's distinct sectors ascending: an insertion sort in place (the lanes' addresses
                    # ascend within a row; np.unique's allocation a request: 3 #131 7.1 -> 4.3 s, 3 #34 4.0 -> 2.4 s)
                    for u in range(1, ns):
                        x = secs[u]
                        v = u - 1
                        while v >= 0 and secs[v] > x:
                            secs[v + 1] = secs[v]
                            v -= 1
                        secs[v + 1] = x
                    for u in range(ns):
                        if u == 0 or secs[u] != secs[u - 1]:
                            seq[at] = secs[u]
                            is_a[at] = op == 0
                            at += 1
        return at

    ctas = tmv.shape[0]
    ksteps = dims[17] * dims[7] * dims[8] * ((dims[15] + tk - 1) // tk)
    rs_n = dims[7] * dims[8]
    per_wave = sms * cps
    # a CTA's k-step touches at most its rows' chunks of tk elements (each at most ceil(tk eb / sec) + 1 sectors),
    # plus one where a warp request ends inside a row
    per_step = (tm + tn) * ((tk * eb + sec - 1) // sec + 1) + (threads // 32) * ((tm + tn) // (threads // (tk // vec)))
    spl = line // sec
    hits = 0
    reads = 0
    b_hits = 0
    b_reads = 0
    # per class of channel blocks (``blk_class``: the layer's blocks, group by group, each its class; empty: one
    # class), A's distinct lines a sweep of the taps reads (the CTA's sweeps past its first), and those of them
    # that miss the L1 at some read of that sweep
    ncls = 1
    for x in blk_class:
        ncls = max(ncls, x + 1)
    sweep_read = np.zeros(ncls, np.int64)
    sweep_missed = np.zeros(ncls, np.int64)
    cbs = (dims[15] + tk - 1) // tk
    slots = 0
    while slots < cps and base + slots * sms < ctas:
        slots += 1
    seq = np.empty(min((warm + 1) * ksteps * slots * per_step, 1 << 16), np.int64)   # sector ids, touch order
    is_a = np.empty(seq.shape[0], np.bool_)
    # each touch's channel-block sweep ((gi, cb): step // (R S)) and its block's class, as sweep x ncls + class
    sweep_of = np.empty(seq.shape[0], np.int64)
    at = 0
    start = 0
    for wv in range(max(0, w0 - warm), w0 + 1):
        bw = wv * per_wave + sm
        if wv == w0:
            start = at                  # the earlier waves warm the L1, this one is counted
        for st in range(ksteps):
            for j in range(cps):
                v = bw + j * sms
                if v >= ctas:
                    break
                if at + per_step > seq.shape[0]:            # grown as needed
                    grown = np.empty(2 * seq.shape[0] + per_step, np.int64)
                    grown[:at] = seq[:at]
                    seq = grown
                    grown_a = np.empty(grown.shape[0], np.bool_)
                    grown_a[:at] = is_a[:at]
                    is_a = grown_a
                    grown_s = np.empty(grown.shape[0], np.int64)
                    grown_s[:at] = sweep_of[:at]
                    sweep_of = grown_s
                was = at
                at = _touches(dims, tmv[v], tnv[v], st, tm, tn, tk, vec, threads, eb, sec, w_base, seq, is_a, at)
                # the layer's block: the CTA column's first group (traces/KERNELS.md) + gi, channel block cb
                blk = st // rs_n
                g_blk = ((tnv[v] * tn) // dims[16] + blk // cbs) * cbs + blk % cbs
                sweep_of[was:at] = blk * ncls + (blk_class[g_blk] if g_blk < blk_class.shape[0] else 0)
    lines = seq[:at] // spl
    # line ids: offsets into the span of A's lines and B's (a sample's tiles read compact ranges of x and w);
    # sorted distinct lines where the spans are wide. Measured: np.unique and a binary search a touch took over
    # half the count's time (11 layers, development VM: 3.6 -> 1.55 s)
    lo_a = lo_b = np.int64(1) << 62
    hi_a = hi_b = -1
    for pos in range(at):
        if is_a[pos]:
            lo_a = min(lo_a, lines[pos])
            hi_a = max(hi_a, lines[pos])
        else:
            lo_b = min(lo_b, lines[pos])
            hi_b = max(hi_b, lines[pos])
    span_a = max(0, hi_a - lo_a + 1)
    span_b = max(0, hi_b - lo_b + 1)
    direct = span_a + span_b <= 8 * at + 1024 and (hi_a < lo_b or hi_b < lo_a)
    if direct:
        nid = span_a + span_b
        ids = np.empty(0, np.int64)
    else:
        ids = np.unique(lines)
        nid = ids.shape[0]
    # a sectored LRU a set: its resident lines in a doubly linked list, most recent first (a line whose LRU
    # distance is below the ways is in the list). Measured on 11 layers (development VM), with the requests
    # row by row: 11.2 -> 3.6 s against the Fenwick tree of LRU distances it replaced; the same hits
    prv = np.empty(nid, np.int64)
    nxt = np.empty(nid, np.int64)
    resident = np.zeros(nid, np.bool_)
    valid = np.zeros(nid, np.int64)        # sector bits of a resident line
    head = np.full(sets, -1, np.int64)
    tail = np.full(sets, -1, np.int64)
    held = np.zeros(sets, np.int64)
    seen_blk = np.full(nid, -1, np.int64)       # the last sweep that read the line, and that missed it
    miss_blk = np.full(nid, -1, np.int64)
    li = -1
    for pos in range(at):
        ln = lines[pos]
        if pos == 0 or ln != lines[pos - 1]:
            if not direct:
                li = np.searchsorted(ids, ln)
            elif is_a[pos]:
                li = ln - lo_a
            else:
                li = span_a + ln - lo_b
        s_ = ln % sets
        bit = 1 << (seq[pos] % spl)
        if pos >= start and is_a[pos] and sweep_of[pos] >= ncls:      # past the CTA's first sweep
            bk, cl = sweep_of[pos] // ncls, sweep_of[pos] % ncls
            if seen_blk[li] != bk:
                seen_blk[li] = bk
                sweep_read[cl] += 1
            if (not resident[li] or (valid[li] & bit) == 0) and miss_blk[li] != bk:
                miss_blk[li] = bk
                sweep_missed[cl] += 1
        if resident[li]:
            if pos >= start:
                if is_a[pos]:
                    reads += 1
                    if (valid[li] & bit) != 0:
                        hits += 1
                else:
                    b_reads += 1
                    if (valid[li] & bit) != 0:
                        b_hits += 1
            if head[s_] != li:                  # to the front
                a_ = prv[li]
                b_ = nxt[li]
                nxt[a_] = b_
                if b_ >= 0:
                    prv[b_] = a_
                else:
                    tail[s_] = a_
                prv[li] = -1
                nxt[li] = head[s_]
                prv[head[s_]] = li
                head[s_] = li
        else:
            if pos >= start:
                if is_a[pos]:
                    reads += 1
                else:
                    b_reads += 1
            if held[s_] == ways:                # evict the set's least recent line
                ev = tail[s_]
                resident[ev] = False
                tail[s_] = prv[ev]
                if tail[s_] >= 0:
                    nxt[tail[s_]] = -1
                else:
                    head[s_] = -1
                held[s_] -= 1
            resident[li] = True
            valid[li] = 0
            prv[li] = -1
            nxt[li] = head[s_]
            if head[s_] >= 0:
                prv[head[s_]] = li
            else:
                tail[s_] = li
            head[s_] = li
            held[s_] += 1
        valid[li] |= bit
    return hits, reads, b_hits, b_reads, at, sweep_missed, sweep_read


def _round_hits(dims, tm, tn, tk, vec, threads, eb, tiles_m, tiles_n, swz, sms, cps, line, sec, sets, ways, w_base,
                n_sm, budget, warm, blk_class):
    """(A sector hits, A sector reads, B sector hits, B sector reads, per class of channel blocks the sweeps' lines
    missed and read) of a sectored LRU L1 (DESIGN section 4: a line allocated on a tag miss holds the sector read,
    the other sectors fill as read; any read renews the line) over sampled (wave, SM) pairs spread over the grid
    (`_round_plan`), every k-step of the wave in rounds (each slot one step: A requests, then B requests), from a
    cold L1 that first replays the SM's ``warm`` waves before (not counted; `_sample_hits`); ``n_sm`` samples at
    most, and no more once ``budget`` touches are replayed (at least `MIN_SAMPLES`), taken in the plan's order.
    The samples are independent, so they run on threads (`_threads.in_order`: a network's first prediction on a
    GPU is mostly these replays, a grouped layer's two of 0.3-0.45 s each on one thread; measured on the 2-core
    development VM, the model's kernels loaded: mobilenet_v2 batch 16 on a v100 8.28 -> 5.73 s, efficientnet_b0
    batch 8 on an a100 9.09 -> 6.81 s); those run past the budget's end are dropped: the counts are one thread's."""
    tmv, tnv, cand = _COMPILED["plan"](dims, tm, tiles_m, tiles_n, swz, sms, cps, n_sm)
    ncls = int(blk_class.max()) + 1 if blk_class.shape[0] else 1
    sweep_missed = np.zeros(ncls, np.int64)
    sweep_read = np.zeros(ncls, np.int64)
    totals = [0, 0, 0, 0]
    spent = done = 0

    def one(row):
        return _COMPILED["sample"](dims, tmv, tnv, int(row[0]), int(row[1]), int(row[2]), tm, tn, tk, vec, threads, eb,
                                   sms, cps, line, sec, sets, ways, w_base, warm, blk_class)

    for got in in_order(one, cand, lambda: done >= MIN_SAMPLES and spent >= budget):
        for k in range(4):
            totals[k] += got[k]
        spent += got[4]
        done += 1
        sweep_missed += got[5]
        sweep_read += got[6]
    return totals[0], totals[1], totals[2], totals[3], sweep_missed, sweep_read


_COMPILED = {"hits": _round_hits, "plan": _round_plan, "sample": _sample_hits}



def a_hit_share(geo, layer, kernel, gpu, cps, ways, sets):
    """The counted share of A's L1 sector reads that hit (`_round_hits`, each sample from a cold L1), or None where the
    layer is not counted: fprop nhwc SIMT, more than one filter tap (the re-reads one tap back decide A's hits),
    dense with pixels not whole lines, or grouped (``geo``: the layer's `_geometry.Geometry`, a grouped layer's
    dense part's); dgrad's from `_l1_sampled` (strided dgrad's sub-problems each take the layer's). Cached per layer
    shape, kernel and L1 geometry."""
    if geo.op == "dgrad":
        return _dgrad_share(layer, kernel, gpu, 0)
    args = _counted_args(geo, layer, kernel, gpu, cps, ways, sets)
    return None if args is None else _table(*args, 0)[0]


def b_hit_share(geo, layer, kernel, gpu, cps, ways, sets):
    """The counted share of B's L1 sector reads that hit on the layers `a_hit_share` counts (dense and grouped), each
    sample's wave after the SM's `WARM_WAVES` waves before (a filter slice outlives several waves in the L1), or None;
    dgrad's from `_l1_sampled`."""
    if geo.op == "dgrad":
        return _dgrad_share(layer, kernel, gpu, 1)
    args = _counted_args(geo, layer, kernel, gpu, cps, ways, sets)
    return None if args is None else _table(*args, WARM_WAVES)[1]


def sweep_miss_shares(geo, layer, kernel, gpu, cps, ways, sets):
    """Counted on the layers `a_hit_share` counts (grouped ones are those that ask), per class of channel blocks
    (`_counts_grouped.block_classes`): of A's distinct lines that a sweep of the filter taps (a channel block of a
    group, k-steps ``step // (R S)``) reads on the SM, past its CTAs' first sweep, the share that misses the L1 at
    some read of that sweep (-1 for a class no such sweep holds), or None (not counted). A line the last sweep's
    final taps left in the L1 and this one's first taps re-read may stay there for the whole sweep; only those
    that miss reach the L2, whose window between two sweeps' reads of a line holds that share of the busy tiles'
    lines (`_grouped_model._l2_rereads`)."""
    if geo.op == "dgrad":
        return None
    args = _counted_args(geo, layer, kernel, gpu, cps, ways, sets)
    return None if args is None else _table(*args, 0)[2]


def _dgrad_share(layer, kernel, gpu, operand):
    """A's (``operand`` 0) or B's (1) counted share of a dgrad layer (`_l1_sampled`), or None."""
    shares = dgrad_hit_shares(layer, kernel, gpu)
    return None if shares is None else shares[operand]


def _counted_args(geo, layer, kernel, gpu, cps, ways, sets):
    """`_table`'s arguments for a counted layer, or None (`a_hit_share` says where)."""
    line = gpu.line_bytes
    lay = layer
    if (geo.op != "fprop" or geo.win.reverse or kernel.layout != "nhwc" or kernel.math != "simt" or lay.r * lay.s == 1
            or (lay.groups == 1 and (lay.c * kernel.elem_bytes) % line == 0)):
        return None
    cg, kg, gpc = group_dims(lay, kernel)
    # the touches of a sample: the k-steps with work (a CTA's groups past the layer's have none) times its slots'
    # rows' chunks (`_round_hits`)
    ksteps = min(gpc, lay.groups) * lay.r * lay.s * -(-cg // kernel.tile_k)
    chunk = -(-kernel.tile_k * kernel.elem_bytes // gpu.sector_bytes) + 1
    if ksteps * cps * (kernel.tile_m + min(kernel.tile_n, kg)) * chunk > MAX_TOUCHES:
        return None
    dims = (lay.n, lay.h, lay.w, lay.c, lay.k, lay.p, lay.q, lay.r, lay.s, *lay.stride, *lay.pad, *lay.dilation,
            cg, kg, gpc)
    return (dims, kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.vector, kernel.threads, kernel.elem_bytes,
            kernel.swizzle_log, gpu.sms, int(cps), line, gpu.sector_bytes, int(sets), int(ways),
            tensor_bases(layer, kernel)[1])


def group_dims(layer, kernel):
    """(channels a group, filters a group, groups a CTA walks) of ``layer`` under ``kernel`` (C, K and 1 where not
    grouped; `traces.grouped`)."""
    if layer.groups == 1:
        return layer.c, layer.k, 1
    return layer.c // layer.groups, layer.k_per_group, groups_per_cta(layer, kernel)


@functools.lru_cache(maxsize=2048)
def _table(dims, tm, tn, tk, vec, threads, eb, swz, sms, cps, line, sec, sets, ways, w_base, warm):
    """(A's, B's counted hit shares, the share of A's distinct lines a sweep of the taps reads that miss the L1 at
    some read of it, `sweep_miss_share`) with ``warm`` waves replayed before each sampled one."""
    tiles_m = -(-dims[0] * dims[5] * dims[6] // tm)
    tiles_n = -(-dims[4] // tn)
    # the layer's channel blocks in `_grouped_model._window_lines`' classes (grouped layers; dense ones: one)
    blk_class = block_class_index(dims[3], dims[15], tk, eb, line)[1] if dims[15] < dims[3] else _ONE_CLASS
    a_hits, a_reads, b_hits, b_reads, swept_missed, swept = _COMPILED["hits"](
        np.array(dims, np.int64), tm, tn, tk, vec, threads, eb, tiles_m, tiles_n, swz, sms, cps, line, sec, sets, ways,
        w_base, SM_SAMPLES, TOUCH_BUDGET, warm, blk_class)
    shares = np.where(swept > 0, swept_missed / np.maximum(swept, 1), -1.0)
    shares.setflags(write=False)
    return a_hits / a_reads if a_reads else None, b_hits / b_reads if b_reads else None, shares


_ONE_CLASS = np.zeros(0, np.int64)
