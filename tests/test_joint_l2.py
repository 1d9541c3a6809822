"""`analytic._joint_l2`: the L2 window one k-step back with the filter lines where they land.

`joint_cliff` against a naive sliced L2 (tests/naive_cache.py): A's pattern lines swept, then the filter lines,
then A's again; the second sweep's misses are the reuses that the window (A's other lines and the filter lines)
evicts. And the model on the case it was found on, against its stored simulated figures."""
import math
import types

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simcore
import traces
from analytic import predict_layer
from analytic._memo import clear_memo
from analytic._joint_l2 import (JOINT_PLACES, JOINT_ROUNDS, JOINT_X_MIN, _filter_lines, joint_columns, joint_tables,
                               wave_places)
from analytic._l2 import PATTERN_X, pattern_cliff
from simcore.config import CacheConfig

from .naive_cache import NaiveHierarchy
from .test_l2_pattern import pattern_lines

LINE = 128
MISS = "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"


def small_gpu(slices, sets, ways, index):
    return types.SimpleNamespace(l2_slices=slices, l2_sets_per_slice=sets, l2_ways=ways, l2_index=index,
                                 line_bytes=LINE)


def joint_cliff(gpu, capacity, pitch, width, b_lines):
    """`joint_tables` of one window from pixel 0 with the filter lines of ``b_lines`` (one array a k-step,
    averaged)."""
    return joint_tables(gpu, capacity, pitch, width, (0,), 0, (tuple(b_lines),))[0]


def naive_joint(a_lines, b_lines, slices, sets, ways, index):
    """A's second-sweep misses / A's lines, with ``b_lines`` touched between the sweeps."""
    l1 = CacheConfig(size_bytes=LINE * 4, ways=4)
    l2 = CacheConfig(size_bytes=LINE * sets * ways, ways=ways, index=index)
    h = NaiveHierarchy(l1, 1, l2, slices, slice_hash=index)
    for line in list(a_lines) + list(b_lines):
        h._l2(line * LINE, False, "A")
    before = h.counts[MISS]
    for line in a_lines:
        h._l2(line * LINE, False, "A")
    return (h.counts[MISS] - before) / len(a_lines)


@given(st.sampled_from([3, 4, 8]), st.sampled_from([4, 8, 16]), st.sampled_from([2, 4, 6]),
       st.sampled_from(["xor", "linear"]), st.integers(5, 40), st.integers(1, 8), st.integers(0, 40),
       st.integers(1, 3), st.data())
@settings(max_examples=30, deadline=None)
def test_joint_cliff_against_a_naive_l2(slices, sets, ways, index, pitch32, width16, nb, steps, data):
    pitch, width = pitch32 * 32, min(width16 * 16, pitch32 * 32 - 16)
    if pattern_cliff(slices, sets, ways, index, 1.0, pitch, width, LINE) is None:
        return                                    # contiguous rows: no pattern table, no joint table
    cap = slices * sets * ways
    # filter lines far above A's (their own addresses): ``steps`` arrays, averaged
    base = data.draw(st.integers(10 * cap, 40 * cap))
    b = tuple(np.array(sorted(set(data.draw(st.lists(st.integers(base, base + 8 * cap), min_size=nb, max_size=nb)))),
                       np.int64) for _ in range(steps))
    tab = joint_cliff(small_gpu(slices, sets, ways, index), 1.0, pitch, width, b)
    for i in data.draw(st.lists(st.integers(1, len(PATTERN_X) - 1), min_size=1, max_size=3)):
        count = max(1, int(PATTERN_X[i] * cap))
        a = pattern_lines(pitch, width, count)
        want = np.mean([naive_joint(a, bl, slices, sets, ways, index) for bl in b])
        assert abs(tab[i] - want) < 1e-12, (i, count, tab[i], want)


@given(st.sampled_from([4, 8]), st.sampled_from([8, 16]), st.sampled_from([2, 4]), st.sampled_from(["xor", "linear"]),
       st.integers(5, 24), st.integers(1, 6), st.integers(1, 40), st.integers(1, 200), st.data())
