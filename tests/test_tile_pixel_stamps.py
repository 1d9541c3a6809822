"""`analytic._reuse.tile_pixel_stamps` (each tile's distinct input pixels; the rounds between a pixel's last
read in one channel block and its first in the next) against a naive count over every tile's rows and
taps."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._reuse import tile_pixel_stamps


def naive_gaps(N, H, W, R, S, sh, sw, ph, pw, dh, dw, tm, reverse):
    """Per M tile: each input pixel its rows read, (R S - 1 - last position) + first position, in the
    sweep's order (reversed taps for dgrad); shares over all (pixel, tile) pairs."""
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    M, RS = N * P * Q, R * S
    order = list(range(RS))[::-1] if reverse else list(range(RS))
    gaps = np.zeros(2 * RS - 1)
    pixels = []
    for m0 in range(0, M, tm):
        seen = {}
        for t, pos in enumerate(order):
            r, s = divmod(pos, S)
            for m in range(m0, min(m0 + tm, M)):
                n, pq = divmod(m, P * Q)
                p, q = divmod(pq, Q)
                y, x = p * sh - ph + r * dh, q * sw - pw + s * dw
                if 0 <= y < H and 0 <= x < W:
                    first, _last = seen.get((n, y, x), (t, t))
                    seen[(n, y, x)] = (first, t)
        for first, last in seen.values():
            gaps[RS - 1 - last + first] += 1
        pixels.append(len(seen))
    return gaps / gaps.sum(), pixels, P, Q, M


def _run(N, H, W, R, S, sh, sw, ph, pw, dh, dw, tm, reverse):
    want, pixels, P, Q, M = naive_gaps(N, H, W, R, S, sh, sw, ph, pw, dh, dw, tm, reverse)
    tiles = -(-M // tm)
    picks = np.arange(tiles, dtype=np.int64)
    counts, got = tile_pixel_stamps(picks, np.ones(tiles), tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, reverse,
                                    True)
    assert counts.tolist() == pixels
    assert tile_pixel_stamps(picks, np.ones(tiles), tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, reverse,
                             False)[0].tolist() == pixels
    return got, want


def test_block_gap_hand_cases():
    # 7x1 (taps along h) on tiles of 32 rows of a 23-wide image: a pixel row is read by at most two
    # consecutive taps of a tile, so the next block's first read comes 5 rounds after the last one, or
    # further for the rows one tap reaches
    got, want = _run(2, 23, 23, 7, 1, 1, 1, 3, 0, 1, 1, 32, False)
    assert np.allclose(got, want) and got[:5].sum() == 0.0
    # 1x7 (taps along w) on tiles of whole image rows: an inner pixel is read by the first tap and the
    # last: none between the blocks
    got, want = _run(1, 4, 32, 1, 7, 1, 1, 0, 3, 1, 1, 128, False)
    assert np.allclose(got, want) and got[0] > 0.75


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), h=st.integers(3, 12), w=st.integers(3, 12), r=st.integers(1, 4), s=st.integers(1, 4),
       sh=st.integers(1, 2), sw=st.integers(1, 2), pad=st.integers(0, 2), dil=st.integers(1, 2),
       tm=st.sampled_from([8, 16, 32]), reverse=st.booleans())
def test_tile_pixel_stamps_against_naive(n, h, w, r, s, sh, sw, pad, dil, tm, reverse):
    if h + 2 * pad < dil * (r - 1) + 1 or w + 2 * pad < dil * (s - 1) + 1:
        return
    got, want = _run(n, h, w, r, s, sh, sw, pad, pad, dil, dil, tm, reverse)
    assert np.allclose(got, want)
