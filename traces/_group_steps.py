"""The k-step of grouped fprop (Numba building block; traces/KERNELS.md, "Grouped and depthwise fprop"):
CUTLASS's analytic Fprop iterators with ``GroupMode`` kSingleGroup or kMultipleGroup, nhwc, segment by
segment. `traces._generate` calls it for every k-step of a grouped layer (``prm[_GPC] > 0``)."""
from __future__ import annotations

from simcore._jit import njit

from ._emit import _emit_segments, _segment_offsets, _shift_rows
from ._layout import _C, _H, _W, _R, _S, _DH, _DW, _TM, _TN, _TK, _THREADS, _EB, _TSA, _IA, _TSB, _IB, _SSH, _CG, _KG

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from _emit.py and _layout.py. tests/test_jit_deps.py checks this digest of them:
# updating the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "cf7536368b6fafa4"


@njit(cache=True, _nrt=False)
def _step_group(prm, maps, rows, scratch, idx, ks, tn, o_first, o_count, o_sec, nreq, nsec):
    """Load requests of k-step ``ks`` of the grouped CTA in slot idx (tile column ``tn``); returns (end of
    A's requests, nreq, nsec).

    k-step ks = ((gi CB + cb) R + r) S + s (CB = ceil(C_g / TK) channel blocks per group, gi the CTA's
    gi-th group, g = tn TN / K_g + gi). A reads channels g C_g + cb TK + [0, TK) of x, valid below C (not
    below the group's end: CUTLASS's activation iterator checks c < C only); B reads w's local channels
    cb TK + [0, TK) below C_g, of the tile's filters whose tile row lies in the gi-th group (row // K_g ==
    gi; under kSingleGroup every row), filters C_g R S elements apart. ``rows[5][idx]`` (the B requests
    of the _UNI path, unused here) holds the k-step's B row addresses."""
    seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start = maps[:6]
    row_hb, row_wb, row_base, row_b, rb = rows[0], rows[1], rows[2], rows[4], rows[5][idx]
    ra_a, sa_lo, sa_hi, sb_lo, sb_hi = scratch[:5]
    C = prm[_C]; S = prm[_S]; RS = prm[_R] * S; TK = prm[_TK]; TN = prm[_TN]; EB = prm[_EB]
    CG = prm[_CG]; KG = prm[_KG]; SSH = prm[_SSH]; WARPS = prm[_THREADS] // 32
    cbs = (CG + TK - 1) // TK
    blk = ks // RS
    rs = ks - blk * RS
    gi = blk // cbs
    c0 = (blk - gi * cbs) * TK                    # the k-step's first channel inside the group
    r = rs // S
    rdh = r * prm[_DH]
    sdw = (rs - r * S) * prm[_DW]
    # A: contiguous = channels (from the group's first), strided = rows m
    _shift_rows(row_hb, row_wb, row_base, idx, prm[_TM], rdh, sdw, (rdh * prm[_W] + sdw) * C * EB, prm[_H],
                prm[_W], ra_a)
    _segment_offsets(seg_a_co, sa_lo, sa_hi, (tn * TN // KG + gi) * CG + c0, C, 0, EB)
    nreq, nsec = _emit_segments(ra_a, seg_a_so, sa_lo, sa_hi, seg_a_start, WARPS, prm[_IA], prm[_TSA], SSH,
                                o_first, o_count, o_sec, nreq, nsec)
    q1 = nreq
    # B: contiguous = the group's channels, strided = filters k; only the gi-th group's rows
    for p in range(TN):
        rb[p] = row_b[idx, p] if p // KG == gi else -1
    _segment_offsets(seg_b_co, sb_lo, sb_hi, c0, CG, rs * CG * EB, EB)
    nreq, nsec = _emit_segments(rb, seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, prm[_IB], prm[_TSB], SSH,
                                o_first, o_count, o_sec, nreq, nsec)
    return q1, nreq, nsec
