"""`analytic._window._nchw_run_sectors` (nchw, one filter position: the sectors each M tile's run of rows
covers in every plane) against a count of every tile, plane and element."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analytic._geometry import Window
from analytic._window import _RUN_SAMPLES, _nchw_run_sectors


def _naive(N, C, H, W, sh, sw, ph, pw, P, Q, tm, eb):
    M = N * P * Q
    total = 0
    for start in range(0, M, tm):
        for c in range(C):
            sectors = set()
            for m in range(start, min(start + tm, M)):
                n, rest = divmod(m, P * Q)
                p, q = divmod(rest, Q)
                y, x = p * sh - ph, q * sw - pw
                if 0 <= y < H and 0 <= x < W:
                    sectors.add(((((n * C + c) * H + y) * W + x) * eb) // 32)
            total += len(sectors)
    return total


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 3), H=st.integers(1, 12), W=st.integers(1, 12), s=st.integers(1, 3), pad=st.integers(0, 1),
       tm=st.sampled_from([32, 64, 128]), eb=st.sampled_from([2, 4]))
def test_run_sectors_count_every_tiles_runs(N, H, W, s, pad, tm, eb):
    C = 32                                    # every alignment of a plane to the sector, equally often
    P, Q = (H + 2 * pad - 1) // s + 1, (W + 2 * pad - 1) // s + 1
    if -(-N * P * Q // tm) > _RUN_SAMPLES:    # sampled tiles: an estimate, not checked here
        return
    win = Window(N, C, H, W, 1, 1, s, s, pad, pad, 1, 1, P, Q, False)
    got = _nchw_run_sectors(win, tm, eb, 32)
    assert abs(got - _naive(N, C, H, W, s, s, pad, pad, P, Q, tm, eb)) < 1e-6
