"""Grouped and depthwise fprop (traces/KERNELS.md, "Grouped and depthwise fprop"): the Numba stream against
the naive reference request by request, the stream as numpy's grouped convolution, counting identities,
the group-mode rule and bad input."""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore.gpus import gpu
from tests.naive_stream import naive_stream
from tests.test_stream import assert_same_stream, direct_conv, flat, kernels, small_gpu
from traces import ConvLayer, KernelConfig, iter_request_chunks, simulate_layer, tensor_bases
from traces.grouped import group_mode, groups_per_cta

K64 = KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, ctas_per_sm=2)

HAND = [
    # kMultipleGroup: 4 groups of 4 filters per CTA, C/G = 4 < tile_k (A reads the next group's channels)
    (ConvLayer(2, 12, 7, 5, 12, 3, 3, stride=(2, 1), pad=1, groups=3), K64),
    # depthwise (groups = C = K): 32 one-filter groups per CTA
    (ConvLayer(1, 8, 6, 6, 8, 3, 3, pad=1, groups=8), K64),
    # depthwise with a channel multiplier 2 (K/G = 2), C > tile_n (several CTA columns)
    (ConvLayer(1, 40, 5, 5, 80, 3, 3, pad=1, dilation=(1, 2), groups=40), K64),
    # kSingleGroup: K/G = 32 = tile_n (one CTA column per group), C/G = 12 not a multiple of tile_k
    (ConvLayer(1, 24, 6, 6, 64, 3, 3, pad=1, groups=2), K64),
    # kSingleGroup with two CTA columns per group
    (ConvLayer(1, 16, 5, 5, 128, 1, 1, groups=2), K64),
    # vectors of 2 (C/G = 2), K not a multiple of tile_n: the last CTA walks groups past the last
    (ConvLayer(1, 20, 6, 6, 40, 1, 1, groups=10), dataclasses.replace(K64, vector=2)),
    # the default 128x128x8 kernel on a ResNeXt-like layer (K/G = 8: 16 groups per CTA), fp16
    (ConvLayer(1, 64, 6, 6, 64, 3, 3, pad=1, stride=2, groups=8), KernelConfig(dtype="fp16", ctas_per_sm=1)),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_grouped_streams_match_naive(case):
    layer, kernel = HAND[case]
    fast = assert_same_stream(layer, small_gpu(3), kernel)
    assert fast
    assert flat(layer, small_gpu(3), kernel, max_sectors=1) == fast


def test_group_mode_rule():
    k = KernelConfig()                                    # tile_n 128
    assert group_mode(ConvLayer(1, 8, 4, 4, 8, 1, 1), k) == "none"
    assert group_mode(ConvLayer(1, 64, 4, 4, 256, 1, 1, groups=2), k) == "single"      # K/G = 128
    assert group_mode(ConvLayer(1, 64, 4, 4, 512, 1, 1, groups=2), k) == "single"      # K/G = 256
    assert group_mode(ConvLayer(1, 64, 4, 4, 64, 3, 3, groups=64), k) == "multiple"    # depthwise
    assert groups_per_cta(ConvLayer(1, 64, 4, 4, 64, 3, 3, groups=64), k) == 128
    assert groups_per_cta(ConvLayer(1, 128, 4, 4, 128, 3, 3, groups=32), k) == 32      # ResNeXt K/G = 4
    assert groups_per_cta(ConvLayer(1, 64, 4, 4, 256, 1, 1, groups=2), k) == 1


@pytest.mark.parametrize("layer, kernel, match", [
    (ConvLayer(1, 12, 4, 4, 12, 1, 1, groups=2), KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64),
     "K/groups=6"),                                                   # 6 neither divides nor is a multiple of 32
    (ConvLayer(1, 8, 4, 4, 8, 1, 1, groups=8), dataclasses.replace(K64, layout="nchw"), "layout"),
    (ConvLayer(1, 8, 4, 4, 8, 1, 1, groups=8), dataclasses.replace(K64, op="dgrad"), "op"),
    (ConvLayer(1, 8, 4, 4, 8, 1, 1, groups=8), dataclasses.replace(K64, op="wgrad"), "op"),
    (ConvLayer(1, 8, 4, 4, 8, 1, 1, groups=4), dataclasses.replace(K64, vector=4), "C/groups=2"),
])
def test_bad_grouped_layers(layer, kernel, match):
    with pytest.raises(ValueError, match=match):
        iter_request_chunks(layer, gpu("v100"), kernel)
    with pytest.raises(ValueError, match=match):
        simulate_layer(layer, gpu("v100"), kernel)
    with pytest.raises(ValueError, match=match):
        kernel.check_layer(layer)


# ---- the stream is numpy's grouped convolution --------------------------------------------------
def grouped_conv(x, wt, layer):
    """numpy's grouped convolution: the dense convolution with a block-diagonal filter (zero outside a
    filter's group), independent of how the kernel walks the groups."""
    dense = np.zeros((layer.k, layer.c, layer.r, layer.s), dtype=wt.dtype)
    cg, kg = layer.c // layer.groups, layer.k // layer.groups
    for k in range(layer.k):
        g = k // kg
        dense[k, g * cg:(g + 1) * cg] = wt[k]
    return direct_conv(x, dense, layer)


