"""The fprop building blocks of the request generator (Numba): starting a CTA, one k-step of the general
paths (the _ALN k-step is written out in `traces._generate`), and every op's stores. The dgrad and wgrad
blocks are in `traces._backward`, the request emitters in `traces._emit`; `traces._generate` drives them."""
from __future__ import annotations

from simcore._jit import njit

from ._emit import (
    _close_request, _emit_rows, _emit_segments, _insert, _insert_range, _segment_offsets, _shift_rows)
from ._layout import (
    _BIG, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _M, _GK, _TM, _TN, _TK,
    _THREADS, _NCHW, _EB, _TSA, _IA, _TSB, _IB, _XB, _WB, _YB, _SSH, _UNI, _RPW, _GN, _SROWS, _SCOLS)

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _emit.py and _layout.py. tests/test_jit_deps.py checks this digest of them:
# updating the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "cf7536368b6fafa4"


# ---- compiled kernel ----------------------------------------------------------------------------
# `_generate`'s arguments, tuples of arrays (see `_Generator`):
#   maps:    seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start, thr_a, perm_a, perm_b,
#            fpos (filter positions: `_layout._F_*`), store_order (tile rows in the epilogue's order)
#   sched:   state, slot_cta, slot_tm, slot_tn, slot_step, slot_ksteps, slot_fpos
#   rows:    per slot: row_hb, row_wb, row_base (A rows, in perm_a order; wgrad: unused), row_y (byte
#            address of each store row's column 0, -1 if invalid; nchw: y element offset), row_b (B rows,
#            in perm_b order), b_rows, b_reqs, b_num (_UNI: B's compacted requests), pieces, piece_start
#            (wgrad: B's segments split where the filter position changes)
#   scratch: ra_a, sa_lo, sa_hi, sb_lo, sb_hi, kt_off, kt_rh, kt_sw, kt_a, ra_a as a (1, tile_m) view
#   out:     the 9 RequestChunk buffers (lean: round, cta and kstep of length 0, left unwritten)

