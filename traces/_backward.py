"""The dgrad and wgrad building blocks of the request generator (Numba, DESIGN section 3a): starting a
CTA and one k-step. The walk (`traces._generate`), the request emitters (`traces._emit`) and the stores
(`traces._steps._stores`) are shared with fprop.

dgrad: A = dy, rows m <-> dx pixels (n, h, w) kept per CTA like fprop's A rows (h/w origins in dy's
(p, q) frame, shifted by -r dil_h / -s dil_w, or by -i for the i-th position of strided dgrad); B = w,
rows k = k0 .. k0 + tile_k - 1 of the k-step, columns the CTA's channels. wgrad: A = dy, rows npq of the
k-step, columns the CTA's filters; B = x, rows npq of the k-step, columns rsc of the CTA split into
runs of filter positions (not clipped to R S C: CUTLASS loads past GEMM-N)."""
from __future__ import annotations

from simcore._jit import njit

from ._emit import (
    _close_request, _emit_range, _emit_rows, _emit_segments, _emit_warp_rows, _insert_range, _segment_offsets,
    _shift_rows)
from ._layout import (
    _BIG, _U, _N, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _TM, _TN, _TK, _THREADS, _EB,
    _TSA, _IA, _TSB, _IB, _XB, _WB, _YB, _SSH, _UNI, _RPW, _TMPF, _NPQ, _F_R0, _F_S0, _F_H0, _F_W0, _F_NR,
    _F_NS, _F_PP, _F_QQ)

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _emit.py and _layout.py. tests/test_jit_deps.py checks this digest of them:
# updating the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "cf7536368b6fafa4"


