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


def test_layers_of_one_shape_share_the_memo_and_other_shapes_do_not():
    """The memo looks layers up by shape: a renamed copy finds the figures of the original (the same
    object), a layer that differs in any one field does not, and predictions do not depend on names."""
    kernel = KernelConfig()
    layer = ConvLayer(2, 32, 14, 14, 64, 3, 3, pad=1, name="block1.conv")
    clear_memo()
    counts = l1_counts(layer, kernel)
    assert l1_counts(dataclasses.replace(layer, name="block2.conv"), kernel) is counts
    for change in ({"n": 3}, {"c": 64}, {"h": 15}, {"w": 13}, {"k": 32}, {"r": 1, "pad": 0}, {"s": 5, "pad": 2},
                   {"stride": 2}, {"pad": 0}, {"dilation": 2, "pad": 2}, {"groups": 2}):
        other = dataclasses.replace(layer, **change)
        assert l1_counts(other, kernel) is not counts, change
        assert dict(l1_counts(other, kernel)) == dict((clear_memo(), l1_counts(other, kernel))[1]), change
    gpu = simcore.gpu("a100")
    for grouped in (layer, dataclasses.replace(layer, groups=32, k=32)):
        clear_memo()
        named = analytic.predict_layer(grouped, gpu, kernel)
        assert analytic.predict_layer(dataclasses.replace(grouped, name="other"), gpu, kernel) == named
        clear_memo()
        assert analytic.predict_layer(dataclasses.replace(grouped, name="other"), gpu, kernel) == named


def test_a_full_memo_evicts_its_oldest_entries_also_under_threads():
    """At ``maxsize`` entries the oldest goes; threads filling one memo at once neither lose a result nor
    let it grow past its size."""
    from concurrent.futures import ThreadPoolExecutor

    from analytic._memo import memo

    calls = []

    @memo(maxsize=8)
    def square(x):
        calls.append(x)
        return x * x

    for x in range(10):
        assert square(x) == x * x
    assert list(square.table) == [(x,) for x in range(2, 10)]
    assert square(9) == 81 and calls.count(9) == 1          # still held: not computed again
    assert square(0) == 0 and calls.count(0) == 2           # evicted: computed again
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(square, [x % 40 for x in range(4000)]))
    assert results == [(x % 40) ** 2 for x in range(4000)]
    assert len(square.table) <= 8


def test_a_memoized_prediction_is_a_new_dict_that_the_caller_may_change():
    """Layers of one shape share one memoized prediction (`model._predict_shape`): each call returns its own
    dict, so a caller that changes one (a report adding its columns) changes no later prediction."""
    clear_memo()
    layer, gpu, kernel = ConvLayer(2, 32, 14, 14, 64, 3, 3, pad=1, name="a"), simcore.gpu("v100"), KernelConfig()
    first = analytic.predict_layer(layer, gpu, kernel)
    expected = dict(first)
    first["dram__sectors_read.sum"] = -1.0
    first["extra"] = "x"
    second = analytic.predict_layer(dataclasses.replace(layer, name="b"), gpu, kernel)
    assert second == expected and second is not first
    assert analytic.predict_network([layer, layer], gpu, kernel) == [expected, expected]


def test_the_memo_keys_a_layer_by_shape_wherever_its_layer_parameter_sits():
    """`_Memo` finds the parameter named ``layer`` once; a `ConvLayer` there keys by shape (first or later
    position), one passed elsewhere keys by itself (name included), and a call without it keys by its
    arguments."""
    from analytic._memo import memo

    calls = []

    @memo(16)
    def first(layer, x):
        calls.append("first")
        return (layer.c, x)

    @memo(16)
    def second(x, layer):
        calls.append("second")
        return (x, layer.k)

    @memo(16)
    def other(a, b):
        calls.append("other")
        return (a.c, b)

    a = ConvLayer(1, 8, 6, 6, 16, 3, 3, pad=1, name="a")
    b = dataclasses.replace(a, name="b")
    assert first(a, 1) == first(b, 1) == (8, 1) and calls == ["first"]
    assert second(2, a) == second(2, b) == (2, 16) and calls == ["first", "second"]
    assert other(a, 3) == other(b, 3) == (8, 3) and calls == ["first", "second", "other", "other"]
    assert first(dataclasses.replace(a, c=16), 1) == (16, 1) and calls[-1] == "first"
