"""The Numba request-stream generator against the naive reference, and the stream as a convolution."""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore.gpus import gpu
from tests.naive_stream import naive_stream, naive_tensor_bases
from traces import ConvLayer, KernelConfig, RequestChunk, iter_request_chunks, tensor_bases


def small_gpu(sms=3):
    return dataclasses.replace(gpu("v100"), sms=sms)


def flat(layer, g, kernel, max_sectors=1 << 20):
    """The Numba stream as a list of (round, sm, cta, operand, is_store, kstep, sectors)."""
    out = []
    for ch in iter_request_chunks(layer, g, kernel, max_sectors):
        assert isinstance(ch, RequestChunk)
        assert ch.round.dtype == np.int64 and ch.sm.dtype == np.int32 and ch.cta.dtype == np.int64
        assert ch.operand.dtype == np.uint8 and ch.kind.dtype == np.uint8
        assert ch.kstep.dtype == np.int32 and ch.first.dtype == np.int64 and ch.count.dtype == np.int32
        assert ch.sectors.dtype == np.int64
        assert ch.first[0] == 0 and ch.first[-1] + ch.count[-1] == len(ch.sectors)
        assert np.all(ch.count >= 1)
        secs = ch.sectors.tolist()
        for i in range(len(ch.round)):
            f, c = int(ch.first[i]), int(ch.count[i])
            out.append((int(ch.round[i]), int(ch.sm[i]), int(ch.cta[i]), int(ch.operand[i]),
                        int(ch.kind[i]), int(ch.kstep[i]), tuple(secs[f:f + c])))
    return out


def assert_same_stream(layer, g, kernel, max_sectors=1 << 20):
    fast = flat(layer, g, kernel, max_sectors)
    ref = naive_stream(layer, g, kernel)
    for i, (a, b) in enumerate(zip(fast, ref)):
        assert a == b, f"request {i} differs: numba {a} naive {b}"
    assert len(fast) == len(ref)
    return fast


# ---- hand-made cases ----------------------------------------------------------------------------
HAND = [
    (ConvLayer(2, 6, 7, 5, 10, 3, 3, stride=(2, 1), pad=1, dilation=(1, 2)),
     KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, ctas_per_sm=2)),
    (ConvLayer(2, 6, 7, 5, 10, 3, 3, stride=(2, 1), pad=1, dilation=(1, 2)),
     KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, layout="nchw", ctas_per_sm=2, swizzle_log=1)),
    (ConvLayer(1, 8, 6, 6, 40, 3, 2, pad=(1, 0)),
     KernelConfig(tile_m=64, tile_n=64, tile_k=8, threads=64, vector=4, dtype="fp16", ctas_per_sm=3)),
    (ConvLayer(1, 8, 6, 6, 40, 3, 2, pad=(1, 0)),
     KernelConfig(tile_m=48, tile_n=96, tile_k=16, threads=96, vector=2, dtype="fp16", ctas_per_sm=1,
                  swizzle_log=2)),
    # default kernel, C not a multiple of tile_k (first-layer shape)
    (ConvLayer(1, 3, 12, 12, 16, 3, 3, pad=1), KernelConfig()),
    # 1x1 stride 2, K > tile_n (several N tiles), swizzle wider than the grid
    (ConvLayer(2, 16, 9, 9, 80, 1, 1, stride=2), KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64,
                                                              swizzle_log=3, ctas_per_sm=2)),
    (ConvLayer(2, 16, 9, 9, 80, 1, 1, stride=2), KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64,
                                                              layout="nchw", swizzle_log=2)),
    # 12-byte vectors: a lane can straddle two sectors
    (ConvLayer(1, 6, 5, 5, 8, 3, 3, pad=1),
     KernelConfig(tile_m=32, tile_n=32, tile_k=6, threads=64, vector=3, ctas_per_sm=2)),
    # nchw with tile_m > 32 lanes per contiguous row group and fp16
    (ConvLayer(1, 5, 8, 8, 7, 3, 3, pad=2, dilation=2),
     KernelConfig(tile_m=64, tile_n=16, tile_k=4, threads=64, layout="nchw", dtype="fp16", ctas_per_sm=3)),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_match_naive(case):
    layer, kernel = HAND[case]
    g = small_gpu(3)
    fast = assert_same_stream(layer, g, kernel)
    assert fast, "empty stream"
    # resumption with the smallest buffer does not change the stream
    assert flat(layer, g, kernel, max_sectors=1) == fast


def test_default_kernel_request_shape():
    """128x128x8 fp32 nhwc: a warp A request covers 4 rows x 8 channels = 4 sectors when C % 8 == 0."""
    layer = ConvLayer(1, 16, 16, 16, 128, 1, 1)
    fast = flat(layer, small_gpu(2), KernelConfig())
    loads = [r for r in fast if r[3] == 0]
    assert all(len(r[6]) == 4 for r in loads)
    # 2 k-steps x 32 A requests; two M tiles (256 rows), one N tile
    assert len(loads) == 2 * 2 * 32


