"""dgrad and wgrad streams (DESIGN section 3a): the Numba generator against the naive reference request by
request, the streams as the gradients of a convolution, and the counts the math gives."""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simcore.gpus import gpu
from tests.naive_stream import naive_stream
from tests.test_stream import assert_same_stream, flat, small_gpu
from traces import ConvLayer, KernelConfig, iter_request_chunks, simulate_layer, tensor_bases
from traces._layout import _ALN, _TILES_M
from traces.stream import plan_stream


def kern(op, **kw):
    base = dict(tile_m=32, tile_n=32, tile_k=8, threads=64, ctas_per_sm=2)
    base.update(kw)
    return KernelConfig(op=op, **base)


# ---- hand-made cases ----------------------------------------------------------------------------
HAND = [
    # unit-stride dgrad with padding and dilation; a rectangular filter, swizzle
    (ConvLayer(2, 6, 7, 5, 10, 3, 2, pad=(1, 2), dilation=(2, 1)), kern("dgrad", swizzle_log=1)),
    # strided dgrad 3x3 stride 2 pad 1 (every starting position has k-steps), the default kernel
    (ConvLayer(2, 8, 9, 7, 12, 3, 3, stride=2, pad=1), KernelConfig(op="dgrad")),
    # strided dgrad 2x2 stride 2 pad 0, vector 2 and fp16, tile_k 16
    (ConvLayer(2, 6, 8, 6, 10, 2, 2, stride=2), kern("dgrad", tile_k=16, vector=2, dtype="fp16")),
    # strided dgrad 2x2 stride 3 pad 0: start_r = 2 >= R (stores only) and start_h = 2 >= H = 2 (nothing)
    (ConvLayer(2, 6, 2, 7, 10, 2, 2, stride=3), kern("dgrad")),
    # strided dgrad 3x3 stride (4, 2) pad 1: start_r = 3 >= R (stores only); start_h >= H = 2 (nothing)
    (ConvLayer(1, 5, 2, 6, 9, 3, 3, stride=(4, 2), pad=1), kern("dgrad", ctas_per_sm=1)),
    # 1x1 stride 2 (a downsampling shortcut): three of four starting positions only store
    (ConvLayer(2, 16, 5, 5, 8, 1, 1, stride=2), kern("dgrad", tile_n=64, threads=128)),
    # dgrad on the row-aligned path (K x 4 bytes a multiple of the sector): unit stride with dilation, and
    # strided with tile_k 16 over K = 40 (the last filter block half full)
    (ConvLayer(2, 8, 9, 7, 16, 3, 3, pad=1, dilation=(1, 2)), kern("dgrad")),
    (ConvLayer(2, 8, 9, 7, 40, 3, 3, stride=2, pad=1), kern("dgrad", tile_k=16, ctas_per_sm=3)),
    # wgrad, partial last column tile (R S C = 54 = 32 + 22) and its columns past GEMM-N loaded
    (ConvLayer(2, 6, 7, 5, 10, 3, 3, stride=(2, 1), pad=1, dilation=(1, 2)), kern("wgrad")),
    # wgrad, C = 48 with 32-column tiles: warps of one filter position alternate with warps straddling two
    # positions of one filter row (one run of positions back to back in x); both take the fast path
    (ConvLayer(1, 48, 5, 5, 16, 2, 2, pad=1), kern("wgrad")),
    # wgrad, the default kernel on a first layer (C = 3: filter positions change inside a warp)
    (ConvLayer(1, 3, 9, 9, 16, 3, 3, pad=1), KernelConfig(op="wgrad")),
    # wgrad, vector 4 fp16, several M and N tiles, swizzle
    (ConvLayer(1, 8, 6, 6, 72, 2, 3, pad=(0, 1)),
     kern("wgrad", tile_n=64, tile_k=16, vector=4, dtype="fp16", swizzle_log=1, ctas_per_sm=3)),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_match_naive(case):
    layer, kernel = HAND[case]
    g = small_gpu(3)
    fast = assert_same_stream(layer, g, kernel)
    assert any(r[4] for r in fast) and any(not r[4] for r in fast)
    assert flat(layer, g, kernel, max_sectors=1) == fast        # resumption at every step


def test_hand_cases_cover_the_aligned_dgrad_path():
    aligned = [plan_stream(layer, small_gpu(3), kernel).params[_ALN] for layer, kernel in HAND
               if kernel.op == "dgrad"]
    assert 0 < sum(aligned) < len(aligned)


def starting_positions(layer):
    """Per starting filter position of strided dgrad: (start_h, start_w, has k-steps), from the math:
    the first dx row with (h + pad_h - start_r) a multiple of stride_h (not CUTLASS's formula)."""
    (sh, sw), (ph, pw) = layer.stride, layer.pad
    out = []
    for r0 in range(sh):
        for s0 in range(sw):
            out.append(((r0 - ph) % sh, (s0 - pw) % sw, r0 < layer.r and s0 < layer.s))
    return out


def test_strided_hand_cases_cover_idle_and_store_only_ctas():
    kinds = set()
    for layer, kernel in HAND:
        if kernel.op != "dgrad" or layer.stride == (1, 1):
            continue
        plan = plan_stream(layer, small_gpu(3), kernel)
        expected = starting_positions(layer)
        for f, (h0, w0, active) in enumerate(expected):
            idle = h0 >= layer.h or w0 >= layer.w
            assert (plan.fpos[f, 3], plan.fpos[f, 4]) == (h0, w0)
            kinds.add("idle" if idle else ("k-steps" if active else "stores only"))
        stream = flat(layer, small_gpu(3), kernel)
        assert len({r[2] for r in stream if r[4]}) == plan.ctas
        tiles_m = plan.params[_TILES_M]         # swizzle 0: block b is M tile b mod tiles_m
        idle = {f for f, (h0, w0, _) in enumerate(expected) if h0 >= layer.h or w0 >= layer.w}
        assert not {r[2] for r in stream if (r[2] % tiles_m) // (tiles_m // len(expected)) in idle}
    assert kinds == {"idle", "k-steps", "stores only"}


# ---- the streams are the gradients of a convolution --------------------------------------------
def conv_gradients(x, wt, dy, layer):
    """dx[n, c, h, w] and dw[k, c, r, s] of y = conv(x, w) for the output gradient dy, by plain loops
    over filter taps and output pixels (independent of the stream)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    dx = np.zeros(x.shape, dtype=np.int64)
    dwt = np.zeros(wt.shape, dtype=np.int64)
    for r in range(layer.r):
        for s in range(layer.s):
            for p in range(layer.p):
                for q in range(layer.q):
                    h, w = p * sh - ph + r * dh, q * sw - pw + s * dw
                    if 0 <= h < layer.h and 0 <= w < layer.w:
                        dx[:, :, h, w] += np.einsum("nk,kc->nc", dy[:, :, p, q], wt[:, :, r, s])
                        dwt[:, :, r, s] += np.einsum("nk,nc->kc", dy[:, :, p, q], x[:, :, h, w])
    return dx, dwt


def in_image(size, stride, pad, dil, out, f):
    """Output positions o whose input position o stride - pad + f dil lies in [0, size)."""
    return sum(1 for o in range(out) if 0 <= o * stride - pad + f * dil < size)


def check_gradient(layer, kernel, g):
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, size=(layer.n, layer.c, layer.h, layer.w))
    wt = rng.integers(-4, 5, size=(layer.k, layer.c, layer.r, layer.s))
    dy = rng.integers(-4, 5, size=(layer.n, layer.k, layer.p, layer.q))
    eb = kernel.elem_bytes
    xb, wb, yb = tensor_bases(layer, kernel)
    mem = np.zeros(yb // eb + layer.output_elements, dtype=np.int64)
    mem[xb // eb: xb // eb + x.size] = x.transpose(0, 2, 3, 1).ravel()
    mem[wb // eb: wb // eb + wt.size] = wt.transpose(0, 2, 3, 1).ravel()
    mem[yb // eb:] = dy.transpose(0, 2, 3, 1).ravel()
    a_of = defaultdict(lambda: defaultdict(dict))     # cta -> GEMM row -> reduction index -> value
    b_of = defaultdict(dict)                          # cta -> (reduction index, GEMM column) -> value
    stores = []
    totals = [0, 0]
    for rnd, sm, cta, operand, is_store, kstep, sectors, elems in naive_stream(layer, g, kernel, elements=True):
        for addr, crd in elems:
            assert addr // g.sector_bytes * g.sector_bytes in sectors
            assert crd[0] == "ABC"[operand] and bool(is_store) == (operand == 2)
            if operand == 2:
                stores.append((cta, addr, crd[1], crd[2]))
                continue
            totals[operand] += 1
            value = mem[addr // eb]
            if kernel.op == "dgrad":     # A: (pixel, k, r, s); B: (k, r, s, c)
                if operand == 0:
                    assert crd[2:] not in a_of[cta][crd[1]], "A element loaded twice by one CTA"
                    a_of[cta][crd[1]][crd[2:]] = value
                else:
                    b_of[cta][(crd[1:4], crd[4])] = value
            else:                        # A: (npq, k); B: (npq, rsc)
                if operand == 0:
                    a_of[cta][crd[2]][crd[1]] = value
                else:
                    b_of[cta][(crd[1], crd[2])] = value
    out = {}
    for cta, addr, row, col in stores:
        assert addr not in out, "output element stored twice"
        if kernel.op == "dgrad":    # w is never predicated off where dy is loaded
            out[addr] = sum(v * b_of[cta][(red, col)] for red, v in a_of[cta][row].items())
        else:                       # x is, where the filter tap falls in the padding
            out[addr] = sum(v * b_of[cta].get((red, col), 0) for red, v in a_of[cta][row].items())
    dx, dwt = conv_gradients(x, wt, dy, layer)
    tiles_n = -(-kernel.gemm_shape(layer)[1] // kernel.tile_n)
    tiles_m = -(-kernel.gemm_shape(layer)[0] // kernel.tile_m)
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    rows_h = [in_image(layer.h, sh, ph, dh, layer.p, r) for r in range(max(layer.r, 64))]
    rows_w = [in_image(layer.w, sw, pw, dw, layer.q, s) for s in range(max(layer.s, 64))]
    if kernel.op == "dgrad":
        want, base = dx.transpose(0, 2, 3, 1).ravel(), xb
        # A: every (dx pixel, k, r, s) with a dy element, once per column tile
        assert totals[0] == tiles_n * layer.n * layer.k * sum(rows_h[:layer.r]) * sum(rows_w[:layer.s])
        # B: each running CTA loads w at its starting position's (r, s), all k, its channels
        if layer.stride == (1, 1):
            taps = layer.r * layer.s
        else:
            taps = sum(len(range(r0, layer.r, sh)) * len(range(s0, layer.s, sw))
                       for f, (h0, w0, _) in enumerate(starting_positions(layer)) for r0, s0 in [divmod(f, sw)]
                       if h0 < layer.h and w0 < layer.w)
        per_filter = -(-layer.n * -(-layer.h // sh) * -(-layer.w // sw) // kernel.tile_m)   # 1, 1: tiles_m
        assert totals[1] == per_filter * layer.k * layer.c * taps
    else:
        want, base = dwt.transpose(0, 2, 3, 1).ravel(), wb
        assert totals[0] == tiles_n * layer.gemm_m * layer.k
        # B: every column of the column tiles, past GEMM-N too (r up to the last tile's), every npq
        rs_of = [divmod(col // layer.c, layer.s) for col in range(tiles_n * kernel.tile_n)]
        assert totals[1] == tiles_m * layer.n * sum(rows_h[r] * rows_w[s] for r, s in rs_of)
    assert len(out) == len(want)
    got = np.array([out[base + i * eb] for i in range(len(want))])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_are_gradients(case):
    layer, kernel = HAND[case]
    check_gradient(layer, kernel, small_gpu(3))


# ---- hypothesis ---------------------------------------------------------------------------------
@st.composite
def backward_kernels(draw, op):
    dtype = draw(st.sampled_from(["fp32", "fp16"]))
    threads = 32 * draw(st.sampled_from([1, 2, 3, 4]))
    v = draw(st.sampled_from([1, 2, 4] + ([8] if dtype == "fp16" else [])))
    divisors = [d for d in range(1, threads + 1) if threads % d == 0]
    t_cb = draw(st.sampled_from([d for d in divisors if d * v <= 96]))       # B: contiguous tile_n
    t_sb = threads // t_cb
    if op == "dgrad":                       # A: contiguous tile_k (divides threads), strided tile_m
        options = [d for d in divisors if (d * v) % t_sb == 0 and d * v <= 32]
        assume(options)
        t_ca = draw(st.sampled_from(options))
        tile_k = t_ca * v
        t_sa = threads // t_ca
        tile_m = t_sa * draw(st.integers(1, max(1, 96 // t_sa)))
    else:                                   # A: contiguous tile_m, strided tile_k
        t_ca = draw(st.sampled_from([d for d in divisors if d * v <= 96]))
        tile_m = t_ca * v
        step = math.lcm(threads // t_ca, t_sb)
        assume(step <= 32)
        tile_k = step * draw(st.integers(1, max(1, 32 // step)))
    kernel = KernelConfig(tile_m=tile_m, tile_n=t_cb * v, tile_k=tile_k, threads=threads, dtype=dtype, vector=v,
                          swizzle_log=draw(st.integers(0, 2)), op=op)
    fit = max(1, min(3, (96 << 10) // kernel.smem_per_cta))
    return dataclasses.replace(kernel, ctas_per_sm=draw(st.integers(1, fit)))


@st.composite
def backward_layers(draw, kernel):
    v = kernel.vector
    c = v * draw(st.integers(1, max(1, 12 // v)))
    k = v * draw(st.integers(1, max(1, 24 // v)))
    strided = kernel.op == "dgrad" and draw(st.booleans())
    dims = []
    for _ in range(2):
        f = draw(st.integers(1, 3))
        stride = draw(st.integers(2, 3)) if strided else draw(st.integers(1, 2))
        dil = 1 if kernel.op == "dgrad" and strided else draw(st.integers(1, 2))
        pad = draw(st.integers(0, 2))
        span = dil * (f - 1) + 1
        size = draw(st.integers(max(1, span - 2 * pad), max(1, span - 2 * pad) + 5))
        dims.append((f, dil, pad, stride, size))
    (r, dh, ph, sh, h), (s, dw, pw, sw, w) = dims
    if kernel.op == "dgrad" and not strided:
        sh = sw = 1
    return ConvLayer(draw(st.integers(1, 2)), c, h, w, k, r, s, stride=(sh, sw), pad=(ph, pw), dilation=(dh, dw))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), op=st.sampled_from(["dgrad", "wgrad"]))
def test_random_streams_match_naive(data, op):
    kernel = data.draw(backward_kernels(op))
    layer = data.draw(backward_layers(kernel))
    g = small_gpu(data.draw(st.integers(2, 5)))
    assert_same_stream(layer, g, kernel, data.draw(st.sampled_from([1, 100, 1 << 20])))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), op=st.sampled_from(["dgrad", "wgrad"]))
def test_random_streams_are_gradients(data, op):
    kernel = data.draw(backward_kernels(op))
    check_gradient(data.draw(backward_layers(kernel)), kernel, small_gpu(data.draw(st.integers(2, 5))))


# ---- bad input ------------------------------------------------------------------------------------
def test_bad_input():
    g = gpu("v100")
    with pytest.raises(ValueError, match="op must be one of"):
        KernelConfig(op="bprop")
    with pytest.raises(ValueError, match="nhwc' only"):
        KernelConfig(op="dgrad", layout="nchw")
    with pytest.raises(ValueError, match="strided dgrad.*dilation"):
        iter_request_chunks(ConvLayer(1, 8, 9, 9, 8, 3, 3, stride=2, dilation=2), g, KernelConfig(op="dgrad"))
    with pytest.raises(ValueError, match="K=6 is not a multiple"):
        simulate_layer(ConvLayer(1, 8, 9, 9, 6, 3, 3), g, KernelConfig(op="wgrad", vector=4, tile_m=128))
    with pytest.raises(ValueError, match=r"operand B \(dgrad\)"):
        KernelConfig(op="dgrad", tile_n=128, threads=64)          # 128 columns, 64 threads
    # unit-stride dgrad with dilation and wgrad with stride and dilation are fine
    iter_request_chunks(ConvLayer(1, 8, 9, 9, 8, 3, 3, dilation=2), g, KernelConfig(op="dgrad"))
    iter_request_chunks(ConvLayer(1, 8, 9, 9, 8, 3, 3, stride=2, dilation=2), g, KernelConfig(op="wgrad"))


def test_strided_dgrad_subproblems_sharing_an_sm_find_each_others_dy_in_a_large_l1():
    # seed 9 #65: a 5 x 5 stride-4 dgrad of 3 channels; 66 tiles a sub-problem on 132 SMs, so an SM's four
    # CTAs are four sub-problems' tiles at the same place, reading the same dy pixels in other rounds. On an
    # L1 of 824 ways a CTA lifetime of the SM's lines fits, and the later CTAs' first touches hit: simulated
    # A hits 83 %; counted as first touches (no slot repeats another sub-problem's window) 32 %
    import analytic
    import simcore
    from simcore import metrics as Mx
    layer = ConvLayer(n=4, c=3, h=298, w=222, k=24, r=5, s=5, stride=4, pad=2, name="s")
    kernel = KernelConfig(tile_m=256, tile_n=64, tile_k=8, threads=128, op="dgrad")
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l1_smem_bytes": 2})
    sim = simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    key, total = Mx.L1_LD_HITS + ":A", sim[Mx.L1_LD_SECTORS + ":A"]
    assert sim[key] > 0.75 * total
    assert pred[key] == pytest.approx(sim[key], abs=0.05 * total)
