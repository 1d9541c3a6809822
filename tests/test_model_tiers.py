"""The tiered model (analytic._tiers): interpreted and compiled kernels give the same predictions, the
switch between them, and the swap of dispatchers that makes the interpreted tier."""
from __future__ import annotations

import importlib
import pkgutil
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba.core.registry import CPUDispatcher

import analytic
import simcore
from analytic import _tiers
from analytic._memo import clear_memo
from traces import KERNELS, KernelConfig, network
from validation.random_cases import random_case


@pytest.fixture
def fresh_tiers(monkeypatch):
    """A process state with no prediction counted and no mode set (restored afterwards)."""
    monkeypatch.setitem(_tiers._state, "count", 0)
    monkeypatch.setitem(_tiers._state, "mode", None)
    monkeypatch.setitem(_tiers._state, "settled", False)
    monkeypatch.delenv("DELTASIM_MODEL_KERNELS", raising=False)
    yield
    assert _tiers._state["active"] == 0 and not _tiers._state["saved"]


def _both(layer, gpu, kernel):
    """(interpreted, compiled) predictions of one case, each computed in full (the memo of
    GPU-independent figures cleared before each)."""
    previous = analytic.set_model_kernels("interpreted")
    try:
        clear_memo()
        interpreted = analytic.predict_layer(layer, gpu, kernel)
        analytic.set_model_kernels("compiled")
        clear_memo()
        compiled = analytic.predict_layer(layer, gpu, kernel)
    finally:
        analytic.set_model_kernels(previous)
    return interpreted, compiled


def _probe():
    """Whether the model's kernels are compiled right now, seen from inside a tiered call."""
    return isinstance(importlib.import_module("analytic._groups").group_counts, CPUDispatcher)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10_000))
def test_interpreted_and_compiled_predictions_are_identical_on_random_cases(seed, index):
    case = random_case(seed, index, max_sectors=1 << 40)
    interpreted, compiled = _both(case.layer, case.gpu, case.kernel)
    assert interpreted.keys() == compiled.keys()
    assert interpreted == compiled


@pytest.mark.parametrize("net, gpu, kernel", [
    ("resnet50", "h100", KernelConfig(op="dgrad")),              # strided dgrad sub-problems
    ("vgg16", "v100", KernelConfig(op="wgrad")),                 # wgrad's own driver
    ("mobilenet_v2", "a100", KernelConfig()),                    # grouped and depthwise
    ("googlenet", "a100", KERNELS["sm80_tensorop_128x128x32_128t"]),
    ("alexnet", "v100", KernelConfig(layout="nchw")),
])
def test_interpreted_and_compiled_predictions_are_identical_on_networks(net, gpu, kernel):
    for layer in network(net, batch=8):
        interpreted, compiled = _both(layer, simcore.gpu(gpu), kernel)
        assert interpreted == compiled, layer.name


def test_auto_interprets_the_first_predictions_then_compiles(fresh_tiers, monkeypatch):
    monkeypatch.setattr(_tiers, "INTERPRETED_PREDICTIONS", 3)
    probe = _tiers.tiered(_probe)
    assert [probe() for _ in range(5)] == [False, False, False, True, True]
    assert _probe()                                  # outside a call: the dispatchers are back
    assert _tiers._state["settled"]                  # and the process stays compiled
    monkeypatch.setenv("DELTASIM_MODEL_KERNELS", "interpreted")
    assert probe()


def test_nested_calls_count_once_and_stay_in_their_tier(fresh_tiers, monkeypatch):
    monkeypatch.setattr(_tiers, "INTERPRETED_PREDICTIONS", 2)
    inner = _tiers.tiered(_probe)
    outer = _tiers.tiered(lambda: [inner(), inner(), inner()])
    assert outer() == [False, False, False]
    assert _tiers._state["count"] == 1
    assert outer() == [False, False, False]
    assert outer() == [True, True, True]


def test_forced_modes_and_the_environment(fresh_tiers, monkeypatch):
    probe = _tiers.tiered(_probe)
    monkeypatch.setenv("DELTASIM_MODEL_KERNELS", "compiled")
    assert probe() and analytic.model_kernels() == "compiled"
    monkeypatch.setenv("DELTASIM_MODEL_KERNELS", "interpreted")
    assert not any(probe() for _ in range(_tiers.INTERPRETED_PREDICTIONS + 2))
    assert analytic.set_model_kernels("compiled") is None
    assert probe()
    assert analytic.set_model_kernels(None) == "compiled"
    assert not probe()
    monkeypatch.setenv("DELTASIM_MODEL_KERNELS", "fast")
    with pytest.raises(ValueError, match="DELTASIM_MODEL_KERNELS.*'fast'"):
        probe()
    with pytest.raises(ValueError, match="mode.*'turbo'"):
        analytic.set_model_kernels("turbo")


def test_an_error_inside_an_interpreted_call_puts_the_dispatchers_back(fresh_tiers):
    def fail():
        assert not _probe()
        raise ValueError("inside")
    with pytest.raises(ValueError, match="inside"):
        _tiers.tiered(fail)()
    assert _probe() and _tiers._state["active"] == 0


def test_threads_crossing_the_switch_get_the_compiled_results(fresh_tiers, monkeypatch):
    monkeypatch.setattr(_tiers, "INTERPRETED_PREDICTIONS", 6)
    gpu = simcore.gpu("a100")
    layers = network("resnet50", batch=4)[:24]
    analytic.set_model_kernels("compiled")
    expected = [analytic.predict_layer(layer, gpu) for layer in layers]
    analytic.set_model_kernels(None)
    start = threading.Barrier(4)

    def predict(chunk):
        start.wait()
        return [analytic.predict_layer(layer, gpu) for layer in chunk]

    with ThreadPoolExecutor(4) as pool:
        got = [p for part in pool.map(predict, [layers[i::4] for i in range(4)]) for p in part]
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    assert _tiers._state["count"] == 6            # each thread's calls count, overlapping or not


def test_every_module_binding_a_model_kernel_is_swapped_before_lazy_imports():
    """A module that binds an analytic dispatcher and were first imported during an interpreted call
    would bind the Python function for good (and its kernels would not compile): KERNEL_MODULES must
    list every such module, so that the swap imports them first."""
    holders = set()
    for info in pkgutil.iter_modules(analytic.__path__, "analytic."):
        module = importlib.import_module(info.name)
        if any(isinstance(v, CPUDispatcher) and v.py_func.__module__.startswith("analytic.")
               for v in vars(module).values()):
            holders.add(info.name)
    assert holders and holders <= set(_tiers.KERNEL_MODULES), holders - set(_tiers.KERNEL_MODULES)