def check_grouped_convolution(layer, kernel, g):
    """Run the naive stream's elements as the kernel would: in each k-step, A's tile column j (channel
    j of the k-step's channel block, counted from its group's first channel) meets B's tile row j."""
    rng = np.random.default_rng(1)
    cg, kg = layer.c // layer.groups, layer.k // layer.groups
    x = rng.integers(-4, 5, size=(layer.n, layer.c, layer.h, layer.w))
    wt = rng.integers(-4, 5, size=(layer.k, cg, layer.r, layer.s))
    eb = kernel.elem_bytes
    xb, wb, yb = tensor_bases(layer, kernel)
    mem = np.zeros(yb // eb + layer.output_elements, dtype=np.int64)
    mem[xb // eb: xb // eb + x.size] = x.transpose(0, 2, 3, 1).ravel()
    mem[wb // eb: wb // eb + wt.size] = wt.transpose(0, 2, 3, 1).ravel()
    gpc = groups_per_cta(layer, kernel)
    blocks = -(-cg // kernel.tile_k)
    tiles_m = -(-layer.gemm_m // kernel.tile_m)
    acc = defaultdict(int)
    a_step, b_step = defaultdict(list), defaultdict(list)
    stores, a_total, b_total = [], 0, 0
    cta_tn = {}
    for rnd, sm, cta, operand, is_store, kstep, sectors, elems in naive_stream(layer, g, kernel, elements=True):
        for addr, crd in elems:
            assert addr // g.sector_bytes * g.sector_bytes in sectors
            if operand == 0:
                assert xb <= addr < wb
                a_step[cta, kstep].append((crd[1:], mem[addr // eb]))
                a_total += 1
            elif operand == 1:
                assert wb <= addr < yb
                b_step[cta, kstep].append((crd[1:], mem[addr // eb]))
                cta_tn[cta] = crd[1] // kernel.tile_n
                b_total += 1
            else:
                stores.append((cta, addr, crd[1], crd[2]))
    for (cta, kstep), b_elems in b_step.items():
        group = cta_tn[cta] * kernel.tile_n // kg + kstep // (layer.r * layer.s * blocks)
        a_by_col = defaultdict(list)
        for (m, c, r, s), val in a_step[cta, kstep]:
            a_by_col[c - group * cg].append((m, r, s, val))
        for (k, c, r, s), val in b_elems:
            assert k // kg == group, "B row of another group"
            for m, ra, sa, va in a_by_col[c]:
                assert (ra, sa) == (r, s)
                acc[m, k] += va * val
    seen = set()
    for _cta, addr, m, k in stores:
        assert (m, k) not in seen, "output stored twice"
        seen.add((m, k))
        mem[addr // eb] = acc[m, k]
    assert len(seen) == layer.output_elements                     # each output stored once
    assert b_total == tiles_m * layer.params                      # each filter element once per M tile
    y = mem[yb // eb: yb // eb + layer.output_elements].reshape(layer.n, layer.p, layer.q, layer.k)
    np.testing.assert_array_equal(y.transpose(0, 3, 1, 2), grouped_conv(x, wt, layer))
    # A: per CTA column, each of its groups below G, each channel block: its channels below C, at every
    # (m, r, s) inside the image
    per_mrs = 0
    for r in range(layer.r):
        for s in range(layer.s):
            hs = [p * layer.stride[0] - layer.pad[0] + r * layer.dilation[0] for p in range(layer.p)]
            ws = [q * layer.stride[1] - layer.pad[1] + s * layer.dilation[1] for q in range(layer.q)]
            per_mrs += sum(0 <= h < layer.h for h in hs) * sum(0 <= w < layer.w for w in ws) * layer.n
    channels = 0
    for tn in range(-(-layer.k // kernel.tile_n)):
        for gi in range(gpc):
            first = (tn * kernel.tile_n // kg + gi) * cg
            for c0 in range(0, cg, kernel.tile_k):
                channels += max(0, min(first + c0 + kernel.tile_k, layer.c) - (first + c0))
    assert a_total == channels * per_mrs


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_grouped_streams_are_grouped_convolutions(case):
    layer, kernel = HAND[case]
    check_grouped_convolution(layer, kernel, small_gpu(3))


# ---- hypothesis: random grouped layers on random nhwc kernels ------------------------------------
@st.composite
def grouped_case(draw):
    kernel = draw(kernels().filter(lambda k: k.layout == "nhwc"))
    v = kernel.vector
    groups = draw(st.integers(2, 6))
    divisors = [d for d in range(1, kernel.tile_n + 1) if kernel.tile_n % d == 0 and d <= 12]
    if draw(st.booleans()):
        kg = draw(st.sampled_from(divisors))                         # kMultipleGroup
    else:
        kg = kernel.tile_n * draw(st.integers(1, 2))                 # kSingleGroup
        groups = min(groups, 3)
    cg = v * draw(st.integers(1, max(1, 10 // v)))
    if v == 1 and draw(st.booleans()):
        cg, kg = 1, draw(st.sampled_from([m for m in (1, 2) if kernel.tile_n % m == 0]))   # depthwise
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    pad = draw(st.integers(0, 1))
    h = draw(st.integers(max(1, r - 2 * pad), 6))
    w = draw(st.integers(max(1, s - 2 * pad), 6))
    layer = ConvLayer(draw(st.integers(1, 2)), cg * groups, h, w, kg * groups, r, s,
                      stride=draw(st.integers(1, 2)), pad=pad, groups=groups)
    return layer, kernel


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grouped_case(), sms=st.integers(2, 4), max_sectors=st.sampled_from([1, 500, 1 << 20]))
def test_random_grouped_streams_match_naive(case, sms, max_sectors):
    layer, kernel = case
    assert_same_stream(layer, small_gpu(sms), kernel, max_sectors)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grouped_case())
def test_random_grouped_streams_are_grouped_convolutions(case):
    layer, kernel = case
    check_grouped_convolution(layer, kernel, small_gpu(3))
