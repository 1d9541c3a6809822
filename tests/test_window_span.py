"""analytic._reuse.window_span against the input pixels a single tile's filter positions touch, counted
one by one (one-dimensional filters, where the histogram's nearest-predecessor overlap is the union)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._reuse import reuse_histogram, window_span


def naive_span(W, S, sw, pw, dw, Q, reverse):
    """(pixels of the positions before t + pixels of those after t) / all pixels, per step t."""
    order = list(range(S))[::-1] if reverse else list(range(S))
    touched = []
    for s in order:
        touched.append({q * sw - pw + s * dw for q in range(Q) if 0 <= q * sw - pw + s * dw < W})
    everything = set().union(*touched)
    out = []
    for t in range(S):
        before = set().union(*touched[:t]) if t else set()
        after = set().union(*touched[t + 1:]) if t + 1 < S else set()
        out.append((len(before) + len(after)) / len(everything))
    return out


@given(st.integers(4, 40), st.integers(1, 7), st.integers(1, 3), st.integers(0, 3), st.integers(1, 2),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_span_of_a_one_dimensional_filter(W, S, sw, pw, dw, reverse):
    Q = (W + 2 * pw - (S - 1) * dw - 1) // sw + 1
    if Q < 1 or (S - 1) * dw >= W + 2 * pw:
        return
    args = (1, 1, W, 1, S, 1, sw, 0, pw, 1, dw, 1, Q, 10 ** 6, 1, np.zeros(sw), 1.0)
    fwd = reuse_histogram(*args, reverse)
    back = reuse_histogram(*args, not reverse)
    got = window_span(fwd, back)
    want = naive_span(W, S, sw, pw, dw, Q, reverse)
    assert all(abs(g - w) < 1e-9 for g, w in zip(got, want)), (list(got), want)
