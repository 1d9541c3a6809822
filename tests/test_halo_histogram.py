"""A's halo histogram (analytic._window._halo_histogram): the first touches of a tile that a tile without
edges would not have, spread over the positions of their earlier reads, and what it must conserve."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analytic._geometry import geometry
from analytic._window import a_window
from traces import ConvLayer, KernelConfig

from analytic._l2 import l2_miss_prob
from analytic._reuse import halo_misses, reuse_histogram


def _tables(layer, kernel):
    win = geometry(layer, kernel).win
    out = a_window(win, kernel.tile_m, kernel.tile_k, kernel.elem_bytes, True, 32, 128, 1.0)
    return win, out[0], out[-1]


@given(n=st.integers(1, 3), hw=st.integers(5, 20), r=st.sampled_from([1, 3, 5, 7]), s=st.sampled_from([1, 3, 7]),
       stride=st.integers(1, 2), tile_m=st.sampled_from([32, 64, 128]))
@settings(max_examples=60, deadline=None)
def test_cross_tile_first_touches_are_conserved(n, hw, r, s, stride, tile_m):
    if r > hw + r - 1 or s > hw + s - 1:
        return
    layer = ConvLayer(n, 16, hw, hw, 32, r, s, stride=stride, pad=(r // 2, s // 2))
    kernel = KernelConfig(tile_m=tile_m)
    win, hist, (x, rows) = _tables(layer, kernel)
    whole = reuse_histogram(win.n, win.h, win.w, win.r, win.s, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw,
                            win.p, win.q, layer.gemm_m, 1, np.zeros(max(win.sw, 1)), 0.0, win.reverse)
    assert (x >= 0).all() and (x[:, 0] == 0).all()
    assert np.all(np.triu(x, 1) == 0)                      # an earlier read: d <= t
    # what each position's first touches exceed the untiled count by is spread over d, no more
    extra = np.maximum(0.0, hist[:, 0] - whole[:, 0])
    spread = x.sum(axis=1)
    room = np.maximum(0.0, whole - hist)[:, 1:].sum(axis=1)
    np.testing.assert_allclose(spread, np.where(room > 0, extra, 0.0), rtol=1e-9, atol=1e-9)
    assert rows.shape == (r * s, r * s)


def test_no_halo_without_a_filter_or_with_one_tile():
    # a 1x1 filter reads each row's own pixel: no tile reads another's
    _, _, (x, _) = _tables(ConvLayer(2, 16, 10, 10, 32, 1, 1), KernelConfig(tile_m=32))
    assert not x.any()
    # one tile holds every row: nothing crosses a tile edge
    _, _, (x, _) = _tables(ConvLayer(1, 16, 8, 8, 32, 3, 3, pad=1), KernelConfig(tile_m=128))
    assert not x.any()


def test_a_7x1_filter_on_one_row_tiles_reads_its_halo_from_the_tiles_beside():
    # 32-row tiles of 32-wide outputs: a tile is one output row; a 7x1 filter's taps read the rows of the
    # six tiles around it, so almost every first touch past the first tap's is a neighbour's row, read
    # one tap (one position) before by the tile one row down
    layer = ConvLayer(1, 16, 32, 32, 32, 7, 1, pad=(3, 0))
    _, hist, (x, _) = _tables(layer, KernelConfig(tile_m=32))
    first_after = hist[1:, 0].sum()
    assert x.sum() > 0.8 * first_after
    assert x[:, 1].sum() > 0.8 * x.sum()


@given(rs=st.integers(1, 6), classes=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_halo_misses_against_a_python_sum(rs, classes, seed):
    """`_reuse.halo_misses` is the sum over (t, d <= t) and wave classes of weight x rows x the L2 miss
    probability of the bounded window, written out here term by term."""
    rng = np.random.default_rng(seed)
    x = np.tril(rng.uniform(0, 50, (rs, rs)))
    x[:, 0] = 0.0
    rows = rng.uniform(10, 400, (rs, rs))
    cls = np.column_stack([rng.uniform(1e-3, 5e-2, classes), rng.uniform(0.2, 3.0, classes),
                           rng.uniform(0, 1e-2, classes), rng.uniform(0.1, 2.0, classes)])
    tile_lines, ways, cliff = 0.75, 16.0, (0.12, 0.3)
    want = 0.0
    for t in range(rs):
        for d in range(1, t + 1):
            for a, u, b, w in cls:
                want += w * x[t, d] * l2_miss_prob(min(tile_lines * rows[t, d] * a, u) + d * b, ways, cliff)
    got = halo_misses(x, rows, tile_lines, cls, ways, cliff, np.zeros(0))
    assert abs(got - want) <= 1e-9 * max(1.0, abs(want))