@settings(max_examples=20, deadline=None)
def test_joint_tables_average_the_places_where_the_window_fits(slices, sets, ways, index, pitch32, width16, k, m,
                                                              data):
    """Two places: pixel 0 and p0 = k periods on, in a tensor of p0 + m periods. At each x the table is the mean
    of the two places' naive second-sweep misses where the window's lines fit in the tensor from p0, else pixel
    0's; one row per round entry, each with its own filter lines."""
    pitch, width = pitch32 * 32, min(width16 * 16, pitch32 * 32 - 16)
    if pattern_cliff(slices, sets, ways, index, 1.0, pitch, width, LINE) is None:
        return
    period = LINE // math.gcd(pitch, LINE)
    per = len({ln for i in range(period) for ln in range(i * pitch // LINE, (i * pitch + width - 1) // LINE + 1)})
    p0, span = k * period, (k + m) * period
    cap = slices * sets * ways
    base = data.draw(st.integers(10 * cap, 40 * cap))
    rounds = tuple((np.array(sorted(set(data.draw(st.lists(st.integers(base, base + 8 * cap), min_size=1,
                                                           max_size=30)))), np.int64),) for _ in range(2))
    tab = joint_tables(small_gpu(slices, sets, ways, index), 1.0, pitch, width, (0, p0), span, rounds)
    assert tab.shape == (2, len(PATTERN_X))
    for i in data.draw(st.lists(st.integers(1, len(PATTERN_X) - 1), min_size=1, max_size=3)):
        count = max(1, int(PATTERN_X[i] * cap))
        for row, (b,) in enumerate(rounds):
            want = naive_joint(pattern_lines(pitch, width, count), b, slices, sets, ways, index)
            if count <= m * per:
                want = 0.5 * (want + naive_joint(pattern_lines(pitch, width, count, p0), b, slices, sets, ways, index))
            assert abs(tab[row, i] - want) < 1e-12, (row, i, count, tab[row, i], want)


def test_no_filter_lines_is_the_pattern_table():
    """With no filter lines the joint table from pixel 0 is `pattern_cliff`'s."""
    gpu = small_gpu(8, 16, 4, "xor")
    tab = joint_cliff(gpu, 1.0, 512, 64, (np.zeros(0, np.int64),))
    want = pattern_cliff(8, 16, 4, "xor", 1.0, 512, 64, LINE)
    assert np.array_equal(tab, want)


def test_filter_lines_follow_the_tensor_placement():
    """The k-steps' filter lines: w after x (`tensor_bases`), rows of R S C elements, taps then blocks."""
    layer = traces.ConvLayer(1, 64, 8, 8, 40, 3, 3, pad=1, name="t")
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=16)           # fp32: 64-byte filter reads
    _x, w_base, _y = traces.tensor_bases(layer, kernel)
    steps = _filter_lines(layer, kernel, LINE, 2)
    frow = 3 * 3 * 64 * 4
    assert len(steps) == 4
    for q, lines in enumerate(steps):
        off = q * 64 * 4                            # taps 0..3 of channel block 0
        want = sorted({(w_base + r * frow + off + e) // LINE for r in range(40) for e in (0, 63)})
        assert lines.tolist() == want


def test_joint_columns_only_near_the_cliff():
    """No tables where the window one k-step back stays under JOINT_X_MIN of the L2; else one a round count,
    each at least the pattern table (filter lines only add to A's sets), more rounds at least as many misses."""
    layer = traces.ConvLayer(1, 256, 14, 14, 64, 3, 3, pad=1, name="t")
    kernel = traces.KernelConfig(tile_m=64, tile_n=64, tile_k=8)
    gpu = simcore.gpu("v100")
    f = types.SimpleNamespace(l2_capacity=1.0)
    cap = gpu.l2_bytes / LINE
    far = np.array([[0.001, 1.0, 0.001, 1.0]])
    assert joint_columns(layer, kernel, gpu, f, far, 64.0, 64.0, cap, 1024, 32) is None
    near = np.array([[JOINT_X_MIN / 64.0, 1.0, 64.0 / cap, 1.0]])
    out = joint_columns(layer, kernel, gpu, f, near, 64.0, 64.0, cap, 1024, 32)
    n = len(PATTERN_X)
    assert out.shape == (1, 6 + JOINT_ROUNDS * n)
    assert np.array_equal(out[0, :4], near[0]) and not out[0, 4:6].any()
    alone = pattern_cliff(gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, 1.0, 1024, 32, LINE)
    tabs = out[0, 6:].reshape(JOINT_ROUNDS, n)
    assert np.all(tabs >= alone - 1e-12) and tabs.max() <= 1.0
    assert np.all(np.diff(tabs, axis=0) >= -1e-12)


def test_a_window_at_the_ways_against_the_simulation(monkeypatch):
    """Seed 67 #51 in small (C 1024 fp16, 3x3, 2 images of 37 x 37, 32x128x32 tiles, a v100 with a sixteenth of
    its L2 on a quarter of its slices: 16 x 32 sets x 6 ways). One k-step's A lines, 16 apart, are 2,738 of the
    3,072 lines, the filter lines 128 more: the pattern table alone leaves every set at or under its ways, and
    the reuses one k-step back all hit the L2. Simulated, A's DRAM reads are 2.9 times A's size (502,848 sectors):
    the sets that get a filter line overflow. The model with the filter lines where they land: -29.7 %; with the
    pattern table alone: -64.2 % (what remains: the windows' other A lines, the first wave's offsets only)."""
    import analytic.model as model
    layer = traces.ConvLayer(2, 1024, 37, 37, 128, 3, 3, pad=1, name="small_67_51")
    kernel = traces.KernelConfig(tile_m=32, tile_n=128, tile_k=32, threads=64, dtype="fp16", vector=1)
    gpu = simcore.scale_gpu(simcore.gpu("v100"), {"l2_bytes": 0.0625, "l2_slices": 0.25})
    assert (gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways) == (16, 32, 6)
    dram = "dram__sectors_read.sum:A"
    sim = traces.simulate_layer(layer, gpu, kernel)[dram]
    now = predict_layer(layer, gpu, kernel)[dram]
    monkeypatch.setattr(model, "joint_columns", lambda *args: None)
    clear_memo()                                  # (whole predictions are memoized)
    before = predict_layer(layer, gpu, kernel)[dram]
    clear_memo()
    assert abs(now - sim) < 0.35 * sim
    assert abs(now - sim) < 0.6 * abs(before - sim)


def test_the_window_at_its_places_against_the_simulation(monkeypatch):
    """Seed 64 #47 on 20 images (7x1, C 128 fp32, 32x32x32 tiles, a p100 with a quarter of its L2: 32 slices x 64
    sets x 4 ways). A round's A lines, 4 apart, are 0.44 of the L2: from line 0 the xor hash spreads them evenly,
    from line 26,364 it puts every one in a set of 8 (scratch `jointw.py`). Simulated, A's DRAM reads are 2.7
    times A's size; the pattern table from line 0 alone saw no overfull set (-55.0 %); at the waves' own places,
    where the window fits, -5.4 %. On 12 images the tensor never reaches those places: both agree (-1.1 %)."""
    import analytic.model as model
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 0.25, "l1_smem_bytes": 2.0})
    kernel = traces.KernelConfig(tile_m=32, tile_n=32, tile_k=32, threads=64, vector=4, swizzle_log=1)
    dram = "dram__sectors_read.sum:A"
    for n, close, gain in ((20, 0.15, True), (12, 0.05, False)):
        layer = traces.ConvLayer(n, 128, 23, 23, 96, 7, 1, pad=(3, 0), name="small_64_47")
        sim = traces.simulate_layer(layer, gpu, kernel)[dram]
        clear_memo()
        now = predict_layer(layer, gpu, kernel)[dram]
        with monkeypatch.context() as m:
            m.setattr(model, "joint_columns", lambda *args: None)
            clear_memo()
            before = predict_layer(layer, gpu, kernel)[dram]
        clear_memo()
        assert abs(now - sim) < close * sim, (n, now, sim)
        if gain:
            assert abs(now - sim) < 0.3 * abs(before - sim), (n, now, before, sim)
        else:
            assert now == pytest.approx(before, rel=0.01)


@given(st.integers(1, 300), st.integers(1, 8), st.integers(0, 3), st.integers(1, 400), st.sampled_from([32, 64, 128, 256]),
       st.sampled_from([1, 2, 4, 8]))
@settings(max_examples=60, deadline=None)
def test_wave_places_are_the_waves_first_tiles(tiles_m, tiles_n, swz, per_wave, tile_m, period):
    """Block b of CUTLASS's identity swizzle is tile_m (b mod (tiles_m << swz)) >> swz (DESIGN section 3): each place
    is the first row of some wave's first block, rounded down to the period; wave 0's row 0 is one; every wave's
    where there are at most JOINT_PLACES waves."""
    blocks = tiles_m * tiles_n
    waves = -(-blocks // per_wave)
    starts = [((w * per_wave) % (tiles_m << swz) >> swz) * tile_m // period * period for w in range(waves)]
    places = wave_places(tiles_m, tiles_n, swz, per_wave, tile_m, period)
    assert places[0] == 0 and list(places) == sorted(set(places))
    assert set(places) <= set(starts) and len(places) <= JOINT_PLACES
    if waves <= JOINT_PLACES:
        assert set(places) == set(starts)
