"""Naive pure-Python reference of the request stream (DESIGN sections 3 and 3a), lane by lane.

Written straight from the DESIGN text with plain loops and no cleverness, to check
`traces.stream` request by request. Only for small layers. This file has fprop and the pieces every op
shares (thread maps, requests from lanes, the epilogue's stores, the grid and the scheduler);
`tests/naive_backward.py` has dgrad and wgrad.

`naive_stream(layer, gpu, kernel)` returns a list of requests
``(round, sm, cta, operand, kind, kstep, sectors)`` (kind: 0 load, 1 store; tensor-op kernels:
`tests/naive_tensorop.py`) with ``sectors`` a tuple of ascending byte
addresses; with ``elements=True`` each request gets an eighth field: the list of its valid lanes as
``(byte_address, coords)`` where coords is ``("A", m, c, r, s)``, ``("B", k, c, r, s)`` or
``("C", m, k)`` (one entry per element: a vector lane gives V entries, addresses elem_bytes apart).
"""
from __future__ import annotations

from tests.naive_epilogue import epilogue_requests

__all__ = ["naive_stream", "naive_tensor_bases", "naive_dims", "naive_schedule", "naive_grid",
           "operand_requests", "epilogue_stores", "thread_map"]


def _ceil_div(a, b):
    return -(-a // b)


def naive_dims(layer):
    """(N, C, H, W, K, R, S, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, P, Q), P and Q from DESIGN's
    formula."""
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    return N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q


def naive_tensor_bases(layer, kernel):
    eb = kernel.elem_bytes
    x_bytes = layer.n * layer.c * layer.h * layer.w * eb
    w_bytes = layer.k * (layer.c // layer.groups) * layer.r * layer.s * eb
    w_base = _ceil_div(x_bytes, 256) * 256
    y_base = _ceil_div(w_base + w_bytes, 256) * 256
    return 0, w_base, y_base


def thread_map(contiguous, strided, threads, vector):
    t_c = contiguous // vector
    t_s = threads // t_c
    iterations = strided // t_s
    return t_c, t_s, iterations


def make_request(lanes, sector, eb):
    """lanes: list of (byte address, bytes, coords list) for valid lanes; returns sectors + elements."""
    secs = set()
    elems = []
    for addr, nbytes, coords in lanes:
        for b in range(addr, addr + nbytes):
            secs.add(b // sector * sector)
        for v, crd in enumerate(coords):
            elems.append((addr + v * eb, crd))
    return tuple(sorted(secs)), elems


def operand_requests(tmap, threads, vector, element, sector, eb):
    """The warp requests of one operand in one k-step, in issue order (warp 0 j = 0.., warp 1 ..).
    ``element(contiguous, strided)`` gives (byte address, coords) of one element or None if it is
    predicated off."""
    t_c, t_s, iters = tmap
    out = []
    for warp in range(threads // 32):
        for j in range(iters):
            lanes = []
            for lane in range(32):
                t = warp * 32 + lane
                cont = (t % t_c) * vector
                strd = t // t_c + j * t_s
                found = [element(cont + v, strd) for v in range(vector)]
                valid = [x is not None for x in found]
                assert all(valid) or not any(valid), "vector partly valid"
                if all(valid):
                    for v in range(1, vector):
                        assert found[v][0] == found[0][0] + v * eb
                    lanes.append((found[0][0], vector * eb, [x[1] for x in found]))
            if lanes:
                out.append(make_request(lanes, sector, eb))
    return out


def epilogue_stores(kernel, element, sector):
    """The store requests of one CTA in the epilogue's order; ``element(tile_row, tile_col)`` gives
    (byte address, coords) of a stored element or None (row or column out of range)."""
    out = []
    for lanes in epilogue_requests(kernel):
        valid = []
        for row, col in lanes:
            found = element(row, col)
            if found is not None:
                valid.append((found[0], kernel.elem_bytes, [found[1]]))
        if valid:
            out.append(make_request(valid, sector, kernel.elem_bytes))
    return out


def naive_grid(tiles_m, tiles_n, swizzle_log):
    """(block id, tile_m index, tile_n index) of the blocks inside the grid, in linear id order."""
    L = swizzle_log
    grid_x = tiles_m * 2 ** L
    grid_y = _ceil_div(tiles_n, 2 ** L)
    blocks = []
    for b in range(grid_x * grid_y):
        bx = b % grid_x
        by = b // grid_x
        tm = bx >> L
        tn = (by << L) + (bx & (2 ** L - 1))
        if tm < tiles_m and tn < tiles_n:
            blocks.append((b, tm, tn))
    return blocks


def naive_schedule(blocks, gpu, kernel, ksteps_of, loads_of, stores_of, elements, kinds=(0, 0)):
    """Dispatch ``blocks`` (section 3: passes, rounds, SMs, slots) and collect their requests.

    ksteps_of(tm, tn): the CTA's k-steps; loads_of(tm, tn, ks): [(operand, (sectors, elements)), ..];
    stores_of(tm, tn): [(sectors, elements), ..]. Each request's fifth field is its kind: ``kinds``
    [operand] for loads (0: ld), 1 for stores."""
    if kernel.ctas_per_sm is not None:
        slots_per_sm = kernel.ctas_per_sm
    else:
        slots_per_sm = kernel.resident_ctas(gpu)
    sms = gpu.sms
    slots = [[None] * slots_per_sm for _ in range(sms)]   # each: [block, tm, tn, step]
    next_block = 0
    requests = []
    rnd = 0
    while True:
        # refill, in passes
        while True:
            took = False
            for sm in range(sms):
                if next_block >= len(blocks):
                    break
                free = [i for i in range(slots_per_sm) if slots[sm][i] is None]
                if free:
                    b, tm, tn = blocks[next_block]
                    next_block += 1
                    slots[sm][free[0]] = [b, tm, tn, 0]
                    took = True
            if not took or next_block >= len(blocks):
                break
        if all(x is None for row in slots for x in row):
            break
        for sm in range(sms):
            for sl in range(slots_per_sm):
                cta = slots[sm][sl]
                if cta is None:
                    continue
                b, tm, tn, step = cta
                if step < ksteps_of(tm, tn):
                    for operand, (secs, elems) in loads_of(tm, tn, step):
                        requests.append((rnd, sm, b, operand, kinds[operand], step, secs, elems))
                    cta[3] = step + 1
                else:
                    for secs, elems in stores_of(tm, tn):
                        requests.append((rnd, sm, b, 2, 1, step, secs, elems))
                    slots[sm][sl] = None
        rnd += 1
    if elements:
        return requests
    return [req[:7] for req in requests]


def naive_stream(layer, gpu, kernel, elements=False):
    if kernel.math == "tensorop":
        from tests.naive_tensorop import naive_tensorop_stream
        return naive_tensorop_stream(layer, gpu, kernel, elements)
    if kernel.op != "fprop":
        from tests.naive_backward import naive_backward_stream
        return naive_backward_stream(layer, gpu, kernel, elements)
    N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q = naive_dims(layer)
    M = N * P * Q
    G = layer.groups
    CG, KG = C // G, K // G             # channels and filters per group
    GK = CG * R * S
    eb = kernel.elem_bytes
    V = kernel.vector
    nchw = kernel.layout == "nchw"
    tile_m, tile_n, tile_k = kernel.tile_m, kernel.tile_n, kernel.tile_k
    threads = kernel.threads
    sector = gpu.sector_bytes
    x_base, w_base, y_base = naive_tensor_bases(layer, kernel)

    if nchw:
        map_a = thread_map(tile_m, tile_k, threads, V)   # contiguous m, strided gk
    else:
        map_a = thread_map(tile_k, tile_m, threads, V)   # contiguous c, strided m
    map_b = thread_map(tile_k, tile_n, threads, V)       # contiguous c or gk, strided k

    def x_addr(n, c, h, w):
        if nchw:
            return x_base + (((n * C + c) * H + h) * W + w) * eb
        return x_base + (((n * H + h) * W + w) * C + c) * eb

    def w_addr(k, c, r, s):
        """c: the channel inside k's group (filters hold C / groups channels)."""
        if nchw:
            return w_base + (((k * CG + c) * R + r) * S + s) * eb
        return w_base + (((k * R + r) * S + s) * CG + c) * eb

    def y_addr(m, k):
        n = m // (P * Q)
        p = (m // Q) % P
        q = m % Q
        if nchw:
            return y_base + (((n * K + k) * P + p) * Q + q) * eb
        return y_base + (((n * P + p) * Q + q) * K + k) * eb

    def a_element(m, c, r, s):
        """(byte address, coords) of A(m, (c, r, s)) or None if predicated off."""
        if m >= M or c >= C:
            return None
        n = m // (P * Q)
        p = (m // Q) % P
        q = m % Q
        h = p * sh - ph + r * dh
        w = q * sw - pw + s * dw
        if not (0 <= h < H and 0 <= w < W):
            return None
        return x_addr(n, c, h, w), ("A", m, c, r, s)

    def b_element(k, c, r, s):
        """c: the channel inside k's group."""
        if k >= K or c >= CG:
            return None
        return w_addr(k, c, r, s), ("B", k, c, r, s)

    def gk_split(gk):
        c = gk // (R * S)
        r = (gk // S) % R
        s = gk % S
        return c, r, s

    # grouped (KERNELS.md): CUTLASS kSingleGroup when K/G is a multiple of tile_n, else kMultipleGroup with
    # tile_n / (K/G) groups per CTA
    groups_per_cta = 1 if G == 1 or KG % tile_n == 0 else tile_n // KG
    assert G == 1 or KG % tile_n == 0 or tile_n % KG == 0
    if nchw:
        ksteps = _ceil_div(GK, tile_k)
    else:
        ksteps = groups_per_cta * R * S * _ceil_div(CG, tile_k)

    def kstep_position(ks):
        """nhwc: (gi, c0, r, s) of k-step ks, following the loop order: the CTA's gi-th group, channel
        block c0 inside the group, then r, then s."""
        i = 0
        for gi in range(groups_per_cta):
            for c0 in range(0, CG, tile_k):
                for r in range(R):
                    for s in range(S):
                        if i == ks:
                            return gi, c0, r, s
                        i += 1
        raise AssertionError

    def loads_of(cta_m, cta_n, ks):
        if nchw:
            gk0 = ks * tile_k

            def elem_a(cont, strd):
                gk = gk0 + strd
                return None if gk >= GK else a_element(cta_m * tile_m + cont, *gk_split(gk))

            def elem_b(cont, strd):
                gk = gk0 + cont
                return None if gk >= GK else b_element(cta_n * tile_n + strd, *gk_split(gk))
        else:
            gi, c0, r, s = kstep_position(ks)
            group = cta_n * tile_n // KG + gi      # the k-step's group; A's channels from its first

            def elem_a(cont, strd):
                return a_element(cta_m * tile_m + strd, group * CG + c0 + cont, r, s)

            def elem_b(cont, strd):
                if strd // KG != gi and G > 1:     # a filter row of another group of the CTA
                    return None
                return b_element(cta_n * tile_n + strd, c0 + cont, r, s)
        return ([(0, req) for req in operand_requests(map_a, threads, V, elem_a, sector, eb)]
                + [(1, req) for req in operand_requests(map_b, threads, V, elem_b, sector, eb)])

    def stores_of(cta_m, cta_n):
        if not nchw:        # the epilogue's order (section 3a)
            def element(row, col):
                m = cta_m * tile_m + row
                k = cta_n * tile_n + col
                return (y_addr(m, k), ("C", m, k)) if m < M and k < K and col < tile_n else None
            return epilogue_stores(kernel, element, sector)
        out = []
        for kk in range(tile_n):
            k = cta_n * tile_n + kk
            for g in range(_ceil_div(tile_m, 32)):
                lanes = []
                for lane in range(32):
                    mi = g * 32 + lane
                    m = cta_m * tile_m + mi
                    if mi < tile_m and m < M and k < K:
                        lanes.append((y_addr(m, k), eb, [("C", m, k)]))
                if lanes:
                    out.append(make_request(lanes, sector, eb))
        return out

    blocks = naive_grid(_ceil_div(M, tile_m), _ceil_div(K, tile_n), kernel.swizzle_log)
    return naive_schedule(blocks, gpu, kernel, lambda tm, tn: ksteps, loads_of, stores_of, elements)
