"""The next group's re-read of a pixel by the same row as an exact cyclic walk (`_grouped_rereads._cyclic_miss`):
where a pixel pitch that reaches only some of the L1 sets puts every pixel's lines in a fixed class of
them, each row replays the same walk, so LRU hits while the window fits the ways and misses past them,
and the filter lines between sit in the few sets each tile's slice fills (`_b_sets`). Checked against the
simulated stream of 1x1 depthwise layers whose tiles read one line a pixel a set right at the ways (the
fitted ramp put their misses 83-93 % low), `_b_sets` against an enumeration of a contiguous slice's
lines, and `_cyclic_miss` against every placement of the SM's filter slices."""
import itertools
import math

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._grouped_rereads import _b_sets, _cyclic_miss, _issue_head
from simcore import metrics as M

A_MISSES = M.L1_LD_MISSES + ":A"


@given(st.integers(1, 40), st.integers(0, 7), st.sampled_from([4, 8]))
@settings(max_examples=80, deadline=None)
def test_b_sets_is_a_contiguous_run_of_lines(lines, start, sets):
    """n whole lines from any first set: ceil(n / sets) at most in a set, min(n, sets) sets touched."""
    per_set = {}
    for line in range(start, start + lines):
        per_set[line % sets] = per_set.get(line % sets, 0) + 1
    ways = 16.0
    share, x = _b_sets(float(lines), ways, float(sets))
    assert share == pytest.approx(len(per_set) / sets)
    # the mean over the touched sets; whole runs of sets hold it exactly
    assert x * ways == pytest.approx(lines / len(per_set))
    assert max(per_set.values()) - min(per_set.values()) <= 1


def test_b_sets_of_nothing():
    assert _b_sets(0.0, 16.0, 4.0) == (0.0, 0.0)


@given(st.floats(1.0, 2.0), st.sampled_from([4, 8]))
def test_b_sets_of_a_fraction_of_a_line_is_its_expected_sets(lines, sets):
    """A round's filter lines come as one line plus the chance of straddling into the next (`_b_lines_round`:
    1 + (T_k e - 1) / 128): that chance of a second set, not a second set always (seed 4 #99: 1.008 lines, the
    re-read's set holding a filter line 1 time in 4, not 2)."""
    share, x = _b_sets(lines, 16.0, float(sets))
    p_two = lines - 1.0
    assert share == pytest.approx(((1.0 - p_two) * 1 + p_two * 2) / sets)
    assert share * sets * x * 16.0 == pytest.approx(lines)


def naive_cyclic_miss(window, tile_px, scale, others, b_lines, tiles, ways, sets):
    """Every subset of the SM's filter tiles whose slice lands in the re-read's set (each tile independently,
    with chance min(sets, max(1, lines)) / sets: the sets its lines are expected to touch), each slice b_lines /
    that many sets' lines there; the re-read misses when the window's lines and those exceed the ways: x =
    scale (this tile's window + the others') + the slices'."""
    held = min(sets, max(1.0, b_lines)) if b_lines > 0 else 0
    p = held / sets
    per_slice = b_lines / (held * ways) if held else 0.0
    total = 0.0
    for inside in itertools.product((False, True), repeat=tiles):
        k = sum(inside)
        chance = math.prod(p if i else 1.0 - p for i in inside)
        x = scale * (min(tile_px, window) + others * min(tile_px, window)) + k * per_slice
        total += chance * (1.0 if x > 1.0 else 0.0)
    return total


@given(st.floats(10, 600), st.floats(10, 600), st.floats(0.5, 3.0), st.integers(0, 5), st.floats(0, 9),
       st.integers(1, 4), st.sampled_from([48, 64, 128, 192]), st.sampled_from([4, 8]))
@settings(max_examples=200, deadline=None)
def test_cyclic_miss_is_the_step_over_every_placement_of_the_filter_slices(window, tile_px, lines_px, others,
                                                                          b_lines, tiles, ways, sets):
    scale = lines_px / (ways * 2)
    order = _issue_head(traces.KernelConfig(tile_m=128, tile_n=128, tile_k=32, threads=256))
    got = _cyclic_miss(window, tile_px, tile_px, scale, float(others), b_lines, float(tiles), 1, 0, order,
                       float(ways), float(sets))
    assert got == pytest.approx(naive_cyclic_miss(window, tile_px, scale, others, b_lines, tiles, ways, sets),
                                abs=1e-9)


@pytest.mark.parametrize("gpu_name, c, n, tile_m", [
    ("v100", 256, 2, 128),      # 128 pixels a tile, 1,024-byte pixels (every pixel's line in one set), 128 ways
    ("v100", 512, 1, 128),
    ("v100", 256, 2, 64),       # two 64-row CTAs an SM on 64 ways
    ("v100", 384, 2, 128),      # 1,536-byte pixels: two classes of sets
])
def test_cyclic_walk_at_the_ways_matches_simulation(gpu_name, c, n, tile_m):
    """The tile's window fills its set to the ways; the one filter line a round lands in one set of four,
    whose re-reads miss there: simulated 55 % of A's sectors miss, the ramp predicted 6 %."""
    gpu = simcore.gpu(gpu_name)
    layer = traces.ConvLayer(n=n, c=c, h=16, w=16, k=c, r=1, s=1, groups=c, name="dw1x1")
    kernel = traces.KernelConfig(tile_m=tile_m, tile_n=128, tile_k=32, threads=256)
    sim = traces.simulate_layer(layer, gpu, kernel)[A_MISSES]
    pred = analytic.predict_layer(layer, gpu, kernel)[A_MISSES]
    assert abs(pred - sim) / sim < 0.10, (pred, sim)


def test_cyclic_walk_past_the_ways_misses_every_reread():
    """Two CTAs an SM on an A100 (120 ways): the window is past the ways, every re-read misses."""
    gpu = simcore.gpu("a100")
    layer = traces.ConvLayer(n=2, c=256, h=16, w=16, k=256, r=1, s=1, groups=256, name="dw1x1")
    kernel = traces.KernelConfig(tile_m=128, tile_n=128, tile_k=32, threads=256)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert sim[A_MISSES] == sim[M.L1_LD_SECTORS + ":A"]          # the simulation: no hit at all
    assert pred[A_MISSES] == pytest.approx(sim[A_MISSES], rel=0.01)
