"""The request generator's building blocks (Numba): emitting one operand's requests, starting a CTA,
refilling the SMs, one k-step of the general paths, a CTA's stores. `traces._generate` drives them."""
from __future__ import annotations

import numba

from ._layout import (
    _BIG, _U, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _M, _GK, _TM, _TN, _TK,
    _THREADS, _NCHW, _EB, _TSA, _IA, _TSB, _IB, _SMS, _SLOTS, _TILES_M, _TILES_N, _SWZ, _NBLOCKS, _XB,
    _WB, _YB, _SSH, _UNI, _RPW)

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _layout.py. tests/test_jit_deps.py checks this digest of it: updating
# the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "c5a9679211f30b50"


# ---- compiled kernel ----------------------------------------------------------------------------
# `_generate`'s arguments, tuples of arrays (see `_Generator`):
#   maps:    seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start, thr_a, perm_a, perm_b
#   sched:   state, slot_cta, slot_tm, slot_tn, slot_step
#   rows:    per slot: row_hb, row_wb, row_base (A rows, in perm_a order), row_y (store rows),
#            row_b (B rows, in perm_b order), b_rows, b_reqs, b_num (_UNI: B's compacted requests)
#   scratch: ra_a, sa_lo, sa_hi, sb_lo, sb_hi, kt_off, kt_rh, kt_sw
#   out:     the 9 RequestChunk buffers (lean: round, cta and kstep of length 0, left unwritten)

@numba.njit(cache=True, inline="always")
def _close_request(o_first, o_count, nreq, nsec, first, cnt):
    """Record request ``nreq`` as the ``cnt`` sectors from ``o_sec[first]``; returns the new
    (request count, sector count)."""
    o_first[_U(nreq)] = first
    o_count[_U(nreq)] = cnt
    return nreq + 1, nsec + cnt


@numba.njit(cache=True, inline="always")
def _insert(sectors, first, cnt, x):
    """Insert sector address x into the sorted, distinct run sectors[first:first+cnt]; return cnt."""
    end = first + cnt
    if cnt == 0 or sectors[end - 1] < x:
        sectors[end] = x
        return cnt + 1
    if sectors[end - 1] == x:
        return cnt
    i = end - 1
    while i >= first and sectors[i] > x:
        i -= 1
    if i >= first and sectors[i] == x:
        return cnt
    j = end
    while j > i + 1:
        sectors[j] = sectors[j - 1]
        j -= 1
    sectors[i + 1] = x
    return cnt + 1


@numba.njit(cache=True, inline="always")
def _insert_range(sectors, first, cnt, lo_byte, hi_byte, ssh):
    """Insert the sectors covering bytes [lo_byte, hi_byte] (inclusive)."""
    s0 = lo_byte >> ssh
    s1 = hi_byte >> ssh
    if cnt == 0 or sectors[first + cnt - 1] < s0 << ssh:
        x = s0
        while x <= s1:
            sectors[first + cnt] = x << ssh
            cnt += 1
            x += 1
        return cnt
    x = s0
    while x <= s1:
        cnt = _insert(sectors, first, cnt, x << ssh)
        x += 1
    return cnt