@njit(cache=True, _nrt=False)
def _start_dgrad(prm, maps, rows, idx, tm, f):
    """Rows of a new dgrad CTA in slot idx, starting filter position f: for each A row (perm_a order) the
    dy (p, q) origin and byte address at the CTA's first filter position; for each store row the dx
    address. Rows past the image (n >= N) get -_BIG origins and no store."""
    N = prm[_N]; C = prm[_C]; H = prm[_H]; W = prm[_W]; K = prm[_K]; P = prm[_P]; Q = prm[_Q]
    SH = prm[_SH]; SW = prm[_SW]; TM = prm[_TM]; EB = prm[_EB]
    fpos, perm_a = maps[9], maps[7]
    row_hb, row_wb, row_base, row_y = rows[0], rows[1], rows[2], rows[3]
    strided = fpos.shape[0] > 1
    r0 = fpos[f, _F_R0]; s0 = fpos[f, _F_S0]; h0 = fpos[f, _F_H0]; w0 = fpos[f, _F_W0]
    PP = fpos[f, _F_PP]; QQ = fpos[f, _F_QQ]
    rows_per_filter = prm[_TMPF] * TM
    for p in range(TM):
        i = perm_a[p]
        m = tm * TM + i
        if strided:                    # rows remapped to the dx pixels of this starting position
            m = m % rows_per_filter
            n = m // (PP * QQ)
            rest = m - n * PP * QQ
            h = h0 + (rest // QQ) * SH
            w = w0 + (rest % QQ) * SW
            hb = (h + prm[_PH] - r0) // SH     # exact: (h + pad_h - start_r) is a multiple of stride_h
            wb = (w + prm[_PW] - s0) // SW
        else:
            n = m // (H * W)
            rest = m - n * H * W
            h = rest // W
            w = rest - h * W
            hb = h + prm[_PH]
            wb = w + prm[_PW]
        if n < N:
            row_hb[idx, p] = hb
            row_wb[idx, p] = wb
            row_base[idx, p] = prm[_YB] + ((n * P + hb) * Q + wb) * K * EB
            row_y[idx, i] = prm[_XB] + ((n * H + h) * W + w) * C * EB
        else:
            row_hb[idx, p] = -_BIG
            row_wb[idx, p] = -_BIG
            row_base[idx, p] = 0
            row_y[idx, i] = -1


@njit(cache=True, _nrt=False, inline="always")
def _dgrad_position(prm, fpos, f, ks):
    """(k0, r, s, dr, ds) of dgrad k-step ks of a CTA at starting filter position f: the order is
    `for k0: for r in (start_r, + stride_h ..): for s in (start_s, + stride_w ..)`; dy's (p, q) at (r, s)
    is the row's origin shifted by (dr, ds) = (-r dil_h, -s dil_w) at unit stride, (-i_r, -i_s) for the
    i-th position of strided dgrad (dilation 1)."""
    ns = fpos[f, _F_NS]
    npos = fpos[f, _F_NR] * ns
    kb = ks // npos
    ir = (ks - kb * npos) // ns
    js = ks - kb * npos - ir * ns
    return (kb * prm[_TK], fpos[f, _F_R0] + ir * prm[_SH], fpos[f, _F_S0] + js * prm[_SW], -ir * prm[_DH],
            -js * prm[_DW])


@njit(cache=True, _nrt=False, inline="always")
def _dgrad_filters(prm, seg_b_so, seg_b_co, seg_b_start, sb_lo, sb_hi, kt_off, k0, r, s, n0, o_first, o_count,
                   o_sec, nreq, nsec):
    """dgrad B (w, KRSC) requests of a k-step: contiguous = the CTA's channels n0 .., strided = filters
    k0 + j at (r, s); returns (nreq, nsec)."""
    C = prm[_C]; K = prm[_K]; EB = prm[_EB]; SSH = prm[_SSH]; WARPS = prm[_THREADS] // 32
    RS = prm[_R] * prm[_S]
    for j in range(prm[_TK]):
        k = k0 + j
        kt_off[j] = prm[_WB] + ((k * RS + r * prm[_S] + s) * C) * EB if k < K else -1
    _segment_offsets(seg_b_co, sb_lo, sb_hi, n0, C, 0, EB)
    if seg_b_so.shape[0] == WARPS:          # tile_n / vector a multiple of 32 (the default kernels)
        return _emit_warp_rows(kt_off, seg_b_so, sb_lo, sb_hi, WARPS, prm[_IB], prm[_TSB], SSH, o_first, o_count,
                               o_sec, nreq, nsec)
    return _emit_segments(kt_off, seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, prm[_IB], prm[_TSB], SSH, o_first,
                          o_count, o_sec, nreq, nsec)


@njit(cache=True, _nrt=False)
def _step_dgrad(prm, maps, rows, scratch, f, idx, ks, n0, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of dgrad k-step ks of the CTA in slot idx (starting filter position f, channels
    n0 ..) off the _ALN path (which `traces._generate` writes out); returns (end of A's requests, nreq,
    nsec)."""
    K = prm[_K]; P = prm[_P]; Q = prm[_Q]; TM = prm[_TM]; TK = prm[_TK]; EB = prm[_EB]; SSH = prm[_SSH]
    seg_a_so, seg_a_co, seg_a_start = maps[:3]
    sa_lo, sa_hi = scratch[1], scratch[2]
    ra_a = scratch[9]                   # (1, tile_m): A's row addresses
    k0, r, s, dr, ds = _dgrad_position(prm, maps[9], f, ks)
    # A (dy): contiguous = filters k0 .., strided = the CTA's rows
    _shift_rows(rows[0], rows[1], rows[2], idx, TM, dr, ds, (dr * Q + ds) * K * EB, P, Q, ra_a[0])
    if prm[_UNI]:
        nreq, nsec = _emit_rows(ra_a, 0, TM, prm[_RPW], k0 * EB, min(k0 + TK, K) * EB - 1, SSH,
                                o_first, o_count, o_sec, nreq, nsec)
    else:
        _segment_offsets(seg_a_co, sa_lo, sa_hi, k0, K, 0, EB)
        nreq, nsec = _emit_segments(ra_a[0], seg_a_so, sa_lo, sa_hi, seg_a_start, prm[_THREADS] // 32, prm[_IA],
                                    prm[_TSA], SSH, o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    nreq, nsec = _dgrad_filters(prm, maps[3], maps[4], maps[5], scratch[3], scratch[4], scratch[5], k0, r, s, n0,
                                o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec


@njit(cache=True, _nrt=False)
def _start_wgrad(prm, maps, rows, idx, tm, tn):
    """A new wgrad CTA in slot idx: store rows (filters k, dw row addresses) and B's segments split into
    runs of filter positions (r, s .. s') that lie back to back in x (one position each when dil_w > 1),
    for columns rsc = tn tile_n + contiguous offset (past GEMM-N included). A run is (r dil_h, s dil_w,
    s' dil_w, first byte, last byte, byte of (r, 0, 0)), relative to a row's address; a row whose w
    origin is wb keeps the positions with 0 <= wb + s dil_w < W, a contiguous part of the run."""
    C = prm[_C]; W = prm[_W]; K = prm[_K]; S = prm[_S]; TM = prm[_TM]; EB = prm[_EB]
    DH = prm[_DH]; DW = prm[_DW]
    seg_b_co = maps[4]
    row_y, pieces, piece_start = rows[3], rows[8], rows[9]
    rsc_pitch = prm[_R] * S * C * EB
    for i in range(TM):
        k = tm * TM + i
        row_y[idx, i] = prm[_WB] + k * rsc_pitch if k < K else -1
    n0 = tn * prm[_TN]
    npc = 0
    for sg in range(seg_b_co.shape[0]):
        piece_start[idx, sg] = npc
        a = n0 + seg_b_co[sg, 0]
        end = n0 + seg_b_co[sg, 1]
        while a < end:
            r = a // (S * C)
            s = (a - r * S * C) // C
            c = a - (r * S + s) * C
            e = min(end, a + C - c)
            rbase = r * DH * W * C * EB
            lo = rbase + (s * DW * C + c) * EB
            hi = rbase + (s * DW * C + c + e - a) * EB - 1
            if (DW == 1 and npc > piece_start[idx, sg] and pieces[idx, npc - 1, 0] == r * DH
                    and pieces[idx, npc - 1, 4] + 1 == lo):
                pieces[idx, npc - 1, 2] = s          # position s follows the run's last one in memory
                pieces[idx, npc - 1, 4] = hi
            else:
                pieces[idx, npc, 0] = r * DH
                pieces[idx, npc, 1] = s * DW
                pieces[idx, npc, 2] = s * DW
                pieces[idx, npc, 3] = lo
                pieces[idx, npc, 4] = hi
                pieces[idx, npc, 5] = rbase
                npc += 1
            a = e
    piece_start[idx, seg_b_co.shape[0]] = npc


@njit(cache=True, _nrt=False, inline="always")
def _run_bytes(pcs, u, wb, iw, ceb):
    """The byte range of run u (see `_start_wgrad`) kept by a row with w origin wb; lo > hi: none."""
    d_lo = max(pcs[u, 1], -wb)
    d_hi = min(pcs[u, 2], iw - 1 - wb)
    if d_lo > d_hi:
        return 1, 0
    return max(pcs[u, 3], pcs[u, 5] + d_lo * ceb), min(pcs[u, 4], pcs[u, 5] + (d_hi + 1) * ceb - 1)


@njit(cache=True, _nrt=False, inline="always")
def _emit_pieces(kt_off, kt_rh, kt_sw, seg_so, seg_start, pieces, piece_start, idx, warps, iters, t_s, ih, iw,
                 ceb, ssh, o_first, o_count, o_sec, nreq, nsec):
    """wgrad B requests: row i (kt_off[i]: byte address of x at its (h, w) origin, kt_rh/kt_sw[i]: the
    origin) of each segment, the part of every run whose (h, w) lies in the image. Runs rather than one
    filter position each (measured, vgg16 conv1_1 batch 8, C = 3: the generator 9.7 -> 6.3 ns per sector;
    the training step of bench_traces.py --train 32, 2.97 -> 2.93 on the 2-core machine)."""
    pcs = pieces[idx]
    starts = piece_start[idx]
    if seg_so.shape[0] == warps and starts[warps] == warps:
        # one segment per warp, one run per segment (C a multiple of 32 / vector, the default kernels):
        # request (w, j) is row seg_so[w] + j t_s, run w (measured: half the time)
        for wp in range(warps):
            dr = pcs[wp, 0]
            so = seg_so[wp]
            for j in range(iters):
                i = _U(so + j * t_s)
                if _U(kt_rh[i] + dr) < _U(ih):
                    lo, hi = _run_bytes(pcs, wp, kt_sw[i], iw, ceb)
                    if lo <= hi:
                        nreq, nsec = _emit_range(o_first, o_count, o_sec, nreq, nsec, kt_off[i] + lo,
                                                 kt_off[i] + hi, ssh)
        return nreq, nsec
    for wp in range(warps):
        sg0 = seg_start[wp]
        sg1 = seg_start[wp + 1]
        for j in range(iters):
            cnt = 0
            last = -1                          # largest sector index so far (the run is sorted)
            for sg in range(sg0, sg1):
                i = _U(seg_so[sg] + j * t_s)
                hb = kt_rh[i]
                wb = kt_sw[i]
                base = kt_off[i]
                for pc in range(starts[sg], starts[sg + 1]):
                    u = _U(pc)
                    if _U(hb + pcs[u, 0]) >= _U(ih):
                        continue
                    lo, hi = _run_bytes(pcs, u, wb, iw, ceb)
                    if lo > hi:
                        continue
                    x = (base + lo) >> ssh
                    xe = (base + hi) >> ssh
                    if x > last:               # common case: append the run's sectors
                        while x <= xe:
                            o_sec[_U(nsec + cnt)] = x << ssh
                            cnt += 1
                            x += 1
                        last = xe
                    else:
                        cnt = _insert_range(o_sec, nsec, cnt, base + lo, base + hi, ssh)
                        last = o_sec[_U(nsec + cnt - 1)] >> ssh
            if cnt > 0:
                nreq, nsec = _close_request(o_first, o_count, nreq, nsec, nsec, cnt)
    return nreq, nsec


@njit(cache=True, _nrt=False, inline="always")
def _step_wgrad(prm, seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_start, pieces, piece_start, sa_lo, sa_hi,
                kt_off, kt_rh, kt_sw, kt_a, idx, ks, m0, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of wgrad k-step ks (npq = ks tile_k ..) of the CTA in slot idx (filters m0 ..);
    returns (end of A's requests, nreq, nsec). The arrays come one by one rather than as `_generate`'s
    tuples (measured: 6% less time, when calls still counted references: see `traces._generate`);
    inlined into `_generate`."""
    H = prm[_H]; W = prm[_W]; C = prm[_C]; K = prm[_K]; Q = prm[_Q]; PQ = prm[_P] * Q; NPQ = prm[_NPQ]
    TK = prm[_TK]; EB = prm[_EB]; SSH = prm[_SSH]; WARPS = prm[_THREADS] // 32
    npq = ks * TK
    n = npq // PQ
    p = (npq - n * PQ) // Q
    q = npq - n * PQ - p * Q
    for j in range(TK):                 # rows npq, npq + 1, ..: (n, p, q) counted up, q fastest
        if npq < NPQ:
            hb = p * prm[_SH] - prm[_PH]
            wb = q * prm[_SW] - prm[_PW]
            kt_a[j] = prm[_YB] + npq * K * EB
            kt_rh[j] = hb
            kt_sw[j] = wb
            kt_off[j] = prm[_XB] + ((n * H + hb) * W + wb) * C * EB
        else:
            kt_a[j] = -1
            kt_rh[j] = -_BIG
            kt_sw[j] = -_BIG
            kt_off[j] = 0
        npq += 1
        q += 1
        if q == Q:
            q = 0
            p += 1
            if p == prm[_P]:
                p = 0
                n += 1
    # A (dy, NPQK): contiguous = the CTA's filters, strided = npq
    _segment_offsets(seg_a_co, sa_lo, sa_hi, m0, K, 0, EB)
    if seg_a_so.shape[0] == WARPS:          # tile_m / vector a multiple of 32 (the default kernels)
        nreq, nsec = _emit_warp_rows(kt_a, seg_a_so, sa_lo, sa_hi, WARPS, prm[_IA], prm[_TSA], SSH, o_first,
                                     o_count, o_sec, nreq, nsec)
    else:
        nreq, nsec = _emit_segments(kt_a, seg_a_so, sa_lo, sa_hi, seg_a_start, WARPS, prm[_IA], prm[_TSA], SSH,
                                    o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B (x): contiguous = the CTA's rsc columns (pieces), strided = npq
    nreq, nsec = _emit_pieces(kt_off, kt_rh, kt_sw, seg_b_so, seg_b_start, pieces, piece_start, idx, WARPS, prm[_IB],
                              prm[_TSB], H, W, C * EB, SSH, o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec
