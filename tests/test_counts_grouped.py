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
