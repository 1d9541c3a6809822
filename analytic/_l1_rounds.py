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
`PitchLinearStripminedThreadMap`) through a sectored LRU (a line's LRU distance in its set: the distinct lines
of the set touched since its last touch, a Fenwick tree over the touches a set; a line past the ways was
evicted, and comes back with the sector read alone), from a cold L1. The share of A's sector reads that hit
replaces the model's A hits (`model._predict_gemm`); everything else (B, the L2 side) stays the model's. It is a
sample of the schedule, not a simulation of the layer: at most `SM_SAMPLES` (wave, SM) pairs, whatever the
batch. The count equals a plain LRU over the naive request stream, wave by wave (tests/test_l1_rounds.py).
"""
from __future__ import annotations

import functools

import numpy as np

from traces.stream import tensor_bases
from simcore._jit import njit

#: (wave, SM) samples: at most SM_SAMPLES, at least MIN_SAMPLES, no more once TOUCH_BUDGET sector touches are
#: replayed. Measured against the simulated A hit share (66 #13, 1 #138, 62 #52, 64 #100, 4 #81, 6 #53, 2 #280,
#: 68 #278, 66 #180): within 0.036 with 32 samples, 0.075 with 16 (62 #52: 0.344 against 0.269), 0.12 with 8;
#: 32 samples cost 0.1-1 s a layer shape and GPU on the development VM (2.7x slower than the sessions' before)
SM_SAMPLES = 32
MIN_SAMPLES = 8
TOUCH_BUDGET = 4_000_000
#: the most sector touches one (wave, SM) sample may hold, bounded from the tiles (beyond: not counted, the model's
#: windows)
MAX_TOUCHES = 4_000_000


@njit(cache=True)
def _a_hits(dims, tm, tn, tk, vec, threads, eb, tiles_m, tiles_n, swz, sms, cps, line, sec, sets, ways, w_base,
            n_sm, budget):
    """(A sector hits, A sector reads) of a sectored LRU L1 (DESIGN section 4: a line allocated on a tag miss holds
    the sector read, the other sectors fill as read; any read renews the line) over sampled (wave, SM) pairs spread
    over the grid, every k-step of the wave in rounds (each slot one step: A requests, then B requests), from a
    cold L1; ``n_sm`` samples at most, and no more once ``budget`` touches are replayed (at least `MIN_SAMPLES`).
    Self-contained (called through `_COMPILED`)."""
    # helpers defined inside: the kernel calls no other kernel, so `_COMPILED` compiles it whole even while
    # `_tiers` runs the model's kernels interpreted (their module globals are then Python functions: a helper at
    # module level failed to type there)
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

    def _touches(dims, tile_m, tile_n, step, tm, tn, tk, vec, threads, eb, sec, w_base, seq, is_a, at):
        """Append one CTA's k-step ``step`` sector touches to ``seq`` (sector ids) and ``is_a`` from ``at``: its A
        requests, then its B requests, warp by warp, each request's distinct sectors ascending (DESIGN section 3).
        Returns the new end."""
        n, h, w, c, k = dims[0], dims[1], dims[2], dims[3], dims[4]
        p, q, r_, s_ = dims[5], dims[6], dims[7], dims[8]
        sh, sw, ph, pw, dh, dw = dims[9], dims[10], dims[11], dims[12], dims[13], dims[14]
        m_all = n * p * q
        c0 = (step // (r_ * s_)) * tk
        rs = step % (r_ * s_)
        fr = rs // s_
        fs = rs % s_
        tc = tk // vec
        ts = threads // tc
        secs = np.empty(32 * (vec * eb // sec + 2), np.int64)
        for op in range(2):
            iters = (tm if op == 0 else tn) // ts
            for wp in range(threads // 32):
                for j in range(iters):
                    ns = 0
                    for t in range(32 * wp, 32 * wp + 32):
                        so = t // tc + j * ts
                        ch = c0 + (t % tc) * vec
                        if ch >= c:
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
                            addr = (((img * h + hh) * w + ww) * c + ch) * eb
                        else:
                            kk = tile_n * tn + so
                            if kk >= k:
                                continue
                            addr = w_base + ((kk * r_ * s_ + rs) * c + ch) * eb
                        for x in range(addr // sec, (addr + vec * eb - 1) // sec + 1):
                            secs[ns] = x
                            ns += 1
                    if ns == 0:
                        continue
                    uniq = np.unique(secs[:ns])
                    for x in uniq:
                        seq[at] = x
                        is_a[at] = op == 0
                        at += 1
        return at

    ctas = tiles_m * tiles_n
    tmv, tnv = _valid_blocks(tiles_m, tiles_n, swz, ctas)
    ksteps = dims[7] * dims[8] * ((dims[3] + tk - 1) // tk)
    per_wave = sms * cps
    waves = (ctas + per_wave - 1) // per_wave
    used = min(sms, ctas)
    nsm = max(1, min(n_sm, waves * used))
    bits = 0
    while (1 << bits) < nsm:
        bits += 1
    spent = 0
    done = 0
    per_step = (tm + tn) * (tk // vec) * (vec * eb // sec + 2)
    spl = line // sec
    hits = 0
    reads = 0
    for order in range(1 << bits):
        # the lattice's points in bit-reversed order, so that the samples taken before the budget runs out
        # spread over the grid
        i = 0
        for b_ in range(bits):
            if order & (1 << b_):
                i |= 1 << (bits - 1 - b_)
        if i >= nsm:
            continue
        if done >= MIN_SAMPLES and spent >= budget:
            break
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
        done += 1
        slots = 0
        while slots < cps and base + slots * sms < ctas:
            slots += 1
        total = ksteps * slots * per_step
        seq = np.empty(total, np.int64)        # sector ids in touch order
        is_a = np.empty(total, np.bool_)
        at = 0
        for st in range(ksteps):
            for j in range(slots):
                v = base + j * sms
                at = _touches(dims, tmv[v], tnv[v], st, tm, tn, tk, vec, threads, eb, sec, w_base, seq, is_a, at)
        spent += at
        lines = seq[:at] // spl
        ids = np.unique(lines)
        last_pos = np.full(ids.shape[0], -1, np.int64)
        valid = np.zeros(ids.shape[0], np.int64)        # sector bits of a resident line
        tree = np.zeros((sets, at + 1), np.int64)
        prev_pos_line = -1
        for pos in range(at):
            ln = lines[pos]
            li = np.searchsorted(ids, ln)
            s_ = ln % sets
            bit = 1 << (seq[pos] % spl)
            lp = last_pos[li]
            if lp >= 0 and lp == prev_pos_line:
                # the request's next sector of the line touched just before: resident, its place unchanged
                if is_a[pos]:
                    reads += 1
                    if (valid[li] & bit) != 0:
                        hits += 1
                valid[li] |= bit
                continue
            prev_pos_line = pos
            resident = False
            if lp >= 0:
                dist = 0
                x = pos
                while x > 0:
                    dist += tree[s_, x]
                    x -= x & -x
                x = lp + 1
                while x > 0:
                    dist -= tree[s_, x]
                    x -= x & -x
                resident = dist < ways
                x = lp + 1
                while x <= at:
                    tree[s_, x] -= 1
                    x += x & -x
            if not resident:
                valid[li] = 0
            if is_a[pos]:
                reads += 1
                if resident and (valid[li] & bit) != 0:
                    hits += 1
            valid[li] |= bit
            x = pos + 1
            while x <= at:
                tree[s_, x] += 1
                x += x & -x
            last_pos[li] = pos
    return hits, reads


_COMPILED = {"hits": _a_hits}


def a_hit_share(geo, layer, kernel, gpu, cps, ways, sets):
    """The counted share of A's L1 sector reads that hit (`_a_hits`), or None where the layer is not counted: fprop
    nhwc SIMT, dense, more than one filter tap (the re-reads one tap back decide A's hits), pixels not whole lines
    (``geo``: its `_geometry.Geometry`). Cached per layer shape, kernel and L1 geometry."""
    line = gpu.line_bytes
    win = geo.win
    if (geo.op != "fprop" or win.reverse or kernel.layout != "nhwc" or kernel.math != "simt" or layer.groups != 1
            or win.r * win.s == 1 or (win.c * kernel.elem_bytes) % line == 0):
        return None
    ksteps = win.r * win.s * -(-win.c // kernel.tile_k)
    per_step = (kernel.tile_m + kernel.tile_n) * (kernel.tile_k // kernel.vector) * (
        kernel.vector * kernel.elem_bytes // gpu.sector_bytes + 2)
    if ksteps * cps * per_step > MAX_TOUCHES:
        return None
    dims = (win.n, win.h, win.w, win.c, geo.gemm_n, win.p, win.q, win.r, win.s, win.sh, win.sw, win.ph, win.pw,
            win.dh, win.dw)
    return _table(dims, kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.vector, kernel.threads,
                  kernel.elem_bytes, kernel.swizzle_log, gpu.sms, int(cps), line, gpu.sector_bytes, int(sets),
                  int(ways), tensor_bases(layer, kernel)[1])


@functools.lru_cache(maxsize=2048)
def _table(dims, tm, tn, tk, vec, threads, eb, swz, sms, cps, line, sec, sets, ways, w_base):
    tiles_m = -(-dims[0] * dims[5] * dims[6] // tm)
    tiles_n = -(-dims[4] // tn)
    hits, reads = _COMPILED["hits"](np.array(dims, np.int64), tm, tn, tk, vec, threads, eb, tiles_m, tiles_n, swz,
                                    sms, cps, line, sec, sets, ways, w_base, SM_SAMPLES, TOUCH_BUDGET)
    return hits / reads if reads else None