@numba.njit(cache=True)
def _emit_rows(ra, row, nrows, rpw, lo, hi, ssh, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of one operand in one k-step under _UNI without _ALN: request q is rows q*rpw ..
    q*rpw+rpw-1 of ra[row]; valid row i (ra[row, i] >= 0) covers bytes ra[row, i] + [lo, hi]. Valid
    rows' addresses increase by more than hi - lo (A: m order is (n, h, w) order; B: filters), so
    the sectors come sorted: only a sector shared with the previous row is skipped."""
    sb = 1 << ssh
    mask = -sb
    for q in range(nrows // rpw):
        n = nsec
        last = -1
        for r in range(_U(q * rpw), _U(q * rpw + rpw)):
            a = ra[_U(row), r]
            if a < 0:
                continue
            x = (a + lo) & mask
            xe = (a + hi) & mask
            if x <= last:
                x = last + sb
            while x <= xe:
                o_sec[_U(n)] = x
                n += 1
                x += sb
            last = xe
        if n > nsec:
            nreq, nsec = _close_request(o_first, o_count, nreq, nsec, nsec, n - nsec)
    return nreq, nsec


@numba.njit(cache=True)
def _emit_segments(ra, seg_so, seg_lo, seg_hi, seg_start, warps, iters, t_s, ssh, o_first, o_count, o_sec,
                   nreq, nsec):
    """Load requests of one operand in one k-step, segment by segment (the general case).

    ra[i]: byte address of strided row i's element 0 (-1: the row is predicated off);
    seg_lo/seg_hi[sg]: byte offsets of the first/last valid byte of segment sg (seg_hi < 0: none)."""
    sb = 1 << ssh
    mask = -sb
    for wp in range(warps):
        s0 = seg_start[wp]
        s1 = seg_start[wp + 1]
        for j in range(iters):
            js = j * t_s
            first = nsec
            cnt = 0
            last = -1                      # largest sector so far (the run is sorted)
            for sg in range(s0, s1):
                hi = seg_hi[sg]
                if hi < 0:
                    continue
                a = ra[seg_so[sg] + js]
                if a < 0:
                    continue
                x = (a + seg_lo[sg]) & mask
                xe = (a + hi) & mask
                if x > last:               # common case: append the segment's sectors
                    o_sec[first + cnt] = x
                    cnt += 1
                    while x < xe:
                        x += sb
                        o_sec[first + cnt] = x
                        cnt += 1
                    last = xe
                else:
                    cnt = _insert_range(o_sec, first, cnt, a + seg_lo[sg], a + hi, ssh)
                    last = o_sec[first + cnt - 1]
            if cnt > 0:
                nreq, nsec = _close_request(o_first, o_count, nreq, nsec, first, cnt)
    return nreq, nsec


@numba.njit(cache=True, inline="always")
def _segment_offsets(seg_co, seg_lo, seg_hi, base, limit, extra, eb):
    """Byte offsets of each segment's valid part: contiguous index base+co in [base+co_lo, limit),
    plus ``extra`` bytes."""
    for sg in range(seg_co.shape[0]):
        lo = base + seg_co[sg, 0]
        hi = base + seg_co[sg, 1]
        if hi > limit:
            hi = limit
        if lo < hi:
            seg_lo[sg] = lo * eb + extra
            seg_hi[sg] = hi * eb - 1 + extra
        else:
            seg_lo[sg] = 0
            seg_hi[sg] = -1


@numba.njit(cache=True)
def _start_cta(prm, maps, rows, idx, tm, tn):
    """Per-row information of a new CTA's tile in slot idx (once per CTA): A rows' image offset and
    h/w origins (an invalid row m >= M gets -_BIG origins, so every padding test rejects it), store
    rows, B rows' addresses; under _UNI in request order, plus B's compacted requests."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; K = prm[_K]; R = prm[_R]; S = prm[_S]
    TM = prm[_TM]; TN = prm[_TN]; EB = prm[_EB]; NCHW = prm[_NCHW]; RPW = prm[_RPW]
    P = prm[_P]; Q = prm[_Q]; M = prm[_M]; GK = prm[_GK]
    perm_a, perm_b = maps[7], maps[8]
    row_hb, row_wb, row_base, row_y, row_b, b_rows, b_reqs, b_num = rows
    PQ = P * Q
    kstride = (GK if NCHW else R * S * C) * EB
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
                row_y[idx, i] = m * K
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


@numba.njit(cache=True)
def _refill(prm, maps, sched, rows, nxt):
    """One dispatch phase: passes over the SMs, each SM with a free slot takes the next block, until a
    pass takes none or the blocks run out. Returns the next block."""
    SMS = prm[_SMS]; SLOTS = prm[_SLOTS]; NBLOCKS = prm[_NBLOCKS]; SWZ = prm[_SWZ]
    TILES_M = prm[_TILES_M]; TILES_N = prm[_TILES_N]
    slot_cta, slot_tm, slot_tn, slot_step = sched[1], sched[2], sched[3], sched[4]
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
            # next block whose tile lies inside the grid
            tm = 0
            tn = 0
            while nxt < NBLOCKS:
                bx = nxt % grid_x
                by = nxt // grid_x
                tm = bx >> SWZ
                tn = (by << SWZ) + (bx & swz_mask)
                if tm < TILES_M and tn < TILES_N:
                    break
                nxt += 1
            if nxt >= NBLOCKS:
                break
            idx = sm * SLOTS + free
            slot_cta[idx] = nxt
            slot_tm[idx] = tm
            slot_tn[idx] = tn
            slot_step[idx] = 0
            nxt += 1
            took = True
            _start_cta(prm, maps, rows, idx, tm, tn)
        if not took or nxt >= NBLOCKS:
            return nxt


@numba.njit(cache=True)
def _step_rows(prm, row_hb, row_wb, row_base, row_b, ra_a, idx, ks, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of an nhwc k-step under _UNI but not _ALN; returns (end of A's requests, nreq,
    nsec)."""
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
    koff = (rdh * W + sdw) * C * EB
    for p in range(TM):
        h = row_hb[idx, p] + rdh
        w = row_wb[idx, p] + sdw
        ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
        ra_a[p] = row_base[idx, p] + koff if ok else -1
    nreq, nsec = _emit_rows(ra_a.reshape(1, TM), 0, TM, RPW, lo, hi, SSH, o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B: contiguous = channels, strided = filters k
    ext = rs * C * EB
    nreq, nsec = _emit_rows(row_b, idx, prm[_TN], RPW, lo + ext, hi + ext, SSH, o_first, o_count, o_sec, nreq,
                            nsec)
    return q1, nreq, nsec


@numba.njit(cache=True)
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
    # A: contiguous = channels, strided = rows m
    koff = (rdh * W + sdw) * C * EB          # row bases may be negative: fold it here
    for i in range(TM):
        h = row_hb[idx, i] + rdh
        w = row_wb[idx, i] + sdw
        ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
        ra_a[i] = row_base[idx, i] + koff if ok else -1
    _segment_offsets(seg_a_co, sa_lo, sa_hi, c0, C, 0, EB)
    nreq, nsec = _emit_segments(ra_a, seg_a_so, sa_lo, sa_hi, seg_a_start, WARPS, prm[_IA], prm[_TSA], SSH,
                                o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B: contiguous = channels, strided = filters k
    _segment_offsets(seg_b_co, sb_lo, sb_hi, c0, C, rs * C * EB, EB)
    nreq, nsec = _emit_segments(row_b[idx], seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, prm[_IB], prm[_TSB],
                                SSH, o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def _stores(prm, row_y, idx, n0, o_first, o_count, o_sec, nreq, nsec):
    """Store requests of the CTA's tile (rows y of slot idx, filters n0 ..); returns (nreq, nsec)."""
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
    for mi in range(TM):
        yo = row_y[idx, mi]
        if yo < 0:
            break
        for g in range((TN + 31) // 32):
            klo = n0 + g * 32
            if klo >= K:
                break
            khi = min(klo + 32, n0 + TN, K)
            cnt = _insert_range(o_sec, nsec, 0, YB + (yo + klo) * EB, YB + (yo + khi) * EB - 1, SSH)
            nreq, nsec = _close_request(o_first, o_count, nreq, nsec, nsec, cnt)
    return nreq, nsec
