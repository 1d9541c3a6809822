"""Exact L1 request and sector counts of the dgrad and wgrad kernels (DESIGN section 3a,
traces/KERNELS.md), in closed form (Numba): cost independent of the batch size N.

Every operand is a set of warp requests over "rows" (GEMM rows or filters, or npq) and a
contiguous column range. A thread map's warp requests are *templates* (`_templates`): with T_c
threads along the contiguous dimension, T_c | 32: one template, g = 32/T_c consecutive rows
(aligned groups) x all the tile's columns; 32 | T_c: one template per 32-lane chunk, one row x
32 V columns; otherwise one template per warp, its runs of lanes (row offset, columns) at rows
o + j T_s. Rows of a box with monotone, non-overlapping addresses and a uniform template are
counted by `_counts._rows`; every other template by `_groups.group_counts`.

* dgrad A (dy): rows m <-> dx pixels (n, h, w) (strided: the remapped (n, p', q') of one starting
  position f); at filter position (r, s) the valid rows are the box of dy rows p = p0 + p' - dp in
  [0, P) (unit stride: p0 = pad_h, dp = r dil_h; strided: p0 = (start_h + pad_h - start_r)/stride_h,
  dp = the position's index along r), address ((n P + p0 - dp + p') Q + ...) K e: fprop's A of an
  equivalent forward layer. Times tiles_n. dgrad B (w): rows k, pitch R S C e, at the CTA's
  positions; times the CTAs along M that run that position. C (dx): every dx pixel stored once per
  channel tile (`_counts_fprop._stores` over N H W rows, pitch C).
* wgrad A (dy): rows npq, pitch K e, columns the CTA's filters; times tiles_n. B (x): rows npq, columns
  rsc = tn TN + offset (not clipped to R S C), split into pieces of one filter position (r, s), each
  valid on fprop's A box of (r, s); times tiles_m. A request inside one position is a `_rows` box;
  one spanning positions (or rows that read overlapping pixels, T_c | 32) goes to `group_counts`.
  C (dw): rows k, pitch R S C.

Extra keys, like fprop's: ``valid_a_elems`` = valid A row accesses counted once per reduction block
(dgrad: (m, r, s, k-block); wgrad: npq x filter tiles), ``valid_mrs`` = valid (row, r, s) triples
(dgrad: (dx pixel, r, s) with a dy row; wgrad: (npq, r, s) whose x pixel is in the image).
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._counts import SEC, _blocks, _mult, _period, _range_1d, _rows
from ._counts_fprop import _boxes, _stores
from ._groups import (E_COLS, T_END, T_FIRST, T_G, T_O, T_UNI, X_D, X_HI, X_LO, _blocked_rows, _box_operand,
                      group_counts, kernel_templates)

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py, _counts_fprop.py and _groups.py. tests/test_jit_deps.py checks this digest
# of them: updating the digest after an edit there changes this file too, so no stale compiled
# kernel survives.
_JIT_DEPS_SHA256 = "53c19ad6dbac0798"


@njit(cache=True)
def _l1_dgrad(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, TN, TK, fpos, per_filter, tpl_a, tpl_b):
    """dgrad: [reqA, secA, reqB, secB, valid_a_elems, valid_mrs]. ``fpos`` rows: runs, start_r,
    start_s, step_r, step_s, P', Q', p0, q0 (unit stride: one row 1, 0, 0, 1, 1, H, W, ph, pw)."""
    res = np.zeros(6, np.int64)
    tiles_n = (C + TN - 1) // TN
    kblocks = _blocks(K, TK, eb)
    cblocks = _blocks(C, TN, eb)
    unit = fpos.shape[0] == 1
    KE = K * eb
    for f in range(fpos.shape[0]):
        if not fpos[f, 0]:
            continue
        r0 = fpos[f, 1]
        s0 = fpos[f, 2]
        rstep = fpos[f, 3]
        sstep = fpos[f, 4]
        PP = fpos[f, 5]
        QQ = fpos[f, 6]
        p0 = fpos[f, 7]
        q0 = fpos[f, 8]
        for r in range(r0, R, rstep):
            dp = r * dh if unit else (r - r0) // rstep
            plo, phi = _range_1d(PP, P, 1, dp - p0, 1, 0)
            for s in range(s0, S, sstep):
                dq = s * dw if unit else (s - s0) // sstep
                qlo, qhi = _range_1d(QQ, Q, 1, dq - q0, 1, 0)
                rows = N * max(0, phi - plo + 1) * max(0, qhi - qlo + 1)
                res[5] += rows
                base = ((p0 - dp) * Q + q0 - dq) * KE
                for i in range(kblocks.shape[0]):
                    k0, kv, mult = kblocks[i, 0], kblocks[i, 1], kblocks[i, 2]
                    rq, sc = _box_operand(N, PP, QQ, plo, phi, qlo, qhi, P * Q * KE, Q * KE, KE, base + k0 * eb, kv,
                                          eb, tpl_a)
                    res[0] += mult * rq * tiles_n
                    res[1] += mult * sc * tiles_n
                    res[4] += mult * rows
                rq, sc = _blocked_rows(K, R * S * C * eb, (r * S + s) * C * eb, cblocks, eb, tpl_b)
                res[2] += rq * per_filter
                res[3] += sc * per_filter
    return res


@njit(cache=True)
def _pieces(ent, k, d, a0, a1, C, S, P, Q, H, W, sh, sw, ph, pw, dh, dw, eb):
    """Append to ``ent`` (from row k) the wgrad B entries of row offset d, columns rsc in [a0, a1):
    one per filter position (r, s) the range meets, valid on fprop's A box of (r, s)."""
    a = a0
    while a < a1:
        pos = a // C
        c = a - pos * C
        e = min(a1, a + C - c)
        r = pos // S
        s = pos - r * S
        plo, phi = _range_1d(P, H, sh, ph, dh, r)
        qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
        ent[k, 0] = d
        ent[k, 1] = plo
        ent[k, 2] = phi
        ent[k, 3] = qlo
        ent[k, 4] = qhi
        ent[k, 5] = (((r * dh - ph) * W + s * dw - pw) * C + c) * eb
        ent[k, 6] = (e - a) * eb
        k += 1
        a = e
    return k


