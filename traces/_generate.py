"""The compiled request-stream generator behind `traces.stream` (DESIGN sections 3, 3a): `_refill`
dispatches blocks to SM slots and `_generate` fills fixed-size buffers with warp-level requests and
their sectors, resumably, from the scheduler state it keeps in small arrays (see `traces.stream`'s
module docstring for what the stream is, and `_Generator` there for how the kernel is driven). The walk
(rounds, SMs, slots, one step per CTA) is the same for every op; the building blocks are in
`traces._steps` (fprop, stores), `traces._backward` (dgrad, wgrad) and `traces._emit`.

Measured (vgg16 batch 1 on v100, best of 3, 2-core development VM): about 9 ns per sector before the
row-aligned nhwc fast path, the inline hot k-step (no per-call reference counting), per-step shared
fields and the single buffer allocation; 2.2-2.7 ns after, 1.9-2.6 in ``lean`` mode (what
``simulate_layer`` uses), with output identical request by request. The individual effects are noted
where they apply.

Every kernel of the generator (here, `traces._steps`, `traces._backward`, `traces._emit`,
`traces._group_steps`) compiles with ``_nrt=False``: none allocates, so Numba's reference counting of
the arrays each call receives (atomic increments and decrements, about 20 arrays a wgrad k-step) is
dropped; the wgrad k-step and the emitters it and dgrad's filter loads call are inlined. Generator
alone (``lean``), vgg16 batch 4 on v100, ns per sector, best of 3, three runs alternating with the
code before (2-core development VM, noisy): fprop 1.38-1.77 -> 1.32-1.49, dgrad 1.95-2.31 ->
1.74-1.90, wgrad 2.64-3.17 -> 1.95-2.22, output unchanged (the stream tests). The simulated training
step of vgg16 at batch 32 on v100 (2 threads, per layer fprop, dgrad, wgrad in turn, as
``benchmarks/bench_traces.py --train 32`` runs it), on a quiet 16-core machine, two runs each,
alternating: (fprop + dgrad + wgrad) / fprop 2.99 and 3.09 before, 2.86 and 2.85 after; fprop 23.8
and 22.9 s before, 23.0 and 20.4 s after."""
from __future__ import annotations

from simcore._jit import njit

from ._backward import _dgrad_filters, _dgrad_position, _start_dgrad, _start_wgrad, _step_dgrad, _step_wgrad
from ._layout import (
    _U, _C, _H, _W, _K, _R, _S, _DH, _DW, _P, _Q, _TM, _TN, _TK, _NCHW, _EB, _SMS, _SLOTS, _SSH, _STEP_REQ,
    _STEP_SEC, _UNI, _RPW, _ALN, _OP, _FPROP, _KA, _KB, _DGRAD, _WGRAD, _TILES_M, _TILES_N, _SWZ, _NBLOCKS, _TMPF,
    _F_SKIP, _F_KSTEPS, _ST_ROUND, _ST_PHASE, _ST_SM, _ST_SLOT, _ST_NEXT, _ST_DONE, _GPC)
from ._group_steps import _step_group
from ._steps import _start_fprop, _step_nchw, _step_rows, _step_seg, _stores

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _steps.py, _backward.py, _group_steps.py and _layout.py. tests/test_jit_deps.py checks this
# digest of them: updating the digest after an edit there changes this file too, so no stale compiled
# kernel survives.
_JIT_DEPS_SHA256 = "d2411479ccff8611"


@njit(cache=True, _nrt=False)
def _refill(prm, maps, sched, rows, nxt, dgrad, wgrad):
    """One dispatch phase: passes over the SMs, each SM with a free slot takes the next block, until a
    pass takes none or the blocks run out. Returns the next block. Blocks outside the grid, and strided
    dgrad's blocks whose starting (h, w) lies outside dx (CUTLASS returns at once), are skipped."""
    SMS = prm[_SMS]; SLOTS = prm[_SLOTS]; NBLOCKS = prm[_NBLOCKS]; SWZ = prm[_SWZ]
    TILES_M = prm[_TILES_M]; TILES_N = prm[_TILES_N]; TMPF = prm[_TMPF]
    slot_cta, slot_tm, slot_tn, slot_step, slot_ksteps, slot_fpos = sched[1:7]
    fpos = maps[9]
    swz_mask = (1 << SWZ) - 1
    grid_x = TILES_M << SWZ
    while True:
        took = False
        for sm in range(SMS):
            free = -1
            for sl in range(SLOTS):
                if slot_cta[sm * SLOTS + sl] < 0:
                    free = sl
                    break
            if free < 0:
                continue
            # next block whose tile lies inside the grid (and does something)
            tm = 0
            tn = 0
            f = 0
            while nxt < NBLOCKS:
                bx = nxt % grid_x
                by = nxt // grid_x
                tm = bx >> SWZ
                tn = (by << SWZ) + (bx & swz_mask)
                if tm < TILES_M and tn < TILES_N:
                    f = tm // TMPF
                    if not fpos[f, _F_SKIP]:
                        break
                nxt += 1
            if nxt >= NBLOCKS:
                break
            idx = sm * SLOTS + free
            slot_cta[idx] = nxt
            slot_tm[idx] = tm
            slot_tn[idx] = tn
            slot_step[idx] = 0
            slot_ksteps[idx] = fpos[f, _F_KSTEPS]
            slot_fpos[idx] = f
            nxt += 1
            took = True
            if dgrad is not None:
                _start_dgrad(prm, maps, rows, idx, tm, f)
            elif wgrad is not None:
                _start_wgrad(prm, maps, rows, idx, tm, tn)
            else:
                _start_fprop(prm, maps, rows, idx, tm, tn)
        if not took or nxt >= NBLOCKS:
            return nxt


