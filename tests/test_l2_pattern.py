"""`analytic._l2.pattern_cliff` against a naive sliced L2 (tests/naive_cache.py): a window of the
pattern's lines swept twice, the second sweep's misses are the reuses the window evicts."""
import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._l2 import PATTERN_X, blocks_cliff, l2_miss_prob, l2_miss_window, pattern_cliff
from simcore.config import CacheConfig

from .naive_cache import NaiveHierarchy

LINE = 128


def pattern_lines(pitch, width, count, first_px=0):
    """The first ``count`` distinct lines of rows of ``width`` bytes every ``pitch`` bytes (from row ``first_px``)."""
    out, row = [], first_px
    while len(out) < count:
        for line in range(row * pitch // LINE, (row * pitch + width - 1) // LINE + 1):
            if not out or line > out[-1]:
                out.append(line)
        row += 1
    return out[:count]


def second_sweep_misses(lines, slices, sets, ways, index):
    l1 = CacheConfig(size_bytes=LINE * 4, ways=4)
    l2 = CacheConfig(size_bytes=LINE * sets * ways, ways=ways, index=index)
    h = NaiveHierarchy(l1, 1, l2, slices, slice_hash=index)
    for line in lines:
        h._l2(line * LINE, False, "A")
    before = h.counts["lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"]
    for line in lines:
        h._l2(line * LINE, False, "A")
    return h.counts["lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"] - before


def assert_table(tab, lines_of, slices, sets, ways, index, picks):
    """The table's P(miss) at each picked point equals the naive L2's second-sweep misses of the first
    x L2s of the pattern's lines (``lines_of(count)``)."""
    cap = slices * sets * ways
    for i in picks:
        count = max(1, int(PATTERN_X[i] * cap))
        want = second_sweep_misses(lines_of(count), slices, sets, ways, index) / count
        assert abs(tab[i] - want) < 1e-12, (i, count, tab[i], want)


@given(st.sampled_from([3, 4, 6, 10]), st.sampled_from([4, 8, 16]), st.sampled_from([2, 4, 8]),
       st.sampled_from(["xor", "linear"]), st.integers(5, 40), st.integers(1, 8), st.data())
@settings(max_examples=40, deadline=None)
def test_pattern_cliff_against_a_naive_l2(slices, sets, ways, index, pitch32, width16, data):
    pitch, width = pitch32 * 32, min(width16 * 16, pitch32 * 32 - 16)
    tab = pattern_cliff(slices, sets, ways, index, 1.0, pitch, width, LINE)
    lines = pattern_lines(pitch, width, 4)
    if tab is None:
        # contiguous rows: every line between the first and the last is touched
        many = pattern_lines(pitch, width, 64)
        assert many == list(range(many[0], many[0] + 64))
        return
    picks = data.draw(st.lists(st.integers(1, len(PATTERN_X) - 1), min_size=1, max_size=4))
    assert_table(tab, lambda count: pattern_lines(pitch, width, count), slices, sets, ways, index, picks)


def test_strided_windows_overflow_sets_that_contiguous_ones_do_not():
    # a100's geometry (160 slices of 128 sets, 16 ways): lines 4 apart crowd the sets
    tab = pattern_cliff(160, 128, 16, "xor", 1.0, 512, 32, LINE)
    half = int(np.argmin(abs(PATTERN_X - 0.5)))
    assert tab[half] > 0.1 and l2_miss_prob(0.5, 16.0, (0.19, 0.51)) < 0.01
    assert pattern_cliff(160, 128, 16, "xor", 1.0, 128, 32, LINE) is None
    # the window function reads the table between its points, and the analytic cliff without one
    assert abs(l2_miss_window(PATTERN_X[half], 16.0, (0.19, 0.51), tab) - tab[half]) < 1e-12
    assert l2_miss_window(0.5, 16.0, (0.19, 0.51), np.zeros(0)) == l2_miss_prob(0.5, 16.0, (0.19, 0.51))


def blocks_lines(pitch, blocks, count):
    """The first ``count`` distinct lines, ascending, of ``blocks`` ((first byte, width), ...) in every row
    of ``pitch`` bytes."""
    out, row = set(), 0
    while len(out) < count + 64:
        for first, width in blocks:
            start = row * pitch + first
            out.update(range(start // LINE, (start + width - 1) // LINE + 1))
        row += 1
    return sorted(out)[:count]


@given(st.sampled_from([3, 4, 8]), st.sampled_from([4, 16]), st.sampled_from([2, 4]),
       st.sampled_from(["xor", "linear"]), st.integers(4, 24), st.data())
@settings(max_examples=30, deadline=None)
def test_blocks_cliff_against_a_naive_l2(slices, sets, ways, index, pitch_lines, data):
    # several CTA columns' windows in each pixel (grouped fprop): line-aligned blocks at other offsets
    pitch = pitch_lines * LINE
    nblk = data.draw(st.integers(1, 3))
    # blocks inside the pixel (a block running into the next pixel touches the same residues, but its
    # first lines would come before row 0's in the reference's address order)
    widths = [data.draw(st.integers(1, 2)) for _ in range(nblk)]
    blocks = tuple((data.draw(st.integers(0, pitch_lines - w)) * LINE, w * LINE) for w in widths)
    tab = blocks_cliff(slices, sets, ways, index, 1.0, pitch, blocks, LINE)
    if tab is None:
        many = blocks_lines(pitch, blocks, 3 * pitch_lines)
        assert many == list(range(many[0], many[0] + len(many)))
        return
    picks = data.draw(st.lists(st.integers(1, len(PATTERN_X) - 1), min_size=1, max_size=3))
    assert_table(tab, lambda count: blocks_lines(pitch, blocks, count), slices, sets, ways, index, picks)
    # one block a row is `pattern_cliff`'s own pattern
    one = blocks_cliff(slices, sets, ways, index, 1.0, pitch, ((0, LINE),), LINE)
    assert np.array_equal(one, pattern_cliff(slices, sets, ways, index, 1.0, pitch, LINE, LINE))


def test_a_window_too_small_for_its_spread_is_the_step():
    """A window of a subnormal x (a footprint of 5e-324 lines, found by hypothesis in
    tests/test_wave_footprint.py) underflows the spread to 0: no miss below the ways, no division by zero;
    a window far past the ways misses surely, and a tiny one with a spread left misses almost never."""
    for cliff in ((0.418, 0.0), (0.418, 0.51), (0.0, 0.0)):
        assert l2_miss_prob(5e-324, 8.0, cliff) == 0.0
        assert l2_miss_prob(1e-320, 16.0, cliff) == 0.0
    assert l2_miss_prob(5.0, 8.0, (0.0, 0.0)) == 1.0
    assert l2_miss_prob(0.3, 8.0, (0.0, 0.0)) == 0.0
    assert 0.0 <= l2_miss_prob(1e-12, 8.0, (0.418, 0.0)) < 1e-9