def test_first_wave_and_rounds():
    """First wave: block i -> SM i mod SMs; a CTA with k k-steps takes k + 1 rounds when alone."""
    layer = ConvLayer(1, 8, 16, 16, 32, 1, 1)        # M = 256: 8 M tiles of 32
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, ctas_per_sm=2)
    g = small_gpu(3)
    fast = flat(layer, g, kernel)
    first_round = {}
    for rnd, sm, cta, *_ in fast:
        first_round.setdefault(cta, (rnd, sm))
    for b in range(6):
        assert first_round[b] == (0, b % 3)
    # blocks 6, 7 start after the first CTAs retire (1 k-step + stores = 2 rounds)
    assert first_round[6][0] == 2 and first_round[7][0] == 2
    stores = [r for r in fast if r[4] == 1]
    assert {r[5] for r in stores} == {1}


def test_tensor_bases():
    layer = ConvLayer(1, 3, 5, 5, 7, 3, 3)
    kernel = KernelConfig()
    xb, wb, yb = tensor_bases(layer, kernel)
    assert xb == 0 and wb == 512 and yb == 512 + 768        # 300 B -> 512, 756 B -> 768
    assert (xb, wb, yb) == naive_tensor_bases(layer, kernel)
    layer = ConvLayer(1, 64, 2, 2, 8, 1, 1)                 # x exactly 1024 bytes
    assert tensor_bases(layer, kernel)[1] == 1024


def test_bad_input():
    layer = ConvLayer(1, 6, 8, 8, 8, 3, 3)
    with pytest.raises(TypeError, match="layer"):
        iter_request_chunks("conv", gpu("v100"), KernelConfig())
    with pytest.raises(TypeError, match="gpu"):
        iter_request_chunks(layer, "v100", KernelConfig())
    with pytest.raises(TypeError, match="kernel"):
        iter_request_chunks(layer, gpu("v100"), {"tile_m": 128})
    with pytest.raises(ValueError, match="vector"):
        iter_request_chunks(layer, gpu("v100"), KernelConfig(vector=4))
    with pytest.raises(ValueError, match="max_sectors"):
        iter_request_chunks(layer, gpu("v100"), KernelConfig(), max_sectors=0)
    with pytest.raises(ValueError):   # 4 x 8 KB of smem x 40 CTAs does not fit any carve-out
        iter_request_chunks(layer, gpu("v100"), KernelConfig(ctas_per_sm=40))


