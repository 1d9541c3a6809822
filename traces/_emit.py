"""Emitting warp requests (Numba building blocks shared by every op's k-steps and stores): a request's
sectors kept sorted and distinct in the output buffer, rows of whole tile rows (`_emit_rows`), segments of
lanes (`_emit_segments`), a tile's rows shifted to a filter position (`_shift_rows`)."""
from __future__ import annotations

from simcore._jit import njit

from ._layout import _U

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _layout.py. tests/test_jit_deps.py checks this digest of it: updating
# the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "0095a7c1f4a7b4d9"


@njit(cache=True, _nrt=False, inline="always")
def _close_request(o_first, o_count, nreq, nsec, first, cnt):
    """Record request ``nreq`` as the ``cnt`` sectors from ``o_sec[first]``; returns the new
    (request count, sector count)."""
    o_first[_U(nreq)] = first
    o_count[_U(nreq)] = cnt
    return nreq + 1, nsec + cnt


@njit(cache=True, _nrt=False, inline="always")
def _emit_range(o_first, o_count, o_sec, nreq, nsec, lo_byte, hi_byte, ssh):
    """Record request ``nreq`` as the sectors covering bytes [lo_byte, hi_byte], from ``o_sec[nsec]``;
    returns the new (request count, sector count)."""
    x = lo_byte >> ssh
    n = nsec
    while x <= hi_byte >> ssh:
        o_sec[_U(n)] = x << ssh
        n += 1
        x += 1
    return _close_request(o_first, o_count, nreq, nsec, nsec, n - nsec)


@njit(cache=True, _nrt=False, inline="always")
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


@njit(cache=True, _nrt=False, inline="always")
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


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _emit_segments(ra, seg_so, seg_lo, seg_hi, seg_start, warps, iters, t_s, ssh, o_first, o_count, o_sec,
                   nreq, nsec):
    """Load requests of one operand in one k-step, segment by segment (the general case).

    ra[i]: byte address of strided row i's element 0 (-1: the row is predicated off);
    seg_lo/seg_hi[sg]: byte offsets of the first/last valid byte of segment sg (seg_hi < 0: none).
    ``seg_start`` may hold ``subs`` runs per warp (warp w's sub-access v: runs w * subs + v): a vector
    loaded by ``subs`` accesses (tensor-op alignment below 8), issued warp, iteration, then sub-access."""
    sb = 1 << ssh
    mask = -sb
    subs = (seg_start.shape[0] - 1) // warps
    for wp in range(warps):
        for j in range(iters):
            js = j * t_s
            for wv in range(wp * subs, wp * subs + subs):     # the vector's sub-accesses
                s0 = seg_start[wv]
                s1 = seg_start[wv + 1]
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


@njit(cache=True, _nrt=False, inline="always")
def _emit_warp_rows(ra, seg_so, seg_lo, seg_hi, warps, iters, t_s, ssh, o_first, o_count, o_sec, nreq, nsec):
    """`_emit_segments` for a map whose t_c is a multiple of 32 (one segment per warp: segment w is warp
    w's): request (w, j) is row seg_so[w] + j t_s of ra, bytes [seg_lo[w], seg_hi[w]] of it, one sector
    range."""
    for wp in range(warps):
        lo = seg_lo[wp]
        hi = seg_hi[wp]
        if hi < 0:
            continue
        so = seg_so[wp]
        for j in range(iters):
            a = ra[_U(so + j * t_s)]
            if a >= 0:
                nreq, nsec = _emit_range(o_first, o_count, o_sec, nreq, nsec, a + lo, a + hi, ssh)
    return nreq, nsec


@njit(cache=True, _nrt=False, inline="always")
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


@njit(cache=True, _nrt=False, inline="always")
def _shift_rows(row_hb, row_wb, row_base, idx, nrows, dr, ds, koff, ih, iw, ra):
    """ra[p] = row_base[idx, p] + koff where the tile row p shifted by (dr, ds) lies in the ih x iw image
    (0 <= row_hb + dr < ih, 0 <= row_wb + ds < iw), else -1 (predicated off)."""
    for p in range(nrows):
        h = row_hb[idx, p] + dr
        w = row_wb[idx, p] + ds
        ok = (h >= 0) & (h < ih) & (w >= 0) & (w < iw)
        ra[p] = row_base[idx, p] + koff if ok else -1
