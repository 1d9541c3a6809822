"""The model's glue helpers that replaced numpy expressions on small arrays (compiled, or in Python) against
those numpy expressions, written out here as the slow references: equal, or within a few ulps where the
numpy form sums pairwise."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from analytic._common import even_picks
from analytic._followers import follower_misses, mean_gap, window_lines
from analytic._issue_order import relative_valid
from analytic._l2 import l2_miss_prob
from analytic._reuse import halo_spread
from analytic._schedule import tile_m_classes, with_columns

_floats = st.floats(0.0, 50.0, allow_nan=False)


@given(st.integers(1, 5000), st.integers(1, 64))
@settings(max_examples=300, deadline=None)
def test_even_picks_is_numpys_rounded_linspace(n, most):
    k = min(n, most)
    want = np.unique(np.linspace(0, n - 1, k).round().astype(np.int64))
    got = even_picks(n, k)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()


def test_even_picks_hand_made():
    assert even_picks(1, 1).tolist() == [0]
    assert even_picks(10, 10).tolist() == list(range(10))
    # 0, 1.5, 3: 1.5 rounds half to even, to 2
    assert even_picks(4, 3).tolist() == [0, 2, 3]


@given(st.integers(1, 9), st.integers(1, 8), st.data())
@settings(max_examples=100, deadline=None)
def test_relative_valid_against_numpy(npos, nq, data):
    valid = np.array(data.draw(st.lists(st.one_of(st.just(-1.0), _floats), min_size=npos * nq, max_size=npos * nq)),
                     np.float64).reshape(npos, nq)
    rows_t = np.array(data.draw(st.lists(st.floats(0.0, 1e4), min_size=npos, max_size=npos)), np.float64)
    M = float(data.draw(st.integers(1, 10 ** 5)))
    want = np.where(valid < 0.0, 1.0, valid / np.maximum(rows_t / M, 1e-12)[:, None])
    assert np.array_equal(relative_valid(valid, rows_t, M), want)


@given(st.integers(1, 12), st.integers(1, 30), st.data())
@settings(max_examples=150, deadline=None)
def test_halo_spread_against_numpy(npos, nd, data):
    draw = lambda: np.array(data.draw(st.lists(_floats, min_size=npos * nd, max_size=npos * nd)),
                            np.float64).reshape(npos, nd)
    hist, whole = draw(), draw()
    cross = np.maximum(0.0, hist[:, 0] - whole[:, 0])
    gain = np.maximum(0.0, whole - hist)
    gain[:, 0] = 0.0
    norm = gain.sum(axis=1)
    want = np.where(norm[:, None] > 0, gain * (cross / np.where(norm > 0, norm, 1.0))[:, None], 0.0)
    want[:, 0] = 0.0            # distance 0 is never spread to (numpy's 0 x inf there is nan: a subnormal norm)
    np.testing.assert_allclose(halo_spread(hist, whole), want, rtol=1e-12, atol=0.0)


@given(st.integers(0, 20), st.data())
@settings(max_examples=100, deadline=None)
def test_mean_gap_against_window_lines(n, data):
    pairs = st.lists(st.integers(0, 40), min_size=2 * n, max_size=2 * n)
    rounds = np.array(data.draw(pairs), np.int64).reshape(n, 2)
    wraps = np.array(data.draw(pairs), np.int64).reshape(n, 2)
    a, b = data.draw(_floats), data.draw(_floats)
    gap = window_lines(rounds - wraps, a, b)
    want = float(np.maximum(gap, 0.0).mean()) if n else 0.0
    assert mean_gap(rounds, wraps, a, b) == pytest.approx(want, rel=1e-12, abs=1e-12)


@given(st.integers(0, 20), st.data())
@settings(max_examples=100, deadline=None)
def test_follower_misses_against_each_window(n, data):
    counts = np.array(data.draw(st.lists(st.integers(0, 40), min_size=2 * n, max_size=2 * n)), np.int64).reshape(n, 2)
    a, b = data.draw(_floats), data.draw(_floats)
    cap, ways, cliff = 1000.0, 16.0, (0.9, 1.0)
    want = sum(l2_miss_prob(x / cap, ways, cliff) for x in window_lines(counts, a, b)) * 0.5 * 3.0
    assert follower_misses(counts, a, b, 0.5, 3.0, cap, ways, cliff) == pytest.approx(want, rel=1e-12, abs=1e-15)


@given(st.integers(1, 4096), st.integers(1, 10 ** 6))
@settings(max_examples=200, deadline=None)
def test_tile_m_classes(tm, M):
    tiles_m = -(-M // tm)
    last_m = M - (tiles_m - 1) * tm
    want = [(tm, (tiles_m - 1) * tm / M), (last_m, last_m / M)] if last_m != tm else [(tm, 1.0)]
    assert tile_m_classes(tm, tiles_m, M).tolist() == [list(map(float, row)) for row in want]


def test_with_columns():
    cls = np.arange(12, dtype=np.float64).reshape(3, 4)
    want = np.hstack((cls, np.tile(np.array([[0.25, 7.5]]), (3, 1))))
    assert np.array_equal(with_columns(cls, 0.25, 7.5), want)
    assert with_columns(np.zeros((0, 4)), 1.0, 2.0).shape == (0, 6)


@given(st.lists(st.integers(0, 400), min_size=0, max_size=30), st.integers(0, 8), st.sampled_from([8, 16, 32]),
       st.floats(1.0, 5e4), st.sampled_from([2.0, 16.0]))
@settings(max_examples=100, deadline=None)
def test_far_windows_against_the_loop(dist, span, tk, per_round, ways):
    """wgrad's far-reuse windows: each distance's rows, window and miss chance as the Python loop had them."""
    from analytic._wgrad import _far_windows
    cap, cliff = 4096.0, (0.4, 0.2)
    rows, windows, probs = _far_windows(np.array(dist, np.int64), span, tk, per_round, cap, ways, cliff)
    for i, d in enumerate(dist):
        want_rows = max(d - span, 1.0)
        want_window = want_rows / tk * per_round
        assert (rows[i], windows[i]) == (want_rows, want_window)
        assert probs[i] == l2_miss_prob(want_window / cap, ways, cliff)
