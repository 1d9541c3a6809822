"""analytic._l2.hash_dispersion against the naive hierarchy's own slice and set functions, and the
cliff it implies against a sweep through the naive L2."""
import math

from hypothesis import given, settings, strategies as st

import analytic
import simcore
from analytic._l2 import cliff_params, hash_dispersion, l2_miss_prob
from simcore import CacheConfig
from tests.naive_cache import NaiveCache, NaiveHierarchy


def naive_dispersion(slices, sets, ways, index, lines=None):
    """Variance / mean of the lines per (slice, set) of ``lines`` (default 0 .. slices*sets*ways - 1), mapped
    as NaiveHierarchy maps them."""
    slice_cache = NaiveCache(CacheConfig(sets * ways * 128, ways, 128, 32, index))
    counts = {}
    for line in range(slices * sets * ways) if lines is None else lines:
        h = line ^ (line >> 7) ^ (line >> 14) if index == "xor" else line
        key = (h % slices, slice_cache.set_index(line // slices))
        counts[key] = counts.get(key, 0) + 1
    values = [counts.get((s, t), 0) for s in range(slices) for t in range(sets)]
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values) / mean


@given(st.integers(1, 40), st.sampled_from([4, 8, 16, 32, 64]), st.integers(1, 8),
       st.sampled_from(["xor", "linear"]))
@settings(max_examples=60, deadline=None)
def test_dispersion_is_the_naive_mapping(slices, sets, ways, index):
    want = naive_dispersion(slices, sets, ways, index)
    assert math.isclose(hash_dispersion(slices, sets, ways, index), want, rel_tol=1e-9, abs_tol=1e-12)


@given(st.integers(0, 8), st.sampled_from([8, 32, 128]), st.integers(2, 24))
@settings(max_examples=30, deadline=None)
def test_power_of_two_slices_spread_lines_evenly(log_slices, sets, ways):
    assert hash_dispersion(1 << log_slices, sets, ways, "xor") == 0.0


def test_stock_gpus():
    # v100 (64 slices) is even; a100 (160) and h100 (80) scatter lines about half as much as at random
    f = analytic.ReuseFactors()
    v100, a100, h100 = (simcore.gpu(n) for n in ("v100", "a100", "h100"))
    assert cliff_params(v100, f) == (f.l2_cliff_spread, 0.0)
    assert 0.4 < cliff_params(a100, f)[1] < 0.6
    assert 0.25 < cliff_params(h100, f)[1] < 0.45


def _sweep_miss(slices, sets, ways, x):
    """Second-sweep miss fraction of int(x * capacity) contiguous lines through the naive L2."""
    l1 = CacheConfig(128 * 4, 4, 128, 32, "linear")
    h = NaiveHierarchy(l1, 1, CacheConfig(sets * ways * 128, ways, 128, 32, "xor"), slices)
    lines = int(x * slices * sets * ways)
    missed = 0
    for rep in range(2):
        for line in range(lines):
            cache = h.l2[(line ^ (line >> 7) ^ (line >> 14)) % slices]
            outcome = cache.access(line * 128, set_line=line // slices)
            missed += rep == 1 and outcome != "hit"
    return missed / lines


def test_cliff_width_follows_the_dispersion():
    # 12 slices of 64 sets (slices not a power of two): lines scatter over the sets and the cliff is
    # gradual, as the model's spread says; 16 slices: every set holds its share, all hit below the
    # capacity, all miss once every set has more lines than ways
    assert _sweep_miss(16, 16, 8, 0.95) == 0.0 and _sweep_miss(16, 16, 8, 1.15) == 1.0
    d = hash_dispersion(12, 64, 8, "xor")
    assert d > 0.4
    for x in (0.7, 0.8, 1.0, 1.2):
        measured = _sweep_miss(12, 64, 8, x)
        model = l2_miss_prob(x, 8.0, (0.0, d))
        assert 0.02 < measured < 0.98
        assert abs(measured - model) < 0.1, (x, measured, model)
