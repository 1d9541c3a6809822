"""Naive pure-Python reference of the SM80 tensor-op Fprop stream (DESIGN section 3a, "Tensor-op Fprop,
SM80 style"; traces/KERNELS.md), lane by lane, written from the text with plain loops.

* Thread map ``PitchLinearWarpRakedThreadMap<(TK, E_s), T, (TK/8, 32/(TK/8)), 8>``: thread t (warp
  w = t // 32, lane l = t % 32) accesses contiguous offset (l mod (TK/8))·8 and strided offsets
  w·rows·It + l // (TK/8) + rows·i, rows = 32 / (TK/8) rows per warp access, It = E_s / rows / W.
* Alignment: a = the largest of 8, 4, 2, 1 dividing C; each 8-element vector is loaded by 8/a accesses
  of a elements (2a bytes), issued warp, i, then access v; a warp request is one (w, i, v).
* Kinds: A cp.async.ca (3); B cp.async.cg (2) iff its access is 16 bytes, else cp.async.ca (3).
* Stores: tile rows ascending, 256 / TN consecutive rows per request, columns 0 .. TN-1; an element is
  stored iff m < M and k < K.
"""
from __future__ import annotations

from tests.naive_stream import make_request, naive_dims, naive_grid, naive_schedule, naive_tensor_bases

__all__ = ["naive_tensorop_stream", "naive_alignment"]


def naive_alignment(c):
    for a in (8, 4, 2, 1):
        if c % a == 0:
            return a


def naive_tensorop_stream(layer, gpu, kernel, elements=False):
    N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q = naive_dims(layer)
    M = N * P * Q
    eb = kernel.elem_bytes
    TM, TN, TK, T = kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.threads
    sector = gpu.sector_bytes
    x_base, w_base, y_base = naive_tensor_bases(layer, kernel)
    a = naive_alignment(C)
    lanes_c = TK // 8                     # threads of a warp along the contiguous extent
    rows = 32 // lanes_c                  # rows of one warp access
    warps = T // 32

    def requests(extent, element):
        """One operand's requests in a k-step; element(contiguous, strided) -> (address, coords) or None."""
        its = extent // rows // warps
        out = []
        for w in range(warps):
            for i in range(its):
                for v in range(8 // a):
                    lanes = []
                    for lane in range(32):
                        cont = (lane % lanes_c) * 8 + v * a
                        strd = w * rows * its + lane // lanes_c + rows * i
                        found = [element(cont + e, strd) for e in range(a)]
                        if all(f is not None for f in found):
                            for e in range(a):
                                assert found[e][0] == found[0][0] + e * eb
                            lanes.append((found[0][0], a * eb, [f[1] for f in found]))
                        else:
                            assert all(f is None for f in found), "access partly valid"
                    if lanes:
                        out.append(make_request(lanes, sector, eb))
        return out

    def a_element(m, c, r, s):
        if m >= M or c >= C:
            return None
        n, p, q = m // (P * Q), (m // Q) % P, m % Q
        h, w = p * sh - ph + r * dh, q * sw - pw + s * dw
        if not (0 <= h < H and 0 <= w < W):
            return None
        return x_base + (((n * H + h) * W + w) * C + c) * eb, ("A", m, c, r, s)

    def b_element(k, c, r, s):
        if k >= K or c >= C:
            return None
        return w_base + (((k * R + r) * S + s) * C + c) * eb, ("B", k, c, r, s)

    positions = [(c0, r, s) for c0 in range(0, C, TK) for r in range(R) for s in range(S)]

    def loads_of(cta_m, cta_n, ks):
        c0, r, s = positions[ks]
        reqs_a = requests(TM, lambda cont, strd: a_element(cta_m * TM + strd, c0 + cont, r, s))
        reqs_b = requests(TN, lambda cont, strd: b_element(cta_n * TN + strd, c0 + cont, r, s))
        return [(0, q) for q in reqs_a] + [(1, q) for q in reqs_b]

    def stores_of(cta_m, cta_n):
        out = []
        per = 256 // TN
        for row0 in range(0, TM, per):
            lanes = []
            for row in range(row0, row0 + per):
                m = cta_m * TM + row
                for col in range(TN):
                    k = cta_n * TN + col
                    if m < M and k < K:
                        lanes.append((y_base + (m * K + k) * eb, eb, [("C", m, k)]))
            if lanes:
                out.append(make_request(lanes, sector, eb))
        return out

    kinds = (3, 2 if a * eb == 16 else 3)
    blocks = naive_grid(-(-M // TM), -(-K // TN), kernel.swizzle_log)
    return naive_schedule(blocks, gpu, kernel, lambda tm, tn: len(positions), loads_of, stores_of, elements, kinds)