@njit(cache=True, _nrt=False, nogil=True)
def _generate(prm, maps, sched, rows, scratch, out, dgrad, wgrad, grouped):
    """Fill the output buffers `out` from where `sched` stopped; return (requests, sectors) written.
    ``dgrad``, ``wgrad``: None, or 1 for that op (``prm[_OP]``), as `OP_FLAGS` gives them; ``grouped``:
    None, or 1 for a grouped layer (``prm[_GPC] > 0``, `generate_flags`).

    The _ALN k-step (the hot path) is written out here rather than in helper functions: compiled
    with Numba's runtime (NRT), a call increments and decrements (atomically) the reference count of
    every array it receives, inlined or not (profiled: 20-25% of the time when that k-step used
    helpers). The generator's kernels now compile without it (``_nrt=False``: they allocate nothing),
    which removed that cost from the other steps as well, see the module docstring."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; S = prm[_S]; RS = prm[_R] * S; DH = prm[_DH]; DW = prm[_DW]
    # the image and channels of A's rows: fprop x (H, W, C), dgrad dy (P, Q, K)
    IH = prm[_P] if prm[_OP] == _DGRAD else H
    IW = prm[_Q] if prm[_OP] == _DGRAD else W
    IC = prm[_K] if prm[_OP] == _DGRAD else C
    SMS = prm[_SMS]; SLOTS = prm[_SLOTS]; TM = prm[_TM]; TN = prm[_TN]; TK = prm[_TK]; EB = prm[_EB]
    SSH = prm[_SSH]; NCHW = prm[_NCHW]; UNI = prm[_UNI]; ALN = prm[_ALN]
    RPW = prm[_RPW]; STEP_REQ = prm[_STEP_REQ]; STEP_SEC = prm[_STEP_SEC]
    KA = prm[_KA]; KB = prm[_KB]
    state, slot_cta, slot_tm, slot_tn, slot_step, slot_ksteps, slot_fpos = sched
    seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start, thr_a = maps[:7]
    fpos, store_order = maps[9], maps[10]
    row_hb, row_wb, row_base, row_y, row_b, b_rows, b_reqs, b_num = rows[:8]
    ra_a, sa_lo, sa_hi, sb_lo, sb_hi, kt_off, kt_rh, kt_sw = scratch[:8]
    ra_rows = scratch[9]                        # ra_a as a (1, tile_m) array
    o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, o_sec = out     # o_st: kinds
    req_cap = min(o_sm.shape[0], o_op.shape[0], o_st.shape[0], o_first.shape[0], o_count.shape[0])
    all_fields = min(o_round.shape[0], o_cta.shape[0], o_ks.shape[0]) > 0   # lean: length 0
    if all_fields:
        req_cap = min(req_cap, o_round.shape[0], o_cta.shape[0], o_ks.shape[0])
    sec_cap = o_sec.shape[0]
    sb = 1 << SSH
    rnd = state[_ST_ROUND]
    phase = state[_ST_PHASE]
    cur_sm = state[_ST_SM]
    cur_slot = state[_ST_SLOT]
    nxt = state[_ST_NEXT]
    nreq = 0
    nsec = 0
    while True:
        if phase == 0:
            nxt = _refill(prm, maps, sched, rows, nxt, dgrad, wgrad)
            any_busy = False
            for idx in range(SMS * SLOTS):
                if slot_cta[idx] >= 0:
                    any_busy = True
                    break
            if not any_busy:
                state[_ST_DONE] = 1
                state[_ST_ROUND] = rnd
                state[_ST_PHASE] = 0
                state[_ST_NEXT] = nxt
                return nreq, nsec
            phase = 1
            cur_sm = 0
            cur_slot = 0

        # ---- one round: every SM in order, each resident CTA in slot order takes one step ----
        while cur_sm < SMS:
            while cur_slot < SLOTS:
                idx = cur_sm * SLOTS + cur_slot
                cta = slot_cta[idx]
                if cta < 0:
                    cur_slot += 1
                    continue
                if nreq + STEP_REQ > req_cap or nsec + STEP_SEC > sec_cap:
                    state[_ST_ROUND] = rnd
                    state[_ST_PHASE] = phase
                    state[_ST_SM] = cur_sm
                    state[_ST_SLOT] = cur_slot
                    state[_ST_NEXT] = nxt
                    return nreq, nsec
                ks = slot_step[idx]
                q0 = nreq
                op = 0                                  # A up to request q1, B after; stores: C
                if ks >= slot_ksteps[idx]:
                    # ---- stores of the CTA's tile, then retire ----
                    nreq, nsec = _stores(prm, row_y, store_order, idx, slot_tn[idx] * TN, o_first, o_count, o_sec,
                                         nreq, nsec)
                    q1 = nreq
                    op = 2
                    slot_cta[idx] = -1
                elif dgrad is not None and not ALN:
                    q1, nreq, nsec = _step_dgrad(prm, maps, rows, scratch, slot_fpos[idx], idx, ks, slot_tn[idx] * TN,
                                                 o_first, o_count, o_sec, nreq, nsec)
                elif wgrad is not None:
                    q1, nreq, nsec = _step_wgrad(prm, seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_start, rows[8],
                                                 rows[9], sa_lo, sa_hi, kt_off, kt_rh, kt_sw, scratch[8], idx, ks,
                                                 slot_tm[idx] * TM, o_first, o_count, o_sec, nreq, nsec)
                elif grouped is not None:           # grouped fprop (traces._group_steps)
                    q1, nreq, nsec = _step_group(prm, maps, rows, scratch, idx, ks, slot_tn[idx], o_first, o_count,
                                                 o_sec, nreq, nsec)
                elif not ALN:
                    if UNI:
                        q1, nreq, nsec = _step_rows(prm, row_hb, row_wb, row_base, row_b, ra_rows, idx, ks, o_first,
                                                    o_count, o_sec, nreq, nsec)
                    elif NCHW:
                        q1, nreq, nsec = _step_nchw(prm, seg_b_so, seg_b_co, seg_b_start, thr_a, row_hb, row_wb,
                                                    row_base, row_b, sb_lo, sb_hi, kt_off, kt_rh, kt_sw, idx, ks,
                                                    o_first, o_count, o_sec, nreq, nsec)
                    else:
                        q1, nreq, nsec = _step_seg(prm, seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co,
                                                   seg_b_start, row_hb, row_wb, row_base, row_b, ra_a, sa_lo,
                                                   sa_hi, sb_lo, sb_hi, idx, ks, o_first, o_count, o_sec, nreq,
                                                   nsec)
                else:
                    # ---- nhwc k-step under _ALN: fprop (channel block cb, filter position rs) or dgrad
                    # (filter block k0, position (r, s)); A's rows shift by (rdh, sdw) in A's image ----
                    if dgrad is not None:
                        c0, r, s, rdh, sdw = _dgrad_position(prm, fpos, slot_fpos[idx], ks)
                    else:
                        cb = ks // RS
                        rs = ks - cb * RS
                        r = rs // S
                        c0 = cb * TK
                        rdh = r * DH
                        sdw = (rs - r * S) * DW
                    lo = c0 * EB                        # the k-step's bytes of a row: [lo, hi]
                    hi = min(c0 + TK, IC) * EB - 1
                    ns = (hi >> SSH) - (lo >> SSH) + 1  # sectors of a valid row, from its first
                    lo = (lo >> SSH) << SSH
                    # A rows (request order): first sector, or -1 when predicated off (padding, m >= M),
                    # staged where the step's sectors go, far enough in that the compaction below never
                    # overtakes them (measured: 3% less time than a scratch array and a copy). Row bases
                    # may be negative, so (r, s) is folded in here.
                    koff = (rdh * IW + sdw) * IC * EB + lo
                    stage = _U(nsec + (ns - 1) * TM)
                    nbad = 0
                    for p in range(_U(TM)):
                        h = row_hb[idx, p] + rdh
                        w = row_wb[idx, p] + sdw
                        ok = (_U(h) < _U(IH)) & (_U(w) < _U(IW))
                        o_sec[stage + p] = row_base[idx, p] + koff if ok else -1
                        nbad += not ok
                    if nbad == 0 and ns == 1:
                        # every row valid: already in place, rpw sectors a request
                        for q in range(_U(TM // RPW)):
                            o_first[_U(nreq) + q] = nsec + q * RPW
                            o_count[_U(nreq) + q] = RPW
                        nreq += TM // RPW
                        nsec += TM
                    else:
                        # branch-free compaction: a predicated-off row's sectors are written, then
                        # overwritten (a branch on padding rows mispredicts: measured 0.35 ns/sector less
                        # on vgg16 conv4/conv5, the same on conv1/conv2)
                        for q in range(TM // RPW):
                            n = nsec
                            for p in range(_U(q * RPW), _U(q * RPW + RPW)):
                                a = o_sec[stage + p]
                                if ns == 1:
                                    o_sec[_U(n)] = a
                                else:
                                    for t in range(_U(ns)):
                                        o_sec[_U(n) + t] = a + t * sb
                                n += ns * (a >= 0)
                            if n > nsec:
                                o_first[_U(nreq)] = nsec
                                o_count[_U(nreq)] = n - nsec
                                nreq += 1
                                nsec = n
                    q1 = nreq
                    if dgrad is not None:
                        # B: w at (r, s), filters k0 .. of this k-step
                        nreq, nsec = _dgrad_filters(prm, seg_b_so, seg_b_co, seg_b_start, sb_lo, sb_hi, kt_off, c0, r,
                                                    s, slot_tn[idx] * TN, o_first, o_count, o_sec, nreq, nsec)
                    else:
                        # B: the CTA's compacted requests (`_start_fprop`) shifted to this k-step
                        off = lo + rs * C * EB
                        nrow = b_num[idx, 0]
                        if ns == 1:
                            for i in range(_U(nrow)):
                                o_sec[_U(nsec) + i] = b_rows[idx, i] + off
                        else:
                            for i in range(_U(nrow)):
                                for t in range(_U(ns)):
                                    o_sec[_U(nsec) + i * _U(ns) + t] = b_rows[idx, i] + off + t * sb
                        if nrow == TN:                  # every filter valid: rpw rows a request
                            for q in range(_U(TN // RPW)):
                                o_first[_U(nreq) + q] = nsec + q * (RPW * ns)
                                o_count[_U(nreq) + q] = RPW * ns
                        else:
                            for q in range(_U(b_num[idx, 1])):
                                o_first[_U(nreq) + q] = nsec + b_reqs[idx, q, 0] * ns
                                o_count[_U(nreq) + q] = b_reqs[idx, q, 1] * ns
                        nreq += b_num[idx, 1]
                        nsec += nrow * ns
                if op < 2:
                    slot_step[idx] = ks + 1
                # the fields the step's requests share: short fill loops instead of six stores per
                # request (measured: 0.5-0.9 ns/sector less on vgg16)
                kind_a = 1 if op == 2 else KA           # request kinds (simcore.metrics.KIND_*): stores 1
                kind_b = 1 if op == 2 else KB
                for i in range(_U(q0), _U(nreq)):
                    o_sm[i] = cur_sm
                    o_op[i] = op + (i >= _U(q1))
                    o_st[i] = kind_b if i >= _U(q1) else kind_a
                if all_fields:
                    for i in range(_U(q0), _U(nreq)):
                        o_round[i] = rnd
                        o_cta[i] = cta
                        o_ks[i] = ks
                cur_slot += 1
            cur_slot = 0
            cur_sm += 1
        rnd += 1
        phase = 0


# One compiled generator per op: `_generate` and `_refill` branch on their arguments ``dgrad`` and
# ``wgrad`` being None; Numba drops a branch on an argument that is None before typing (it prunes
# comparisons with None only, not with an integer constant), so the dgrad and wgrad steps are not
# compiled for an fprop run, and so on: the first `validation.compare vgg16` compiled 12 fewer kernels,
# about 8 s of its 23 s of stream-generator compilation on the 2-core development machine (under load).
# The (dgrad, wgrad) arguments of `_generate` for each op (``prm[_OP]``):
OP_FLAGS = {_FPROP: (None, None), _DGRAD: (1, None), _WGRAD: (None, 1)}


def generate_flags(prm) -> tuple:
    """The (dgrad, wgrad, grouped) arguments of `_generate` for the plan ``prm``: a grouped layer's
    step (`traces._group_steps`) is compiled only for grouped layers, like the ops' steps."""
    return (*OP_FLAGS[int(prm[_OP])], 1 if prm[_GPC] > 0 else None)
