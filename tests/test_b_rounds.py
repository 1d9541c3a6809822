"""`_reuse.b_rounds`: the filter lines that d consecutive filter positions of one channel block read (each
filter row's k-step chunk, a position's C e bytes on from the last), in rounds, against a byte-by-byte count
of the lines over every alignment of the row to the line (the slow reference)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from analytic._reuse import b_rounds, _window_x

LINE = 128


def _lines_of_positions(pos_b, width, d):
    """Mean distinct lines of the chunks [a + p pos_b, + width), p = p0 .. p0 + d - 1, over the row's
    alignments a to the line (steps of gcd(pos_b, line)) and a few first positions p0."""
    step = math.gcd(pos_b, LINE)
    counts = []
    for a in range(0, LINE, step):
        for p0 in range(4):
            lines = set()
            for p in range(p0, p0 + d):
                start = a + p * pos_b
                lines.update(range(start // LINE, (start + width - 1) // LINE + 1))
            counts.append(len(lines))
    return float(np.mean(counts))


@given(st.sampled_from([2, 4]), st.integers(1, 80), st.sampled_from([8, 16, 32]), st.integers(1, 30))
@settings(max_examples=200, deadline=None)
def test_b_rounds_counts_the_lines_of_d_positions(eb, C, tk, d):
    pos_b, width = C * eb, min(C, tk) * eb
    one = _lines_of_positions(pos_b, width, 1)            # a round's lines a filter row (``lpr_b``)
    bfrac = pos_b / LINE / one
    want = _lines_of_positions(pos_b, width, d) / one
    assert b_rounds(float(d), bfrac) == pytest.approx(want, rel=1e-9)


def test_b_rounds_hand_made():
    # seed 2 #88: 96-byte positions, 16-byte chunks (one line a round): 25 positions reach 19 lines a row
    # (24 steps of 0.75 and the first), not 19.75
    assert b_rounds(25.0, 0.75) == pytest.approx(19.0)
    assert _lines_of_positions(96, 16, 25) == pytest.approx(19.0)
    assert b_rounds(1.0, 0.75) == 1.0                   # one position: its own round
    assert b_rounds(5.0, 2.0) == 5.0                    # positions a line or more apart: a round each


def test_window_x_takes_b_rounds():
    assert _window_x(0.0, 25.0, 1.0, 32.0, 0.75, 0.0, 1.0) == pytest.approx(19.0 * 32.0)
    assert _window_x(400.0, 3.0, 4.0, 10.0, 0.5, 2.0, 100.0) == pytest.approx((100.0 + 20.0 + 2.0) / 100.0)
