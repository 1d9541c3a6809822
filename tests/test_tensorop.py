"""The SM80 tensor-op Fprop kernel (DESIGN section 3a): KernelConfig rules, the stream against the naive
reference request by request (kinds included), the stream as a GEMM, and bad input."""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcore.gpus import gpu
from tests.naive_tensorop import naive_alignment
from tests.test_stream import assert_same_stream, flat
from traces import ConvLayer, KernelConfig, simulate_layer


def tensorop(**kw):
    args = dict(math="tensorop", dtype="fp16", tile_m=64, tile_n=64, tile_k=32, threads=64, vector=8, stages=3)
    args.update(kw)
    return KernelConfig(**args)


def small_gpu(name="a100", sms=3):
    return dataclasses.replace(gpu(name), sms=sms)


HAND = [
    # C a multiple of 16 (every row sector-aligned), K < tile_n, padding
    (ConvLayer(1, 16, 6, 6, 40, 3, 3, pad=1), tensorop(ctas_per_sm=2)),
    # C = 24: 16-byte accesses, rows not sector-aligned; bf16; swizzle
    (ConvLayer(2, 24, 5, 5, 72, 3, 1, pad=(1, 0), stride=(2, 1)), tensorop(dtype="bf16", swizzle_log=1)),
    # alignment 4, 2, 1 (8 / a accesses per vector, B through the L1)
    (ConvLayer(1, 12, 5, 5, 16, 3, 3, pad=1), tensorop(tile_m=32, tile_n=32, threads=32, ctas_per_sm=2)),
    (ConvLayer(1, 6, 5, 4, 8, 2, 3, dilation=(2, 1)), tensorop(tile_m=32, tile_n=32, threads=32)),
    (ConvLayer(1, 3, 7, 7, 20, 3, 3, stride=2, pad=1), tensorop(tile_m=64, tile_n=32, threads=64)),
    # tile_k 64 (4 rows per warp access), several channel blocks, tile_n 128 (2 rows per store)
    (ConvLayer(1, 72, 4, 4, 130, 1, 1), tensorop(tile_k=64, tile_n=128, threads=128, ctas_per_sm=1)),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_match_naive(case):
    layer, kernel = HAND[case]
    g = small_gpu()
    fast = assert_same_stream(layer, g, kernel)
    assert fast
    assert flat(layer, g, kernel, max_sectors=1) == fast


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), c=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 40]), h=st.integers(1, 6),
       w=st.integers(1, 6), k=st.integers(1, 40), r=st.integers(1, 3), s=st.integers(1, 3),
       stride=st.integers(1, 2), pad=st.integers(0, 1), tile=st.sampled_from([(32, 32, 32), (64, 32, 32),
       (32, 64, 32), (64, 64, 64)]), warps=st.sampled_from([1, 2]), slots=st.integers(1, 3),
       dtype=st.sampled_from(["fp16", "bf16"]))
def test_random_cases_match_naive(n, c, h, w, k, r, s, stride, pad, tile, warps, slots, dtype):
    if h + 2 * pad < r or w + 2 * pad < s:
        return
    tm, tn, tk = tile
    rows = 256 // tk
    if tm // rows % warps or tn // rows % warps:
        return
    layer = ConvLayer(n, c, h, w, k, r, s, stride=stride, pad=pad)
    kernel = tensorop(tile_m=tm, tile_n=tn, tile_k=tk, threads=32 * warps, ctas_per_sm=slots, dtype=dtype)
    assert_same_stream(layer, small_gpu(sms=2), kernel)