@njit(cache=True)
def _wgrad_b(N, C, H, W, S, sh, sw, ph, pw, dh, dw, P, Q, eb, TN, tiles_n, tpl):
    """wgrad B (x) of one CTA row of tiles (all tiles_n column tiles): (requests, sectors)."""
    An = H * W * C * eb
    Ap = sh * W * C * eb
    Aq = sw * C * eb
    req = 0
    sec = 0
    T = _period(TN * eb, SEC)                  # tiles whose columns start alike modulo a sector
    for t in range(tpl[0, T_FIRST]):
        e0 = tpl[t, T_FIRST]
        e1 = tpl[t, T_END]
        cap = 0
        for e in range(e0, e1):
            cap += (tpl[e, X_HI] - tpl[e, X_LO]) // C + 2
        ent = np.empty((cap, E_COLS), np.int64)
        if not tpl[t, T_UNI]:
            for tn in range(tiles_n):
                k = 0
                for e in range(e0, e1):
                    k = _pieces(ent, k, tpl[e, X_D], tn * TN + tpl[e, X_LO], tn * TN + tpl[e, X_HI], C, S, P, Q, H,
                                W, sh, sw, ph, pw, dh, dw, eb)
                rq, sc = group_counts(N, P, Q, An, Ap, Aq, ent[:k], tpl[t, T_G], tpl[t, T_O])
                req += rq
                sec += sc
            continue
        g = e1 - e0
        lo = tpl[e0, X_LO]
        span = tpl[e0, X_HI] - lo
        for pos in range((tiles_n * TN + C - 1) // C):
            # tiles tn whose range [tn TN + lo, + span) starts in position pos: inside it, or crossing
            first = pos * C
            fit_end = pos * C + C - span        # last start that stays inside the position
            k_lo = max(0, -((lo - first) // TN))
            k_fit = min(tiles_n - 1, (fit_end - lo) // TN) if fit_end >= first else k_lo - 1
            k_end = min(tiles_n - 1, (pos * C + C - 1 - lo) // TN)
            cnt = k_fit - k_lo + 1
            if cnt > 0:
                r = pos // S
                s = pos - r * S
                plo, phi = _range_1d(P, H, sh, ph, dh, r)
                qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
                base = ((r * dh - ph) * W + s * dw - pw) * C * eb
                if plo <= phi and qlo <= qhi:
                    for j in range(min(T, cnt)):
                        c = (k_lo + j) * TN + lo - first
                        rq, sc = _rows(N, P, Q, plo, phi, qlo, qhi, g, An, Ap, Aq, base + c * eb, span * eb)
                        m = _mult(cnt, T, j)
                        req += m * rq
                        sec += m * sc
            for tn in range(max(k_lo, k_fit + 1), k_end + 1):
                k = 0
                for d in range(g):
                    k = _pieces(ent, k, d, tn * TN + lo, tn * TN + lo + span, C, S, P, Q, H, W, sh, sw, ph, pw,
                                dh, dw, eb)
                rq, sc = group_counts(N, P, Q, An, Ap, Aq, ent[:k], g, 0)
                req += rq
                sec += sc
    return req, sec


@njit(cache=True)
def _l1_wgrad(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, TM, TN, tpl_a, tpl_b):
    """wgrad: [reqA, secA, reqB, secB, valid_a_elems, valid_mrs]."""
    res = np.zeros(6, np.int64)
    NPQ = N * P * Q
    tiles_m = (K + TM - 1) // TM
    tiles_n = (R * S * C + TN - 1) // TN
    rq, sc = _blocked_rows(NPQ, K * eb, 0, _blocks(K, TM, eb), eb, tpl_a)
    res[0] = rq * tiles_n
    res[1] = sc * tiles_n
    rq, sc = _wgrad_b(N, C, H, W, S, sh, sw, ph, pw, dh, dw, P, Q, eb, TN, tiles_n, tpl_b)
    res[2] = rq * tiles_m
    res[3] = sc * tiles_m
    res[4] = NPQ * tiles_m
    res[5] = _boxes(N, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw)[:, 4].sum()
    return res


def _dgrad_positions(layer, kernel):
    """Starting filter positions of dgrad (DESIGN section 3a): rows (runs, start_r, start_s, step_r,
    step_s, P', Q', p0, q0) and the CTAs along M of each."""
    (sh, sw), (ph, pw) = layer.stride, layer.pad
    H, W = layer.h, layer.w
    if (sh, sw) == (1, 1):
        return np.array([[1, 0, 0, 1, 1, H, W, ph, pw]], np.int64), -(-layer.n * H * W // kernel.tile_m)
    rows = []
    for f in range(sh * sw):
        r0, s0 = divmod(f, sw)
        h0 = abs(sh - (ph % sh - r0)) % sh      # strided_dgrad_starting_coords
        w0 = abs(sw - (pw % sw - s0)) % sw
        rows.append((int(h0 < H and w0 < W), r0, s0, sh, sw, -(-(H - h0) // sh), -(-(W - w0) // sw),
                     (h0 + ph - r0) // sh, (w0 + pw - s0) // sw))
    return np.array(rows, np.int64), -(-layer.n * -(-H // sh) * -(-W // sw) // kernel.tile_m)


def backward_counts(layer, kernel) -> dict:
    """`_counts.l1_counts` for ``kernel.op`` "dgrad" or "wgrad" (arguments already validated)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    eb = kernel.elem_bytes
    dims = (layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, sh, sw, ph, pw, dh, dw,
            layer.p, layer.q, eb)
    tpl = kernel_templates(kernel)
    if kernel.op == "dgrad":
        fpos, per_filter = _dgrad_positions(layer, kernel)
        res = _l1_dgrad(*dims, kernel.tile_n, kernel.tile_k, fpos, per_filter, *tpl)
        st = _stores(layer.n, layer.c, layer.h, layer.w, eb, kernel.tile_m, kernel.tile_n, False, 1, 32)
    else:
        res = _l1_wgrad(*dims, kernel.tile_m, kernel.tile_n, *tpl)
        st = _stores(1, layer.r * layer.s * layer.c, 1, layer.k, eb, kernel.tile_m, kernel.tile_n, False, 1, 32)
    return {"req_A": int(res[0]), "sec_A": int(res[1]), "req_B": int(res[2]), "sec_B": int(res[3]),
            "valid_a_elems": int(res[4]), "valid_mrs": int(res[5]), "req_C": int(st[0]), "sec_C": int(st[1])}
