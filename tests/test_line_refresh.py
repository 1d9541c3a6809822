"""The L1 line refreshes of nhwc pixels that are not whole lines (`analytic._reuse.line_share`,
`refresh_matrix`, `_chain_hit`) against references that enumerate pixels, rows and refresh patterns."""
import itertools
import math

import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._counts import _ramp
from analytic._l2 import l2_miss_prob
from analytic._reuse import _chain_hit, line_share, refresh_matrix, reuse_histogram, window_rows

LINE, SEC = 128, 32


def naive_share(pitch, width, sw):
    """Pixel by pixel along a row of a tensor at every base offset: the fraction of the sectors of pixel
    w's access (``width`` bytes) whose line pixel w - k's or w + sw - k's access also touches."""
    out = [0.0] * max(sw, 1)
    if pitch % LINE == 0 or pitch < SEC:
        return out
    step = math.gcd(math.gcd(pitch, width), LINE)
    period = LINE // math.gcd(pitch, LINE)
    for k in range(1, sw):
        fractions = []
        for base in range(0, LINE, step):
            for w in range(period, 2 * period):
                def span(x):
                    start = base + x * pitch
                    return start, start + width - 1
                lo, hi = span(w)
                near = set()
                for x in (w - k, w + sw - k):
                    a, b = span(x)
                    near |= set(range(a // LINE, b // LINE + 1))
                sectors = range(lo // SEC, hi // SEC + 1)
                fractions.append(sum((x * SEC) // LINE in near for x in sectors) / len(sectors))
        # every base offset holds the same number of pixels: a plain mean is the average over offsets
        out[k] = sum(fractions) / len(fractions)
    return out


@given(st.integers(8, 400), st.sampled_from([2, 4]), st.sampled_from([8, 16, 32]), st.integers(1, 4))
@settings(max_examples=150, deadline=None)
def test_line_share_against_pixels(channels, elem, tk, sw):
    pitch, width = channels * elem, min(channels, tk) * elem
    got = line_share(pitch, width, sw, LINE, SEC)
    want = naive_share(pitch, width, sw)
    assert np.allclose(got, want), (list(got), want)


def test_line_share_hand_cases():
    # 96-byte pixels, stride 2: both end lines are shared with a neighbour at every offset
    assert list(line_share(96, 96, 2, LINE, SEC)) == [0.0, 1.0]
    # whole lines (C = 64 fp16) and sector-narrow pixels: nothing
    assert not line_share(128, 128, 2, LINE, SEC).any() and not line_share(16, 16, 2, LINE, SEC).any()
    # stride 1: every tap is on the grid
    assert not line_share(96, 96, 1, LINE, SEC).any()


def naive_refresh_rows(W, S, sw, pw, dw, Q):
    """One output row in one tile: per (t, u), the rows at tap t whose pixel's neighbour k = ddw mod sw
    columns before or sw - k after is read at tap u (k != 0)."""
    cols = [{q: q * sw - pw + s * dw for q in range(Q) if 0 <= q * sw - pw + s * dw < W} for s in range(S)]
    out = np.zeros((S, S))
    rows = np.zeros(S)
    for t in range(S):
        rows[t] = len(cols[t])
        for u in range(t):
            k = ((t - u) * dw) % sw
            if k == 0:
                continue
            read = set(cols[u].values())
            out[t, u] = sum(1 for w in cols[t].values() if (w - k) in read or (w + sw - k) in read)
    return out, rows


@given(st.integers(6, 60), st.integers(2, 7), st.integers(2, 4), st.integers(0, 3), st.integers(1, 2))
@settings(max_examples=150, deadline=None)
def test_refresh_matrix_against_rows(W, S, sw, pw, dw):
    Q = (W + 2 * pw - (S - 1) * dw - 1) // sw + 1
    if Q < 1 or (S - 1) * dw >= W + 2 * pw or pw >= S * dw:
        return
    share = np.zeros(sw)
    share[1:] = 1.0
    ref = refresh_matrix(1, 1, W, 1, S, 1, sw, 0, pw, 1, dw, 1, Q, 10 ** 6, 1, 0.0, False, share)
    want, rows = naive_refresh_rows(W, S, sw, pw, dw, Q)
    for t in range(S):
        for u in range(t):
            # the model overlaps the row ranges shifted by a fractional column offset: half a row off
            # at each end of the range
            assert abs(ref[t, u] * rows[t] - want[t, u]) <= 1.0 + 1e-9, (t, u, ref[t, u] * rows[t], want[t, u])


def naive_chain_hit(ref, t, d, keep):
    """Every subset of the positions in between as the line's touches, with its probability; the line
    survives if it is kept over each stretch between consecutive touches (keep(u, length))."""
    between = list(range(t - d + 1, t))
    total = 0.0
    for pattern in itertools.product((0, 1), repeat=len(between)):
        prob = 1.0
        touches = [t - d]
        for u, on in zip(between, pattern):
            prob *= ref[t, u] if on else 1.0 - ref[t, u]
            if on:
                touches.append(u)
        touches.append(t)
        survive = 1.0
        for v, u in zip(touches, touches[1:]):
            survive *= keep(u, u - v)
        total += prob * survive
    return total


@given(st.integers(1, 3), st.integers(2, 5), st.integers(0, 2), st.integers(10, 60),
       st.floats(0.0, 30.0), st.floats(0.1, 1.0), st.booleans(), st.data())
@settings(max_examples=120, deadline=None)
def test_chain_hit_against_refresh_patterns(R, S, pw, W, other, bfrac, in_l2, data):
    sw = 2
    Q = (W + 2 * pw - (S - 1) - 1) // sw + 1
    if Q < 2 or pw >= S:
        return
    hist = reuse_histogram(1, 3 * R, W, R, S, 1, sw, 0, pw, 1, 1, 3 * R - R + 1, Q, 10 ** 6, 1, np.zeros(sw),
                           0.0, False)
    RS = R * S
    win = window_rows(hist, np.zeros(RS, np.int64), 1)
    ref = np.array([[data.draw(st.sampled_from([0.0, 0.3, 1.0])) if u < t else 0.0 for u in range(RS)]
                    for t in range(RS)])
    scale_a, nsa, ways, extra, lo, hi = 0.5, 4.0, data.draw(st.sampled_from([4.0, 8.0, 16.0])), 0.0, 0.95, 1.1
    l2a, l2b, l2_ways, l2_cliff = data.draw(st.sampled_from([0.01, 0.05])), 0.02, 16.0, (0.12, 0.3)
    l2u = data.draw(st.sampled_from([1e30, 0.2]))     # the wave's distinct A lines: no bound, or one

    def keep(u, g):
        if in_l2:
            return 1.0 - l2_miss_prob(min(scale_a * win[u, g] * l2a, l2u) + g * l2b, l2_ways, l2_cliff)
        return _ramp((scale_a * win[u, g] / nsa + min(g, (g - 1) * bfrac + 1.0) * other + extra) / ways, lo, hi)

    for t in range(1, RS):
        for d in range(1, min(t, 8) + 1):
            got = _chain_hit(ref, t, d, win, scale_a, nsa, other, bfrac, extra, ways, lo, hi, l2a, l2b, l2_ways,
                             l2_cliff, np.zeros(0), in_l2, np.empty(RS), l2u)
            want = naive_chain_hit(ref, t, d, keep)
            assert abs(got - want) < 1e-9, (t, d, got, want)
            if not ref[t, t - d + 1:t].any():
                assert abs(got - keep(t, d)) < 1e-12
