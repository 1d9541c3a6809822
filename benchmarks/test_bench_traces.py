"""pytest-benchmark: the request-stream generator and simulate_layer on one mid-size layer.

Run with ``pytest benchmarks/test_bench_traces.py --benchmark-enable``; under the default
``--benchmark-disable`` each runs once, as a smoke test.
"""
from __future__ import annotations

from simcore import gpu
from simcore import metrics as M
from traces import ConvLayer, KernelConfig, iter_request_chunks, simulate_layer

LAYER = ConvLayer(1, 128, 28, 28, 128, 3, 3, pad=1, name="conv-128x28x28")


def _generate():
    return sum(len(chunk.sectors) for chunk in iter_request_chunks(LAYER, gpu("v100"), KernelConfig()))


def test_bench_generator(benchmark):
    sectors = benchmark(_generate)
    assert sectors > 0


def test_bench_simulate_layer(benchmark):
    result = benchmark(simulate_layer, LAYER, gpu("v100"), KernelConfig(), jobs=1)
    assert result[M.L1_LD_SECTORS] == result[M.L1_LD_HITS] + result[M.L1_LD_MISSES]


def test_training_step_smoke():
    from benchmarks.bench_traces import training_step
    seconds, sectors = training_step([ConvLayer(1, 16, 12, 12, 32, 3, 3, pad=1, stride=2)], gpu("v100"), 1)
    assert set(seconds) == {"fprop", "dgrad", "wgrad"} and all(v > 0 for v in sectors.values())