def test_request_shapes_and_kinds():
    """128x128x32, 128 threads, C = 64: a warp load request is 8 rows x 64 bytes (16 sectors; 2 per row);
    A is cp.async.ca, B cp.async.cg; a store request is 2 rows x 128 fp16 (16 sectors)."""
    layer = ConvLayer(1, 64, 8, 16, 128, 1, 1)         # M = 128: one CTA, 2 k-steps
    kernel = tensorop(tile_m=128, tile_n=128, threads=128)
    reqs = flat(layer, small_gpu(), kernel)
    kinds = Counter((r[3], r[4]) for r in reqs)
    assert kinds == {(0, 3): 2 * 16, (1, 2): 2 * 16, (2, 1): 64}
    assert all(len(r[6]) == 16 for r in reqs)
    a_rows = [sorted({(x // 128) for x in r[6]}) for r in reqs if r[3] == 0][:16]
    assert [rows[0] for rows in a_rows] == list(range(0, 128, 8))      # warp-raked: row blocks ascending


def test_alignment_below_8_b_through_l1():
    layer = ConvLayer(1, 12, 4, 4, 16, 1, 1)
    assert naive_alignment(12) == 4
    reqs = flat(layer, small_gpu(), tensorop(tile_m=32, tile_n=32, threads=32))
    assert {r[4] for r in reqs if r[3] < 2} == {3}


def test_stream_is_the_gemm():
    """Every valid (m, c, r, s) of A and (k, c, r, s) of B loaded exactly once per CTA column/row, every
    y element stored once (elements from the naive reference, which the stream matches)."""
    from tests.naive_tensorop import naive_tensorop_stream
    layer = ConvLayer(1, 6, 5, 5, 20, 3, 3, pad=1)
    kernel = tensorop(tile_m=32, tile_n=32, threads=32)
    reqs = naive_tensorop_stream(layer, small_gpu(), kernel, elements=True)
    seen = Counter(crd for req in reqs for _, crd in req[7])
    M, K = layer.gemm_m, layer.k
    tiles_n, tiles_m = -(-K // 32), -(-M // 32)
    stores = {crd for crd in seen if crd[0] == "C"}
    assert stores == {("C", m, k) for m in range(M) for k in range(K)}
    for crd, count in seen.items():
        if crd[0] == "A":
            assert count == tiles_n
        elif crd[0] == "B":
            assert count == tiles_m
        else:
            assert count == 1
    valid_a = sum(1 for m in range(M) for r in range(3) for s in range(3)
                  if 0 <= (m // 5) - 1 + r < 5 and 0 <= (m % 5) - 1 + s < 5) * layer.c
    assert sum(1 for crd in seen if crd[0] == "A") == valid_a


def test_simulated_kinds_counted_apart():
    """The B operand's cp.async.cg sectors skip the L1: no L1 lookups for B, every B sector reaches the L2."""
    layer = ConvLayer(1, 64, 8, 8, 64, 3, 3, pad=1)
    kernel = tensorop(threads=64)
    sim = simulate_layer(layer, small_gpu(), kernel)
    reqs = flat(layer, small_gpu(), kernel)
    b_sectors = sum(len(r[6]) for r in reqs if r[3] == 1)
    a_sectors = sum(len(r[6]) for r in reqs if r[3] == 0)
    assert sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum:B"] == b_sectors
    assert sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access.sum:A"] == a_sectors
    assert sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 0
    assert sim["lts__t_sectors_srcunit_tex_op_read.sum:B"] == b_sectors
    hits = sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_hit.sum:A"]
    assert sim["lts__t_sectors_srcunit_tex_op_read.sum:A"] == a_sectors - hits


# ---- KernelConfig rules and bad input -----------------------------------------------------------

def test_kernel_fields():
    k = tensorop(tile_m=128, tile_n=128, threads=128)
    assert k.thread_map_a.raked and k.thread_map_a.t_s == 8 and k.thread_map_a.iterations == 4
    assert k.smem_per_cta == 3 * 256 * 32 * 2
    assert k.as_dict()["math"] == "tensorop"
    assert "math" not in KernelConfig().as_dict()
    assert KernelConfig(dtype="bf16", vector=2).elem_bytes == 2


@pytest.mark.parametrize("kw, match", [
    (dict(dtype="fp32"), "dtype must be one of"),
    (dict(tile_k=16), "tile_k must be one of"),
    (dict(stages=2), "stages must be >= 3"),
    (dict(vector=4), "vector must be 8"),
    (dict(tile_n=96, threads=32), "tile_n must divide 256"),
    (dict(threads=96), "warp-raked map cannot tile"),
    (dict(threads=512), "warp-raked map cannot tile"),
    (dict(layout="nchw"), "layout must be 'nhwc'"),
    (dict(op="dgrad"), "op must be 'fprop'"),
    (dict(math="tensor"), "math must be one of"),
])
def test_bad_kernels(kw, match):
    with pytest.raises(ValueError, match=match) as info:
        tensorop(**kw)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name, dtype", [("v100", "bf16"), ("p100", "fp16"), ("titanxp", "bf16")])
def test_dtype_without_tensor_cores(name, dtype):
    layer = ConvLayer(1, 16, 4, 4, 16, 1, 1)
    with pytest.raises(ValueError, match=f"{dtype} tensor cores not available on {name}"):
        simulate_layer(layer, gpu(name), tensorop(dtype=dtype))


# ---- timing: which peak a kernel runs at --------------------------------------------------------

@pytest.mark.parametrize("name, fp16, bf16", [("titanxp", 12.1 / 64, 12.1), ("p100", 21.2, 10.6),
                                              ("v100", 31.4, 15.7), ("a100", 78.0, 39.0),
                                              ("h100", 133.8, 133.8), ("h200", 133.8, 133.8)])
def test_simt_half_rates(name, fp16, bf16):
    g = gpu(name)
    assert g.simt_tflops_for("fp16") == pytest.approx(fp16)
    assert g.simt_tflops_for("bf16") == pytest.approx(bf16)
    assert g.simt_tflops_for("fp32") == g.fp32_tflops


def test_compute_peak_of_each_math():
    from analytic._common import compute_peak
    a100 = gpu("a100")
    assert compute_peak(a100, tensorop(dtype="bf16")) == 312e12
    assert compute_peak(a100, KernelConfig(dtype="fp16", vector=2)) == 78e12      # SIMT fp16: not the tensor peak
    assert compute_peak(a100, KernelConfig(dtype="bf16", vector=2)) == 39e12
    assert compute_peak(gpu("v100"), KernelConfig(dtype="fp16", vector=2)) == pytest.approx(31.4e12)
    with pytest.raises(ValueError, match="bf16 tensor cores not available on v100"):
        compute_peak(gpu("v100"), tensorop(dtype="bf16"))


def test_simt_time_uses_simt_rate():
    """SIMT fp16 on v100: the waves' tile work at 31.4 TFLOP/s (not the 125 of the tensor cores)."""
    from analytic import predict_layer
    layer = ConvLayer(8, 256, 28, 28, 256, 3, 3, pad=1)
    kernel = KernelConfig(dtype="fp16", vector=2)
    v100 = gpu("v100")
    pred = predict_layer(layer, v100, kernel)
    ctas = -(-8 * 28 * 28 // 128) * 2                       # 49 x 2 tiles, fewer than one wave
    assert ctas < v100.sms * kernel.resident_ctas(v100)
    busiest = -(-ctas // v100.sms)                           # CTAs on the busiest SM
    tile_flops = 2.0 * 128 * 128 * (9 * 256 // 8) * 8
    assert pred["time_compute_s"] == pytest.approx(busiest * tile_flops / (31.4e12 / v100.sms))


# ---- the model --------------------------------------------------------------------------------

_L1_COUNT_KEYS = tuple(key for keys in __import__("simcore").metrics.KIND_KEYS for key in keys[:2])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), c=st.sampled_from([3, 4, 6, 8, 12, 16, 24, 40, 64]), h=st.integers(2, 9),
       w=st.integers(2, 9), k=st.integers(1, 70), r=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.integers(0, 1), tile=st.sampled_from([(64, 64, 32), (32, 32, 32), (64, 32, 64), (32, 128, 32)]))
def test_model_l1_counts_exact(n, c, h, w, k, r, stride, pad, tile):
    """The model's L1 request and sector counts of every kind (ld 0, cp.async.ca for A, cp.async.cg or .ca
    for B, stores) equal the simulated ones; B's bypass has no L1 hits."""
    from analytic import predict_layer
    if h + 2 * pad < r or w + 2 * pad < r:
        return
    tm, tn, tk = tile
    layer = ConvLayer(n, c, h, w, k, r, r, stride=stride, pad=pad)
    kernel = tensorop(tile_m=tm, tile_n=tn, tile_k=tk, threads=32)
    g = small_gpu(sms=4)
    sim = simulate_layer(layer, g, kernel)
    pred = predict_layer(layer, g, kernel)
    for key in _L1_COUNT_KEYS:
        for suffix in ("", ":A", ":B", ":C"):
            assert pred[key + suffix] == sim[key + suffix], (key + suffix, layer, kernel)
    hit_b = "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_hit.sum:B"
    if naive_alignment(c) == 8:
        assert pred[hit_b] == sim[hit_b] == 0
        assert pred["lts__t_sectors_srcunit_tex_op_read.sum:B"] == sim["lts__t_sectors_srcunit_tex_op_read.sum:B"]


def test_model_tensorop_time_at_tensor_peak():
    from analytic import predict_layer
    layer = ConvLayer(32, 256, 28, 28, 256, 3, 3, pad=1)
    a100 = gpu("a100")
    k = tensorop(tile_m=128, tile_n=128, threads=128)
    pred = predict_layer(layer, a100, k)
    assert pred["time_compute_s"] >= layer.flops / 312e12
    with pytest.raises(ValueError, match="bf16 tensor cores not available on v100"):
        predict_layer(layer, gpu("v100"), tensorop(dtype="bf16"))


def test_a_tile_back_on_its_sm_waves_later_against_simulation():
    # seed 5 #29: a 1 x 1 tensor-op layer, swizzle 3, one CTA an SM on an h200: an SM meets a CTA's A tile
    # again three waves later, and three lifetimes of 24 KB of A (B bypasses the L1) fit its 94 KB, so a
    # third of A's sectors hit; looked for in the previous wave only, none did
    import analytic
    import simcore
    import traces
    from simcore import metrics as Mx
    from traces import ConvLayer, KernelConfig
    layer = ConvLayer(n=41, c=48, h=16, w=19, k=1536, r=1, s=1, name="b")
    kernel = KernelConfig(tile_m=256, tile_n=64, tile_k=64, threads=256, dtype="fp16", vector=8, stages=4,
                          swizzle_log=3, math="tensorop")
    gpu = simcore.scale_gpu(simcore.gpu("h200"), {"l2_bytes": 2, "l2_slices": 2})
    keys = Mx.KIND_KEYS[Mx.KIND_CP_ASYNC_CA]
    hits = [k for k in keys if "hit" in k][0] + ":A"
    sectors = [k for k in keys if k.endswith("cache_access.sum") and "sectors" in k][0] + ":A"
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert sim[hits] > 0.25 * sim[sectors]
    assert pred[hits] == pytest.approx(sim[hits], abs=0.05 * sim[sectors])
