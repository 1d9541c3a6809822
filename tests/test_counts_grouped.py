"""Exact L1 counts of grouped and depthwise fprop (`analytic.l1_counts_for`, `analytic._counts_grouped`)
against the request stream, request by request summed per operand."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from analytic import l1_counts_for
from tests.test_stream import flat, small_gpu
from tests.test_stream_grouped import HAND, grouped_case
from traces import ConvLayer, KernelConfig


def stream_counts(layer, kernel):
    out = {f"{kind}_{op}": 0 for kind in ("req", "sec") for op in "ABC"}
    for req in flat(layer, small_gpu(2), kernel):
        op = "ABC"[req[3]]
        out[f"req_{op}"] += 1
        out[f"sec_{op}"] += len(req[6])
    return out


def assert_exact(layer, kernel):
    counts = l1_counts_for(layer, kernel)
    found = stream_counts(layer, kernel)
    assert {key: counts[key] for key in found} == found


@pytest.mark.parametrize("case", range(len(HAND)))
def test_hand_grouped_counts_are_exact(case):
    assert_exact(*HAND[case])


def test_depthwise_default_kernel_counts_are_exact():
    """MobileNet-like depthwise 3x3 stride 2 on the default kernel: 128 one-channel groups per CTA, C not a
    multiple of tile_n (the last column walks groups past the last)."""
    assert_exact(ConvLayer(1, 144, 9, 9, 144, 3, 3, stride=2, pad=1, groups=144), KernelConfig())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=grouped_case())
def test_random_grouped_counts_are_exact(case):
    assert_exact(*case)


def test_predict_layer_on_grouped_layers():
    """The model runs on grouped and depthwise layers: L1 figures exact, reads split into hits and misses,
    L2 reads of A between each CTA's distinct sectors and every lookup, DRAM reads at least x and w once."""
    from analytic import predict_layer
    from simcore import metrics as Mx
    from simcore.gpus import gpu
    for layer in (ConvLayer(1, 144, 9, 9, 144, 3, 3, stride=2, pad=1, groups=144),
                  ConvLayer(2, 128, 8, 8, 128, 3, 3, pad=1, groups=32),
                  ConvLayer(1, 64, 6, 6, 256, 1, 1, groups=2)):
        kernel = KernelConfig()
        pred = predict_layer(layer, gpu("a100"), kernel)
        counts = l1_counts_for(layer, kernel)
        assert pred[Mx.L1_LD_SECTORS] == counts["sec_A"] + counts["sec_B"]
        assert pred[Mx.L1_LD_REQUESTS] == counts["req_A"] + counts["req_B"]
        assert pred[Mx.L1_ST_SECTORS] == counts["sec_C"]
        for op in "AB":
            hits, misses = pred[f"{Mx.L1_LD_HITS}:{op}"], pred[f"{Mx.L1_LD_MISSES}:{op}"]
            assert hits >= 0 and misses > 0 and hits + misses == pytest.approx(pred[f"{Mx.L1_LD_SECTORS}:{op}"])
            assert 0 < pred[f"{Mx.DRAM_RD_SECTORS}:{op}"] <= misses
        x_sectors = layer.input_elements * 4 / 32
        assert pred[f"{Mx.DRAM_RD_SECTORS}:A"] <= x_sectors
        assert pred[Mx.L2_RD_SECTORS] == pytest.approx(pred[Mx.L1_LD_MISSES])
        assert pred["time_s"] > 0


def test_grouped_bad_input_in_the_model():
    from analytic import predict_layer
    from simcore.gpus import gpu
    layer = ConvLayer(1, 8, 4, 4, 8, 3, 3, groups=8)
    with pytest.raises(ValueError, match="op 'fprop' only"):
        predict_layer(layer, gpu("v100"), KernelConfig(op="dgrad"))
    with pytest.raises(ValueError, match="K/groups=3"):
        predict_layer(ConvLayer(1, 12, 4, 4, 12, 1, 1, groups=4), gpu("v100"), KernelConfig())
    with pytest.raises(ValueError, match="layout"):
        l1_counts_for(layer, KernelConfig(layout="nchw"))
