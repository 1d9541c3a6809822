"""`analytic._geometry._tap_sectors` (the filter sectors a strided-dgrad sub-problem's taps cover, for
positions narrower than a sector, where the model uses it) against every filter's bytes counted one by
one."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analytic._geometry import _tap_sectors


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 40), C=st.integers(1, 16), R=st.integers(1, 7), S=st.integers(1, 7),
       eb=st.sampled_from([2, 4]), sh=st.integers(1, 4), sw=st.integers(1, 4), data=st.data())
def test_tap_sectors_count_every_filters_distinct_sectors(K, C, R, S, eb, sh, sw, data):
    r0 = data.draw(st.integers(0, min(sh, R) - 1))
    s0 = data.draw(st.integers(0, min(sw, S) - 1))
    rows, cols = range(r0, R, sh), range(s0, S, sw)
    sectors = set()
    for k in range(K):
        for r in rows:
            for s in cols:
                start = ((k * R + r) * S + s) * C * eb
                for byte in range(start, start + C * eb):
                    sectors.add(byte // 32)
    if C * eb > 32:                               # (the function's fast path: positions wider than a sector)
        return
    assert _tap_sectors(K, C, R, S, eb, rows, cols) == len(sectors)
