"""Exact L1 request and sector counts of dgrad and wgrad, and of fprop's irregular thread maps
(`analytic.l1_counts_for`), against the simulated stream (`traces.simulate_layer`, whose L1 request/sector keys count the stream exactly) and the naive
pure-Python stream (`tests/naive_backward.py`)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic
import simcore
from simcore import metrics as M
from tests.naive_stream import naive_stream
from traces import ConvLayer, KernelConfig, simulate_layer

V100 = simcore.gpu("v100")
KEYS = (("req_A", M.L1_LD_REQUESTS, "A"), ("sec_A", M.L1_LD_SECTORS, "A"),
        ("req_B", M.L1_LD_REQUESTS, "B"), ("sec_B", M.L1_LD_SECTORS, "B"),
        ("req_C", M.L1_ST_REQUESTS, "C"), ("sec_C", M.L1_ST_SECTORS, "C"))


def kern(op, **kw):
    base = dict(tile_m=32, tile_n=32, tile_k=8, threads=64)
    base.update(kw)
    return KernelConfig(op=op, **base)


def assert_matches_simulation(layer, kernel):
    got = analytic.l1_counts_for(layer, kernel)
    sim = simulate_layer(layer, V100, kernel)
    for name, metric, op in KEYS:
        assert got[name] == sim[M.operand_key(metric, op)], (name, layer, kernel)
    assert analytic.l1_exact(layer, kernel)


# Thread maps covered (T_c: threads along the contiguous dimension of A / B):
#   32 | T_c: a request is one row and 32 V columns; T_c | 32: g = 32 / T_c rows (wgrad B: rows whose
#   pixels overlap); neither (T_c = 3, 12, 24, 48): lanes straddle rows.
HAND = [
    # unit-stride dgrad: padding, dilation, rectangular filter, C and K not multiples of 8
    (ConvLayer(2, 6, 7, 5, 10, 3, 2, pad=(1, 2), dilation=(2, 1)), kern("dgrad")),
    # strided dgrad 3x3 stride 2 pad 1, the default kernel (A: T_c = 8, B: T_c = 128)
    (ConvLayer(2, 8, 9, 7, 12, 3, 3, stride=2, pad=1), KernelConfig(op="dgrad")),
    # strided dgrad stride 3: start_r = 2 >= R (stores only), start_h = 2 >= H (does nothing)
    (ConvLayer(2, 6, 2, 7, 10, 2, 2, stride=3), kern("dgrad")),
    # strided dgrad stride (3, 2), pad (2, 1), fp16 vector 2, partial tiles on M and N
    (ConvLayer(3, 10, 8, 9, 14, 3, 3, stride=(3, 2), pad=(2, 1)),
     kern("dgrad", tile_m=64, tile_k=8, threads=128, dtype="fp16", vector=2)),
    # dgrad fp16 vector 8: A T_c = 2 (16 rows a request), B T_c = 8
    (ConvLayer(2, 24, 6, 5, 16, 3, 3, pad=1), kern("dgrad", tile_n=64, tile_k=16, dtype="fp16", vector=8)),
    # dgrad with lanes straddling rows (A T_c = 24, B T_c = 48)
    (ConvLayer(2, 13, 5, 6, 29, 2, 3, pad=1), kern("dgrad", tile_m=48, tile_n=48, tile_k=24, threads=96)),
    # wgrad: partial last column tile (R S C = 54), columns past GEMM-N loaded; stride (2, 1), dilation
    (ConvLayer(2, 6, 7, 5, 10, 3, 3, stride=(2, 1), pad=1, dilation=(1, 2)), kern("wgrad")),
    # wgrad, the default kernel on a first layer (C = 3: filter positions change inside a request)
    (ConvLayer(2, 3, 9, 9, 16, 3, 3, pad=1), KernelConfig(op="wgrad")),
    # wgrad vector 4 (B: T_c = 8, 4 npq rows a request, their pixels overlap), stride 3
    (ConvLayer(3, 8, 10, 9, 12, 3, 3, stride=3, pad=2), kern("wgrad", tile_k=16, vector=4)),
    # wgrad fp16 vector 8, B T_c = 8 over Q = 2 (a request's rows span raster rows and images)
    (ConvLayer(5, 16, 3, 2, 24, 2, 1, pad=(0, 0)), kern("wgrad", tile_n=64, tile_k=16, dtype="fp16", vector=8)),
    # wgrad with lanes straddling rows (A and B T_c = 24), K not a multiple of the tile
    (ConvLayer(2, 5, 6, 7, 30, 3, 2, stride=2, pad=1), kern("wgrad", tile_m=24, tile_n=24, tile_k=12, threads=96)),
    # wgrad fp16 vector 4, T_c = 3 for nothing but B = 24: tile_n 96 over C = 4 (six positions a tile)
    (ConvLayer(2, 4, 7, 7, 8, 3, 3, pad=1), kern("wgrad", tile_m=32, tile_n=96, tile_k=12, threads=96,
                                                   dtype="fp16", vector=4)),
]


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_cases_match_simulation(case):
    assert_matches_simulation(*HAND[case])


@pytest.mark.parametrize("case", [0, 2, 6, 9])
def test_hand_cases_match_naive_stream(case):
    layer, kernel = HAND[case]
    gpu = dataclasses.replace(V100, sms=3)
    ref = {name: 0 for name, _, _ in KEYS}
    for request in naive_stream(layer, gpu, kernel):
        op = "ABC"[request[3]]
        ref["req_" + op] += 1
        ref["sec_" + op] += len(request[6])
    got = analytic.l1_counts_for(layer, kernel)
    assert {name: got[name] for name in ref} == ref


KERNELS = [
    dict(),                                                                  # A 8 / 32, B 32 (wgrad A 32)
    dict(tile_m=64, threads=128, dtype="fp16", vector=2),                    # B 16: 2 rows a request
    dict(tile_n=64, tile_k=16, dtype="fp16", vector=8),                      # A 2 / 4, B 8
    dict(tile_k=16, vector=4),                                               # A 4 / 8, B 8
    dict(tile_m=16, tile_n=8, tile_k=8, threads=32),                         # B 8: 4 rows a request
    dict(tile_m=24, tile_n=24, tile_k=12, threads=96),                       # straddling lanes
    dict(tile_m=128, tile_n=128, tile_k=8, threads=256),                     # the default kernel
]


@st.composite
def layer_cases(draw, op, kernels=KERNELS):
    kernel = kern(op, **draw(st.sampled_from(kernels)))
    v = kernel.vector
    r, s = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = 1 if op == "dgrad" and stride != (1, 1) else draw(st.integers(1, 2))
    layer = ConvLayer(n=draw(st.integers(1, 4)), c=v * draw(st.integers(1, 12)),
                      h=draw(st.integers(dil * (r - 1) + 1, 11)), w=draw(st.integers(dil * (s - 1) + 1, 11)),
                      k=v * draw(st.integers(1, 12)), r=r, s=s, stride=stride,
                      pad=(draw(st.integers(0, 2)), draw(st.integers(0, 2))), dilation=dil)
    return layer, kernel


@settings(max_examples=25, deadline=None)
@given(layer_cases("dgrad"))
def test_dgrad_counts_match_simulation(case):
    assert_matches_simulation(*case)


@settings(max_examples=25, deadline=None)
@given(layer_cases("wgrad"))
def test_wgrad_counts_match_simulation(case):
    assert_matches_simulation(*case)


@pytest.mark.parametrize("op,kw", [("dgrad", {}), ("wgrad", {}), ("dgrad", dict(stride=2, pad=1)),
                                   ("wgrad", dict(stride=2, pad=1)), ("wgrad", dict(tile_k=16, vector=4))])
def test_counts_affine_in_batch(op, kw):
    """Counts are closed form in N: past the first images they grow by the same amount every 32
    images (every period divides 32 here), so a batch of ten million (which no loop over CTAs or rows
    would finish) extrapolates the small batches exactly."""
    geometry = {key: kw.pop(key) for key in ("stride", "pad") if key in kw}
    kernel = kern(op, **kw)
    layer = ConvLayer(1, 12, 9, 7, 20, 3, 3, **geometry)
    at = {n: analytic.l1_counts_for(dataclasses.replace(layer, n=n), kernel) for n in (5, 37, 69)}
    big = analytic.l1_counts_for(dataclasses.replace(layer, n=5 + 32 * 312_500), kernel)
    for name, _, _ in KEYS:
        step = at[37][name] - at[5][name]
        assert at[69][name] - at[37][name] == step, name
        assert big[name] == at[5][name] + 312_500 * step, name


FPROP_EXOTIC = [
    dict(tile_m=48, tile_n=48, tile_k=24, threads=96),                       # nhwc, lanes straddle rows
    dict(tile_m=32, tile_n=96, tile_k=12, threads=96, dtype="fp16", vector=4),  # A T_c 3, B T_c 3
    dict(tile_m=16, tile_n=32, tile_k=8, threads=32, layout="nchw"),         # 2 gk a request
    dict(tile_m=8, tile_n=32, tile_k=16, threads=32, layout="nchw", dtype="fp16"),  # 4 gk, 8 rows
    dict(tile_m=48, tile_n=48, tile_k=8, threads=96, layout="nchw"),         # A lanes straddle gk; stores
    dict(tile_m=96, tile_n=48, tile_k=8, threads=96, layout="nchw"),         # blocks of 32 + 32 + 32 rows
]


@settings(max_examples=25, deadline=None)
@given(layer_cases("fprop", FPROP_EXOTIC))
def test_fprop_exotic_thread_maps_match_simulation(case):
    """fprop thread maps whose requests are not whole aligned rows (once approximated) are exact too."""
    assert_matches_simulation(*case)


def test_fprop_through_l1_counts_for():
    layer = ConvLayer(2, 6, 7, 5, 10, 3, 2, pad=1)
    kernel = kern("fprop")
    assert analytic.l1_counts_for(layer, kernel) == analytic._counts.l1_counts(layer, kernel)
    assert_matches_simulation(layer, kernel)


def test_bad_input():
    layer = ConvLayer(1, 8, 8, 8, 8, 3, 3)
    with pytest.raises(TypeError, match="layer must be a traces.ConvLayer"):
        analytic.l1_counts_for("conv", kern("dgrad"))
    with pytest.raises(TypeError, match="kernel must be a traces.KernelConfig"):
        analytic.l1_counts_for(layer, "dgrad")
    with pytest.raises(ValueError, match="K=6 is not a multiple of KernelConfig.vector=4"):
        analytic.l1_counts_for(ConvLayer(1, 8, 8, 8, 6, 3, 3), kern("wgrad", tile_k=16, vector=4))
    with pytest.raises(ValueError, match="strided dgrad"):
        analytic.l1_counts_for(ConvLayer(1, 8, 9, 9, 8, 3, 3, stride=2, dilation=2), kern("dgrad"))
    with pytest.raises(ValueError, match="groups=2 is supported for op 'fprop' only"):
        analytic.l1_counts_for(ConvLayer(1, 8, 8, 8, 8, 3, 3, groups=2), kern("wgrad"))