@njit(cache=True, _nrt=False)
def _start_fprop(prm, maps, rows, idx, tm, tn):
    """Per-row information of a new fprop CTA's tile in slot idx (once per CTA): A rows' image offset and
    h/w origins (an invalid row m >= M gets -_BIG origins, so every padding test rejects it), store
    rows, B rows' addresses; under _UNI in request order, plus B's compacted requests."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; K = prm[_K]; R = prm[_R]; S = prm[_S]
    TM = prm[_TM]; TN = prm[_TN]; EB = prm[_EB]; NCHW = prm[_NCHW]; RPW = prm[_RPW]
    P = prm[_P]; Q = prm[_Q]; M = prm[_M]; GK = prm[_GK]
    perm_a, perm_b = maps[7], maps[8]
    row_hb, row_wb, row_base, row_y, row_b, b_rows, b_reqs, b_num = rows[:8]
    PQ = P * Q
    kstride = GK * EB                           # filter pitch: (C / groups) R S elements, both layouts
    for p in range(TN):
        k = tn * TN + perm_b[p]
        row_b[idx, p] = prm[_WB] + k * kstride if k < K else -1
    m0 = tm * TM
    for p in range(TM):
        i = perm_a[p]
        m = m0 + i
        if m < M:
            n = m // PQ
            pq = m - n * PQ
            pp = pq // Q
            q = pq - pp * Q
            hb = pp * prm[_SH] - prm[_PH]
            wb = q * prm[_SW] - prm[_PW]
            row_hb[idx, p] = hb
            row_wb[idx, p] = wb
            if NCHW:
                row_base[idx, p] = n * C * H * W
                row_y[idx, i] = n * K * PQ + pq
            else:
                row_base[idx, p] = prm[_XB] + (n * H * W + hb * W + wb) * C * EB
                row_y[idx, i] = prm[_YB] + m * K * EB
        else:
            row_hb[idx, p] = -_BIG
            row_wb[idx, p] = -_BIG
            row_base[idx, p] = 0
            row_y[idx, i] = -1
    if prm[_UNI]:
        nrow = 0
        nq = 0
        for q in range(TN // RPW):
            cnt = 0
            for p in range(q * RPW, q * RPW + RPW):
                if row_b[idx, p] >= 0:
                    b_rows[idx, nrow + cnt] = row_b[idx, p]
                    cnt += 1
            if cnt > 0:
                b_reqs[idx, nq, 0] = nrow
                b_reqs[idx, nq, 1] = cnt
                nq += 1
                nrow += cnt
        b_num[idx, 0] = nrow
        b_num[idx, 1] = nq


@njit(cache=True, _nrt=False)
def _step_rows(prm, row_hb, row_wb, row_base, row_b, ra_a, idx, ks, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of an nhwc k-step under _UNI but not _ALN (``ra_a``: a (1, tile_m) scratch row);
    returns (end of A's requests, nreq, nsec)."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; S = prm[_S]; RS = prm[_R] * S
    TM = prm[_TM]; TK = prm[_TK]; EB = prm[_EB]; SSH = prm[_SSH]; RPW = prm[_RPW]
    cb = ks // RS
    rs = ks - cb * RS
    r = rs // S
    rdh = r * prm[_DH]
    sdw = (rs - r * S) * prm[_DW]
    c0 = cb * TK
    lo = c0 * EB                              # the k-step's bytes of a row: [lo, hi]
    hi = min(c0 + TK, C) * EB - 1
    # A: contiguous = channels, strided = rows m; row bases may be negative: fold (r, s) in here
    _shift_rows(row_hb, row_wb, row_base, idx, TM, rdh, sdw, (rdh * W + sdw) * C * EB, H, W, ra_a[0])
    nreq, nsec = _emit_rows(ra_a, 0, TM, RPW, lo, hi, SSH, o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B: contiguous = channels, strided = filters k
    ext = rs * C * EB
    nreq, nsec = _emit_rows(row_b, idx, prm[_TN], RPW, lo + ext, hi + ext, SSH, o_first, o_count, o_sec, nreq,
                            nsec)
    return q1, nreq, nsec


@njit(cache=True, _nrt=False)
def _step_seg(prm, seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start, row_hb, row_wb, row_base,
              row_b, ra_a, sa_lo, sa_hi, sb_lo, sb_hi, idx, ks, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of an nhwc k-step, segment by segment; returns (end of A's requests, nreq, nsec)."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; S = prm[_S]; RS = prm[_R] * S
    TM = prm[_TM]; TK = prm[_TK]; EB = prm[_EB]; SSH = prm[_SSH]; WARPS = prm[_THREADS] // 32
    cb = ks // RS
    rs = ks - cb * RS
    r = rs // S
    rdh = r * prm[_DH]
    sdw = (rs - r * S) * prm[_DW]
    c0 = cb * TK
    # A: contiguous = channels, strided = rows m; row bases may be negative: fold (r, s) in here
    _shift_rows(row_hb, row_wb, row_base, idx, TM, rdh, sdw, (rdh * W + sdw) * C * EB, H, W, ra_a)
    _segment_offsets(seg_a_co, sa_lo, sa_hi, c0, C, 0, EB)
    nreq, nsec = _emit_segments(ra_a, seg_a_so, sa_lo, sa_hi, seg_a_start, WARPS, prm[_IA], prm[_TSA], SSH,
                                o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B: contiguous = channels, strided = filters k
    _segment_offsets(seg_b_co, sb_lo, sb_hi, c0, C, rs * C * EB, EB)
    nreq, nsec = _emit_segments(row_b[idx], seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, prm[_IB], prm[_TSB],
                                SSH, o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec


@njit(cache=True, _nrt=False)
def _step_nchw(prm, seg_b_so, seg_b_co, seg_b_start, thr_a, row_hb, row_wb, row_base, row_b, sb_lo, sb_hi,
               kt_off, kt_rh, kt_sw, idx, ks, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of an nchw k-step; returns (end of A's requests, nreq, nsec)."""
    H = prm[_H]; W = prm[_W]; S = prm[_S]; RS = prm[_R] * S; GK = prm[_GK]
    TK = prm[_TK]; EB = prm[_EB]; SSH = prm[_SSH]; XB = prm[_XB]; TSA = prm[_TSA]
    WARPS = prm[_THREADS] // 32
    gk0 = ks * TK
    for i in range(TK):
        gk = gk0 + i
        if gk < GK:
            c = gk // RS
            rs = gk - c * RS
            r = rs // S
            s = rs - r * S
            kt_off[i] = c * H * W
            kt_rh[i] = r * prm[_DH]
            kt_sw[i] = s * prm[_DW]
        else:
            kt_off[i] = 0
            kt_rh[i] = -_BIG
            kt_sw[i] = -_BIG
    # A: contiguous = rows m (padding differs per lane), strided = gk: lane by lane
    for wp in range(WARPS):
        for j in range(prm[_IA]):
            first = nsec
            cnt = 0
            for lane in range(32):
                t = wp * 32 + lane
                mi = thr_a[t, 0]
                gi = thr_a[t, 1] + j * TSA
                h = row_hb[idx, mi] + kt_rh[gi]
                if h < 0 or h >= H:
                    continue
                w = row_wb[idx, mi] + kt_sw[gi]
                if w < 0 or w >= W:
                    continue
                a = XB + (row_base[idx, mi] + kt_off[gi] + h * W + w) * EB
                cnt = _insert(o_sec, first, cnt, (a >> SSH) << SSH)
            if cnt > 0:
                nreq, nsec = _close_request(o_first, o_count, nreq, nsec, first, cnt)
    q1 = nreq
    # B: contiguous = gk, strided = filters k
    _segment_offsets(seg_b_co, sb_lo, sb_hi, gk0, GK, 0, EB)
    nreq, nsec = _emit_segments(row_b[idx], seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, prm[_IB], prm[_TSB],
                                SSH, o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec


@njit(cache=True, _nrt=False)
def _stores(prm, row_y, order, idx, n0, o_first, o_count, o_sec, nreq, nsec):
    """Store requests of the CTA's tile in slot idx (columns n0 .. n0 + TN - 1); returns (nreq, nsec).

    nhwc (every op): the epilogue's order, tile rows as ``order`` lists them (`traces.epilogue`), each
    request _SROWS of them (SIMT 1), valid rows' columns in blocks of _SCOLS (SIMT 32) below GEMM-N; nchw:
    section 3's order (filters, then rows)."""
    K = prm[_K]; TM = prm[_TM]; TN = prm[_TN]; EB = prm[_EB]; SSH = prm[_SSH]; YB = prm[_YB]
    if prm[_NCHW]:
        PQ = prm[_P] * prm[_Q]
        for kk in range(TN):
            k = n0 + kk
            if k >= K:
                break
            koff = k * PQ
            for g in range((TM + 31) // 32):
                first = nsec
                cnt = 0
                lo = g * 32
                hi = min(lo + 32, TM)
                for mi in range(lo, hi):
                    yo = row_y[idx, mi]
                    if yo < 0:
                        break
                    a = YB + (yo + koff) * EB
                    cnt = _insert(o_sec, first, cnt, (a >> SSH) << SSH)
                if cnt > 0:
                    nreq, nsec = _close_request(o_first, o_count, nreq, nsec, first, cnt)
        return nreq, nsec
    GN = prm[_GN]
    SR = prm[_SROWS]                            # a request: SR tile rows (in ``order``) x SC columns
    SC = prm[_SCOLS]
    for t in range(0, TM, SR):
        for g in range((TN + SC - 1) // SC):
            lo = n0 + g * SC
            if lo >= GN:
                break
            hi = min(lo + SC, n0 + TN, GN)
            cnt = 0
            for u in range(t, t + SR):
                base = row_y[idx, order[u]]
                if base >= 0:
                    cnt = _insert_range(o_sec, nsec, cnt, base + lo * EB, base + hi * EB - 1, SSH)
            if cnt > 0:
                nreq, nsec = _close_request(o_first, o_count, nreq, nsec, nsec, cnt)
    return nreq, nsec
