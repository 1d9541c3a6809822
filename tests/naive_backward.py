"""Naive pure-Python reference of the dgrad and wgrad request streams (DESIGN section 3a), lane by lane.

Straight from the DESIGN text with plain loops, sharing the thread maps, the epilogue's stores and the
scheduler with `tests/naive_stream.py`. Tensors: x (N,H,W,C) at the x base, w (K,R,S,C) at the w base,
dy (N,P,Q,K) at the y base; dgrad writes dx at the x base, wgrad dw at the w base.

Element coordinates (``elements=True``): dgrad ``("A", (n, h, w), k, r, s)`` (dy read for dx pixel
(n, h, w) at filter tap (k, r, s)), ``("B", k, r, s, c)``, ``("C", (n, h, w), c)``; wgrad
``("A", npq, k)``, ``("B", npq, rsc)`` (rsc may reach past R S C), ``("C", k, rsc)``.
"""
from __future__ import annotations

from tests.naive_stream import (
    epilogue_stores, naive_dims, naive_grid, naive_schedule, naive_tensor_bases, operand_requests, thread_map)

__all__ = ["naive_backward_stream"]


def _ceil_div(a, b):
    return -(-a // b)


def naive_backward_stream(layer, gpu, kernel, elements=False):
    N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q = naive_dims(layer)
    eb, V, sector = kernel.elem_bytes, kernel.vector, gpu.sector_bytes
    TM, TN, TK, T = kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.threads
    x_base, w_base, y_base = naive_tensor_bases(layer, kernel)

    def x_addr(n, h, w, c):
        return x_base + (((n * H + h) * W + w) * C + c) * eb

    def w_addr(k, r, s, c):
        return w_base + (((k * R + r) * S + s) * C + c) * eb

    def dy_addr(n, p, q, k):
        return y_base + (((n * P + p) * Q + q) * K + k) * eb

    if kernel.op == "dgrad":
        map_a = thread_map(TK, TM, T, V)       # contiguous k, strided GEMM row
        map_b = thread_map(TN, TK, T, V)       # contiguous c, strided k
        strided = (sh, sw) != (1, 1)
        assert not (strided and (dh, dw) != (1, 1))
        if strided:
            per_filter = _ceil_div(N * _ceil_div(H, sh) * _ceil_div(W, sw), TM)
            tiles_m = per_filter * sh * sw
        else:
            per_filter = tiles_m = _ceil_div(N * H * W, TM)
        tiles_n = _ceil_div(C, TN)

        def start(tm):
            """start_r, start_s, start_h, start_w of M tile tm (unit stride: all 0)."""
            if not strided:
                return 0, 0, 0, 0
            f = tm // per_filter
            start_r, start_s = f // sw, f % sw
            start_h = abs(sh - (ph % sh - start_r)) % sh
            start_w = abs(sw - (pw % sw - start_s)) % sw
            return start_r, start_s, start_h, start_w

        def runs(tm):
            _, _, start_h, start_w = start(tm)
            return start_h < H and start_w < W

        def positions(tm):
            """The CTA's k-steps: (k0, r, s) in order."""
            start_r, start_s, _, _ = start(tm)
            step_h, step_w = (sh, sw) if strided else (1, 1)
            out = []
            for k0 in range(0, K, TK):
                for r in range(start_r, R, step_h):
                    for s in range(start_s, S, step_w):
                        out.append((k0, r, s))
            return out

        def pixel(tm, row):
            """The dx pixel (n, h, w) of tile row ``row`` of M tile tm, or None past the image."""
            if not strided:
                m = tm * TM + row
                n, h, w = m // (H * W), (m // W) % H, m % W
            else:
                _, _, start_h, start_w = start(tm)
                Pp = _ceil_div(H - start_h, sh)
                Qp = _ceil_div(W - start_w, sw)
                m_loc = (tm * TM + row) % (per_filter * TM)
                n = m_loc // (Pp * Qp)
                p2 = (m_loc % (Pp * Qp)) // Qp
                q2 = m_loc % Qp
                h, w = start_h + p2 * sh, start_w + q2 * sw
            return (n, h, w) if n < N else None

        def loads_of(tm, tn, ks):
            k0, r, s = positions(tm)[ks]

            def elem_a(cont, strd):
                pix = pixel(tm, strd)
                k = k0 + cont
                if pix is None or k >= K:
                    return None
                n, h, w = pix
                num_p, num_q = h + ph - r * dh, w + pw - s * dw
                if strided:
                    assert num_p % sh == 0 and num_q % sw == 0, "strided dgrad: inexact division"
                p, q = num_p // sh, num_q // sw
                if not (0 <= p < P and 0 <= q < Q):
                    return None
                return dy_addr(n, p, q, k), ("A", pix, k, r, s)

            def elem_b(cont, strd):
                c, k = tn * TN + cont, k0 + strd
                return (w_addr(k, r, s, c), ("B", k, r, s, c)) if k < K and c < C else None
            return ([(0, req) for req in operand_requests(map_a, T, V, elem_a, sector, eb)]
                    + [(1, req) for req in operand_requests(map_b, T, V, elem_b, sector, eb)])

        def stores_of(tm, tn):
            def element(row, col):
                pix, c = pixel(tm, row), tn * TN + col
                if pix is None or c >= C:
                    return None
                return x_addr(*pix, c), ("C", pix, c)
            return epilogue_stores(kernel, element, sector)

        def ksteps_of(tm, tn):
            return len(positions(tm))
    else:
        assert kernel.op == "wgrad"
        map_a = thread_map(TM, TK, T, V)       # contiguous k, strided npq
        map_b = thread_map(TN, TK, T, V)       # contiguous rsc, strided npq
        NPQ, RSC = N * P * Q, R * S * C
        tiles_m, tiles_n = _ceil_div(K, TM), _ceil_div(RSC, TN)

        def npq_split(npq):
            return npq // (P * Q), (npq % (P * Q)) // Q, npq % Q

        def loads_of(tm, tn, ks):
            def elem_a(cont, strd):
                npq, k = ks * TK + strd, tm * TM + cont
                n, p, q = npq_split(npq)
                return (dy_addr(n, p, q, k), ("A", npq, k)) if n < N and k < K else None

            def elem_b(cont, strd):
                npq, rsc = ks * TK + strd, tn * TN + cont       # no check of rsc < R S C
                n, p, q = npq_split(npq)
                r, s, c = rsc // (S * C), (rsc % (S * C)) // C, rsc % C
                h, w = p * sh - ph + r * dh, q * sw - pw + s * dw
                if n < N and 0 <= h < H and 0 <= w < W:
                    return x_addr(n, h, w, c), ("B", npq, rsc)
                return None
            return ([(0, req) for req in operand_requests(map_a, T, V, elem_a, sector, eb)]
                    + [(1, req) for req in operand_requests(map_b, T, V, elem_b, sector, eb)])

        def stores_of(tm, tn):
            def element(row, col):
                k, rsc = tm * TM + row, tn * TN + col
                return (w_base + (k * RSC + rsc) * eb, ("C", k, rsc)) if k < K and rsc < RSC else None
            return epilogue_stores(kernel, element, sector)

        def runs(tm):
            return True

        def ksteps_of(tm, tn):
            return _ceil_div(NPQ, TK)

    blocks = [b for b in naive_grid(tiles_m, tiles_n, kernel.swizzle_log) if runs(b[1])]
    return naive_schedule(blocks, gpu, kernel, ksteps_of, loads_of, stores_of, elements)