# ---- hypothesis: random layers, kernels, GPUs, chunk sizes ------------------------------------
@st.composite
def kernels(draw):
    layout = draw(st.sampled_from(["nhwc", "nchw"]))
    dtype = draw(st.sampled_from(["fp32", "fp16"]))
    threads = 32 * draw(st.sampled_from([1, 2, 3, 4]))
    divisors = [d for d in range(1, threads + 1) if threads % d == 0]
    if layout == "nhwc":
        t_c = draw(st.sampled_from([d for d in divisors if d <= 48]))
        vectors = [1, 2, 3, 4] + ([6, 8] if dtype == "fp16" else [])
        v = draw(st.sampled_from([x for x in vectors if x * t_c <= 64]))
        t_s = threads // t_c
        tile_k = t_c * v
        tile_m = t_s * draw(st.integers(1, max(1, 96 // t_s)))
        tile_n = t_s * draw(st.integers(1, max(1, 96 // t_s)))
    else:
        v = 1
        tile_m = draw(st.sampled_from([d for d in divisors if d >= 8]))
        t_s_a = threads // tile_m
        tile_k = draw(st.sampled_from([d for d in divisors if d % t_s_a == 0 and d <= 32]))
        t_s_b = threads // tile_k
        tile_n = t_s_b * draw(st.integers(1, max(1, 64 // t_s_b)))
    swz = draw(st.integers(0, 2))
    kernel = KernelConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, threads=threads, layout=layout,
                          dtype=dtype, vector=v, swizzle_log=swz)
    fit = max(1, min(3, (96 << 10) // kernel.smem_per_cta))
    return dataclasses.replace(kernel, ctas_per_sm=draw(st.integers(1, fit)))


@st.composite
def layer_for(draw, kernel):
    v = kernel.vector if kernel.layout == "nhwc" else 1
    c = v * draw(st.integers(1, max(1, 12 // v)))
    dims = []
    for _ in range(2):
        f = draw(st.integers(1, 3))
        dil = draw(st.integers(1, 2))
        pad = draw(st.integers(0, 2))
        stride = draw(st.integers(1, 2))
        span = dil * (f - 1) + 1
        size = draw(st.integers(max(1, span - 2 * pad), max(1, span - 2 * pad) + 5))
        dims.append((f, dil, pad, stride, size))
    (r, dh, ph, sh, h), (s, dw, pw, sw, w) = dims
    n = draw(st.integers(1, 2))
    k = draw(st.integers(1, 40))
    return ConvLayer(n, c, h, w, k, r, s, stride=(sh, sw), pad=(ph, pw), dilation=(dh, dw))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_streams_match_naive(data):
    kernel = data.draw(kernels())
    layer = data.draw(layer_for(kernel))
    g = small_gpu(data.draw(st.integers(2, 5)))
    max_sectors = data.draw(st.sampled_from([1, 100, 1000, 1 << 20]))
    assert_same_stream(layer, g, kernel, max_sectors)


# ---- the stream is a convolution ---------------------------------------------------------------
def direct_conv(x, wt, layer):
    """y[n, k, p, q] by direct summation over padded input (independent of the stream)."""
    ph, pw = layer.pad
    sh, sw = layer.stride
    dh, dw = layer.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.zeros((layer.n, layer.k, layer.p, layer.q), dtype=np.int64)
    for r in range(layer.r):
        for s in range(layer.s):
            patch = xp[:, :, r * dh: r * dh + sh * (layer.p - 1) + 1: sh,
                       s * dw: s * dw + sw * (layer.q - 1) + 1: sw]
            y += np.einsum("nchw,kc->nkhw", patch, wt[:, :, r, s])
    return y


def im2col_nonpadding(layer):
    """Number of (m, c, r, s) entries of the im2col matrix that are not padding."""
    count = 0
    for r in range(layer.r):
        for s in range(layer.s):
            hs = [p * layer.stride[0] - layer.pad[0] + r * layer.dilation[0] for p in range(layer.p)]
            ws = [q * layer.stride[1] - layer.pad[1] + s * layer.dilation[1] for q in range(layer.q)]
            count += sum(0 <= h < layer.h for h in hs) * sum(0 <= w < layer.w for w in ws)
    return count * layer.n * layer.c


def check_convolution(layer, kernel, g):
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, size=(layer.n, layer.c, layer.h, layer.w))
    wt = rng.integers(-4, 5, size=(layer.k, layer.c, layer.r, layer.s))
    eb = kernel.elem_bytes
    xb, wb, yb = tensor_bases(layer, kernel)
    mem = np.zeros(yb // eb + layer.output_elements, dtype=np.int64)
    if kernel.layout == "nhwc":
        mem[xb // eb: xb // eb + x.size] = x.transpose(0, 2, 3, 1).ravel()
        mem[wb // eb: wb // eb + wt.size] = wt.transpose(0, 2, 3, 1).ravel()
    else:
        mem[xb // eb: xb // eb + x.size] = x.ravel()
        mem[wb // eb: wb // eb + wt.size] = wt.ravel()
    reqs = naive_stream(layer, g, kernel, elements=True)
    a_of = defaultdict(dict)
    b_of = defaultdict(dict)
    stores = defaultdict(list)
    a_total = b_total = 0
    for rnd, sm, cta, operand, is_store, kstep, sectors, elems in reqs:
        for addr, crd in elems:
            # every element lies in one of the request's sectors
            assert addr // g.sector_bytes * g.sector_bytes in sectors
            if operand == 0:
                assert crd[0] == "A" and xb <= addr < wb
                assert crd[1:] not in a_of[cta], "A element loaded twice by one CTA"
                a_of[cta][crd[1:]] = mem[addr // eb]
                a_total += 1
            elif operand == 1:
                assert crd[0] == "B" and wb <= addr < yb
                assert crd[1:] not in b_of[cta], "B element loaded twice by one CTA"
                b_of[cta][crd[1:]] = mem[addr // eb]
                b_total += 1
            else:
                assert crd[0] == "C" and addr >= yb and is_store
                stores[cta].append((addr, crd[1], crd[2]))
    tiles_m = -(-layer.gemm_m // kernel.tile_m)
    tiles_n = -(-layer.k // kernel.tile_n)
    assert a_total == tiles_n * im2col_nonpadding(layer)
    assert b_total == tiles_m * layer.params
    written = 0
    for cta, outs in stores.items():
        for addr, m, k in outs:
            acc = 0
            for c in range(layer.c):
                for r in range(layer.r):
                    for s in range(layer.s):
                        acc += a_of[cta].get((m, c, r, s), 0) * b_of[cta][(k, c, r, s)]
            mem[addr // eb] = acc
            written += 1
    assert written == layer.output_elements
    y = mem[yb // eb: yb // eb + layer.output_elements]
    if kernel.layout == "nhwc":
        y = y.reshape(layer.n, layer.p, layer.q, layer.k).transpose(0, 3, 1, 2)
    else:
        y = y.reshape(layer.n, layer.k, layer.p, layer.q)
    np.testing.assert_array_equal(y, direct_conv(x, wt, layer))


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_are_convolutions(case):
    layer, kernel = HAND[case]
    check_convolution(layer, kernel, small_gpu(3))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_streams_are_convolutions(data):
    kernel = data.draw(kernels())
    layer = data.draw(layer_for(kernel))
    check_convolution(layer, kernel, small_gpu(data.draw(st.integers(2, 5))))
