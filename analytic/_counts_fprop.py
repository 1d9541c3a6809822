"""Exact L1 request and sector counts of DESIGN section 3's fprop kernel (nhwc and nchw) and every op's
stores, in closed form (Numba); the method is `_counts`'s module docstring and MODEL.md section 1.

Warp requests follow the thread-map templates of `_groups._templates`: whole rows (`_counts._rows`)
when T_c divides 32 or is a multiple of it, runs of lanes straddling rows (`_groups.group_counts`)
otherwise. nchw A (contiguous = output rows m, whose padding differs lane by lane) with tile_m a
multiple of 32 is one gk and 32 consecutive rows a request (`_rows`); any other tile_m puts several
gk in a request, counted lane by lane over one period of k-steps (`_nchw_a_lanes`). nchw stores
with tile_m > 32 not a multiple of 32 (a tile's last block of rows is short, so blocks are not
aligned groups) go to `group_counts` too.
"""
from __future__ import annotations

import functools

import numpy as np
from simcore._jit import njit

from traces._tensorop import alignment, store_shape

from ._counts import SEC, _blocks, _gcd, _mult, _period, _range_1d, _rows
from ._groups import E_COLS, _blocked_rows, _box_operand, group_counts, kernel_templates

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py and _groups.py. tests/test_jit_deps.py checks this digest of them: updating
# the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "8145c167d0491672"


@njit(cache=True)
def _boxes(N, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw):
    """Per filter position rs = r S + s: the box of output rows whose input pixel is in the image,
    (p_lo, p_hi, q_lo, q_hi, rows in all N images)."""
    out = np.empty((R * S, 5), np.int64)
    for r in range(R):
        plo, phi = _range_1d(P, H, sh, ph, dh, r)
        for s in range(S):
            qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
            rs = r * S + s
            out[rs, 0] = plo
            out[rs, 1] = phi
            out[rs, 2] = qlo
            out[rs, 3] = qhi
            out[rs, 4] = N * max(0, phi - plo + 1) * max(0, qhi - qlo + 1)
    return out


@njit(cache=True)
def _a_nhwc(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, blocks, scale, tpl_a, res):
    """nhwc A over every filter position's box of rows and every reduction block class of ``blocks``
    (multiplicity times ``scale``): adds requests and sectors to res[0], res[1], valid element-rows
    (unscaled) to res[4] and valid (m, r, s) to res[5]."""
    boxes = _boxes(N, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw)
    Ceb = C * eb
    for rs in range(R * S):
        r = rs // S
        plo, phi, qlo, qhi, cnt = boxes[rs, 0], boxes[rs, 1], boxes[rs, 2], boxes[rs, 3], boxes[rs, 4]
        res[5] += cnt
        base = ((r * dh - ph) * W + ((rs - r * S) * dw - pw)) * Ceb
        for bi in range(blocks.shape[0]):
            rq, sc = _box_operand(N, P, Q, plo, phi, qlo, qhi, H * W * Ceb, sh * W * Ceb, sw * Ceb,
                                  base + blocks[bi, 0] * eb, blocks[bi, 1], eb, tpl_a)
            res[0] += blocks[bi, 2] * rq * scale
            res[1] += blocks[bi, 2] * sc * scale
            res[4] += blocks[bi, 2] * cnt


@njit(cache=True)
def _l1_nhwc(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, tile_m, tile_n, tile_k,
             tpl_a, tpl_b):
    """nhwc: [reqA, secA, reqB, secB, valid A element-rows, valid (m, r, s) count]."""
    res = np.zeros(6, np.int64)
    tiles_m = (N * P * Q + tile_m - 1) // tile_m
    tiles_n = (K + tile_n - 1) // tile_n
    blocks = _blocks(C, tile_k, eb)
    # A: rows m of each filter position's box, once per column tile
    _a_nhwc(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, blocks, tiles_n, tpl_a, res)
    Ceb = C * eb
    for rs in range(R * S):
        # B: rows = filters k
        rq, sc = _blocked_rows(K, R * S * Ceb, rs * Ceb, blocks, eb, tpl_b)
        res[2] += rq * tiles_m
        res[3] += sc * tiles_m
    return res


