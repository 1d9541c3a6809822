"""The model's memo of GPU-independent figures (analytic._memo): a prediction that finds them memoized
equals one that computes them, whatever was predicted before, and memoized figures cannot be changed."""
from __future__ import annotations

import dataclasses

import pytest

import analytic
import simcore
from analytic._counts import l1_counts
from analytic._memo import clear_memo
from traces import ConvLayer, KernelConfig, network


def _fresh(layer, gpu, kernel):
    clear_memo()
    return analytic.predict_layer(layer, gpu, kernel)


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_memoized_predictions_equal_fresh_ones_across_gpus_and_factors(op):
    kernel = KernelConfig(op=op)
    layers = [x for x in network("resnet50", 2) if x.name in ("conv1", "layer1.0.conv2", "layer2.0.conv1")]
    gpus = [simcore.gpu("v100"), simcore.gpu("h100"), dataclasses.replace(simcore.gpu("a100"), l2_bytes=20 << 20)]
    factors = analytic.ReuseFactors(l1_tile_edge=0.5)
    fresh = {(layer.name, g.name, fac is None): _fresh(layer, g, kernel) if fac is None else
             (clear_memo(), analytic.predict_layer(layer, g, kernel, factors=fac))[1]
             for layer in layers for g in gpus for fac in (None, factors)}
    clear_memo()
    for fac in (factors, None):                 # the memo filled in another order, factors interleaved
        for g in reversed(gpus):
            for layer in layers:
                got = analytic.predict_layer(layer, g, kernel, factors=fac)
                assert got == fresh[(layer.name, g.name, fac is None)], (op, layer.name, g.name)


def test_memoized_counts_are_read_only_and_the_public_copy_is_not():
    layer, kernel = ConvLayer(2, 16, 12, 12, 32, 3, 3, pad=1, name="x"), KernelConfig()
    counts = l1_counts(layer, kernel)
    with pytest.raises(TypeError):
        counts["sec_A"] = 0
    public = analytic.l1_counts_for(layer, kernel)
    public["sec_A"] = -1
    assert l1_counts(layer, kernel)["sec_A"] > 0
