"""pytest-benchmark versions of bench_simcore.py on a small stream (plain tests with --benchmark-disable)."""
import numba
import pytest

from bench_simcore import conv_stream, make_hierarchy
from simcore import CacheConfig, simulate_trace
from simcore import metrics as M


@pytest.fixture(scope="module")
def stream():
    return conv_stream(batch=1)


def test_bench_simulate_trace(benchmark, stream):
    sectors = stream[5]
    config = CacheConfig(128 * 1024, 256, 128, 32)
    stats = benchmark(simulate_trace, sectors, config)
    assert stats.accesses == sectors.shape[0]
    assert 0 < stats.hits < stats.accesses


@pytest.mark.parametrize("threads", [1, 2])
def test_bench_hierarchy(benchmark, stream, threads):
    if threads > numba.config.NUMBA_NUM_THREADS:
        pytest.skip("needs 2 Numba threads")
    before = numba.get_num_threads()
    numba.set_num_threads(threads)

    def run():
        h = make_hierarchy()
        h.parallel = threads > 1
        h.feed(*stream)
        return h.metrics()

    try:
        m = benchmark(run)
    finally:
        numba.set_num_threads(before)
    assert m[M.L1_LD_SECTORS] == stream[5].shape[0]
    assert m[M.L2_RD_SECTORS] == m[M.L1_LD_MISSES]