@njit(cache=True)
def _nchw_a_lanes(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, tile_m, tile_k, lane_m, lane_g, t_s, iters):
    """nchw A of one CTA column of tiles when a request holds several gk (tile_m not a multiple of 32):
    every request (k-step, warp, iteration) lane by lane as a template over the rows m (groups: the
    tiles); k-steps whose gk (filter position and channel residue) repeat are counted once."""
    RS = R * S
    GK = C * RS
    HWe = H * W * eb
    Tc = _period(HWe, SEC)                     # channels whose planes start alike modulo a sector
    period = RS * Tc // _gcd(tile_k, RS * Tc)  # k-steps after which the gk pattern repeats
    full = GK // tile_k                        # k-steps with every gk valid
    nks = (GK + tile_k - 1) // tile_k
    ent = np.empty((32, E_COLS), np.int64)
    req = 0
    sec = 0
    nrep = min(period, full)
    for i in range(nrep + nks - full):         # one k-step per class of the full ones, then the last
        if i < nrep:
            ks = i
            mult = _mult(full, period, i)
        else:
            ks = full + i - nrep
            mult = 1
        for wp in range(lane_m.shape[0] // 32):
            for j in range(iters):
                k = 0
                for t in range(32 * wp, 32 * wp + 32):
                    gk = ks * tile_k + lane_g[t] + j * t_s
                    if gk >= GK:
                        continue
                    c = gk // RS
                    r = (gk - c * RS) // S
                    s = gk - c * RS - r * S
                    plo, phi = _range_1d(P, H, sh, ph, dh, r)
                    qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
                    ent[k, 0] = lane_m[t]
                    ent[k, 1] = plo
                    ent[k, 2] = phi
                    ent[k, 3] = qlo
                    ent[k, 4] = qhi
                    ent[k, 5] = c * HWe + ((r * dh - ph) * W + s * dw - pw) * eb
                    ent[k, 6] = eb
                    k += 1
                rq, sc = group_counts(N, P, Q, C * HWe, sh * W * eb, sw * eb, ent[:k], tile_m, 0)
                req += mult * rq
                sec += mult * sc
    return req, sec


@njit(cache=True)
def _l1_nchw(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, tile_m, tile_n, tile_k,
             lane_m, lane_g, t_s, iters, tpl_b):
    """nchw: [reqA, secA, reqB, secB, valid A element-rows, valid (m, r, s) count]."""
    res = np.zeros(6, np.int64)
    tiles_m = (N * P * Q + tile_m - 1) // tile_m
    tiles_n = (K + tile_n - 1) // tile_n
    HW = H * W
    Tc = _period(HW * eb, SEC)
    boxes = _boxes(N, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw)
    for rs in range(R * S):
        r = rs // S
        plo, phi, qlo, qhi, cnt = boxes[rs, 0], boxes[rs, 1], boxes[rs, 2], boxes[rs, 3], boxes[rs, 4]
        res[5] += cnt
        res[4] += C * cnt
        if tile_m % 32:
            continue
        # A: a request is one gk (c, r, s) and 32 consecutive rows m
        base = ((r * dh - ph) * W + ((rs - r * S) * dw - pw)) * eb
        for ic in range(min(Tc, C)):
            mult = _mult(C, Tc, ic)
            rq, sc = _rows(N, P, Q, plo, phi, qlo, qhi, 32, C * HW * eb, sh * W * eb, sw * eb,
                           base + ic * HW * eb, eb)
            res[0] += mult * rq * tiles_n
            res[1] += mult * sc * tiles_n
    if tile_m % 32:
        rq, sc = _nchw_a_lanes(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, tile_m, tile_k, lane_m, lane_g,
                               t_s, iters)
        res[0] = rq * tiles_n
        res[1] = sc * tiles_n
    # B: KCRS, contiguous gk (tile_k), strided k
    rq, sc = _blocked_rows(K, C * R * S * eb, 0, _blocks(C * R * S, tile_k, eb), eb, tpl_b)
    res[2] = rq * tiles_m
    res[3] = sc * tiles_m
    return res


@njit(cache=True)
def _stores(N, K, P, Q, eb, tile_m, tile_n, nchw, srows, scols):
    """Output store [requests, sectors]: M = N P Q rows, K columns (pitch K; nchw: planes of P Q); nhwc:
    a request is ``srows`` aligned rows x ``scols`` columns (`traces._tensorop.store_shape`)."""
    res = np.zeros(2, np.int64)
    M = N * P * Q
    PQ = P * Q
    if not nchw:
        tiles_n = (K + tile_n - 1) // tile_n
        ngroups = (tile_n + scols - 1) // scols
        for tn in range(tiles_n):
            for j in range(ngroups):
                k0 = tn * tile_n + scols * j
                if k0 >= K:
                    continue
                kend = min(tn * tile_n + min(scols * (j + 1), tile_n), K)
                rq, sc = _rows(1, 1, M, 0, 0, 0, M - 1, srows, 0, 0, K * eb, k0 * eb, (kend - k0) * eb)
                res[0] += rq
                res[1] += sc
        return res
    # nchw: per filter k, blocks of 32 rows m of a tile (of tile_m rows when tile_m < 32)
    Tk = _period(PQ * eb, SEC)
    blocks = (tile_m + 31) // 32
    ent = np.empty((32, E_COLS), np.int64)
    for ik in range(min(Tk, K)):
        mult = _mult(K, Tk, ik)
        if tile_m % 32 == 0 or tile_m < 32:        # blocks are aligned groups of rows
            rq, sc = _rows(N, 1, PQ, 0, 0, 0, PQ - 1, min(32, tile_m), K * PQ * eb, 0, eb, ik * PQ * eb, eb)
            res[0] += mult * rq
            res[1] += mult * sc
            continue
        for j in range(blocks):
            rows = min(32, tile_m - 32 * j)
            for d in range(rows):
                ent[d, 0] = d
                ent[d, 1] = 0
                ent[d, 2] = 0
                ent[d, 3] = 0
                ent[d, 4] = PQ - 1
                ent[d, 5] = ik * PQ * eb
                ent[d, 6] = eb
            rq, sc = group_counts(N, 1, PQ, K * PQ * eb, 0, eb, ent[:rows], tile_m, 32 * j)
            res[0] += mult * rq
            res[1] += mult * sc
    return res


@functools.lru_cache(maxsize=64)
def _nchw_lanes(tmap, threads: int) -> tuple:
    """nchw A: each thread's row (contiguous offset) and gk (strided offset), read-only."""
    lanes = np.arange(threads, dtype=np.int64)
    out = (lanes % tmap.t_c, lanes // tmap.t_c)
    for a in out:
        a.setflags(write=False)
    return out


def fprop_counts(layer, kernel) -> dict:
    """`_counts.l1_counts` for ``kernel.op`` "fprop" (arguments already validated)."""
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    P, Q = layer.p, layer.q
    eb = kernel.elem_bytes
    args = (layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, sh, sw, ph, pw, dh, dw,
            P, Q, eb, kernel.tile_m, kernel.tile_n, kernel.tile_k)
    tpl_a, tpl_b = kernel_templates(kernel, alignment(kernel, layer))
    if kernel.layout == "nhwc":
        res = _l1_nhwc(*args, tpl_a, tpl_b)
    else:
        tma = kernel.thread_map_a
        res = _l1_nchw(*args, *_nchw_lanes(tma, kernel.threads), tma.t_s, tma.iterations, tpl_b)
    st = _stores(layer.n, layer.k, P, Q, eb, kernel.tile_m, kernel.tile_n, kernel.layout == "nchw",
                 *store_shape(kernel))
    return {"req_A": int(res[0]), "sec_A": int(res[1]), "req_B": int(res[2]), "sec_B": int(res[3]),
            "valid_a_elems": int(res[4]), "valid_mrs": int(res[5]),
            "req_C": int(st[0]), "sec_C": int(st[1])}
