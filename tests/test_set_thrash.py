"""Filter lines that overfill an L2 set within a k-step (`analytic._set_thrash`): its numpy count (on the model's
`_l2._set_ids`) against a plain Python one, the claim behind it (such lines miss at every read) against a plain
LRU replay, and a layer against the simulator."""
import dataclasses
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._set_thrash import _LINEAR, _XOR, b_overfull_share, b_step_pattern, overfull_sectors


def set_of(line, slices, sets, kind):
    """DESIGN section 4, written out: the slice hash (xor of the line's 7-bit groups, or the line itself)
    mod slices; the set index of q = line // slices (xor of its set-index-wide groups, or q mod sets)."""
    q = line // slices
    if kind == _XOR:
        bits = sets.bit_length() - 1
        return ((line ^ (line >> 7) ^ (line >> 14)) % slices, (q ^ (q >> bits) ^ (q >> 2 * bits)) % sets)
    return line % slices, q % sets


def slow_overfull(rows, offsets, widths, base, slices, sets, ways, kind, line, sector):
    over = total = 0
    for off, width in zip(offsets, widths):
        sectors = {}                                 # line -> its sectors this k-step
        for row in rows:
            for byte in range(base + row + off, base + row + off + width):
                sectors.setdefault(byte // line, set()).add(byte // sector)
        occupancy = {}
        for ln in sectors:
            key = set_of(ln, slices, sets, kind)
            occupancy[key] = occupancy.get(key, 0) + 1
        for ln, secs in sectors.items():
            total += len(secs)
            if occupancy[set_of(ln, slices, sets, kind)] > ways:
                over += len(secs)
    return over, total


@settings(max_examples=60, deadline=None)
@given(nrows=st.integers(1, 40), pitch=st.integers(1, 40).map(lambda x: 16 * x),
       width=st.sampled_from([4, 16, 32, 48, 128, 200]), nsteps=st.integers(1, 5), step=st.integers(0, 300), base=st.integers(0, 64).map(lambda x: 256 * x),
       slices=st.sampled_from([1, 2, 3, 4, 8, 5]), sets=st.sampled_from([1, 2, 4, 8]), ways=st.integers(1, 4),
       kind=st.sampled_from([_XOR, _LINEAR]))
def test_overfull_count_matches_plain_python(nrows, pitch, width, nsteps, step, base, slices, sets, ways, kind):
    rows = np.arange(nrows, dtype=np.int64) * pitch
    offsets = np.arange(nsteps, dtype=np.int64) * step
    widths = np.full(nsteps, width, np.int64)
    got = overfull_sectors(rows, offsets, widths, base, slices, sets, ways, kind, 128, 32)
    assert got == slow_overfull(rows.tolist(), offsets.tolist(), widths.tolist(), base, slices, sets, ways, kind,
                                128, 32)


def lru_misses(steps, ctas, slices, sets, ways, kind):
    """A plain LRU L2 (per set, ``ways`` lines) that ``ctas`` CTAs read through, one after another in each
    k-step, each the k-step's ``steps[i]`` lines in order: the misses past each line's first read."""
    cache, seen, misses = {}, set(), 0
    for lines in steps:
        for _cta in range(ctas):
            for ln in lines:
                lru = cache.setdefault(set_of(ln, slices, sets, kind), OrderedDict())
                if ln in lru:
                    lru.move_to_end(ln)
                    continue
                if ln in seen:
                    misses += 1
                seen.add(ln)
                lru[ln] = True
                if len(lru) > ways:
                    lru.popitem(last=False)
    return misses


@pytest.mark.parametrize("pitch_lines,ways,kind", [(50, 2, _XOR), (7, 3, _XOR), (33, 1, _XOR), (64, 2, _LINEAR)])
def test_overfull_lines_miss_at_every_read(pitch_lines, ways, kind):
    """Lines in a set holding more than ``ways`` of a k-step's lines miss at every CTA's read; the others hit
    once read (a line a row, one sector each: the counts are lines). Linear index, rows 64 lines apart: all
    in one set."""
    slices, sets, ctas = 8, 16, 5
    rows = np.arange(96, dtype=np.int64) * pitch_lines * 128
    offsets = np.array([0, 128, 256, 384], np.int64)
    widths = np.full(4, 32, np.int64)
    over, _total = overfull_sectors(rows, offsets, widths, 0, slices, sets, ways, kind, 128, 32)
    steps = [[(row + off) // 128 for row in rows.tolist()] for off in offsets.tolist()]
    replayed = lru_misses(steps, ctas, slices, sets, ways, kind)
    assert over > 0
    # every read of an overfull line misses but its line's very first one
    assert replayed == over * ctas - over


def test_share_is_zero_where_a_step_cannot_overfill():
    """A k-step of fewer lines than ways has no overfull set; the stock 16-way v100 has none for resnet50's
    layer3 3x3 (256 filters a k-step)."""
    v100 = simcore.gpu("v100")
    layer = traces.ConvLayer(n=1, c=256, h=14, w=14, k=256, r=3, s=3, stride=(1, 1), pad=(1, 1))
    assert b_overfull_share(layer, traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64), v100) == 0.0
    assert b_overfull_share(layer, traces.KernelConfig(), v100) == 0.0


def test_pattern_of_each_op():
    """The rows and k-step offsets of the filter reads DESIGN 3 / 3a give: fprop nhwc (position, channel block),
    nchw (tile_k elements of the C R S row), unit-stride dgrad (tile_k filters of block k0, the column's
    channels); none for strided dgrad."""
    layer = traces.ConvLayer(n=1, c=20, h=8, w=8, k=40, r=3, s=3, stride=(1, 1), pad=(1, 1))
    small = dict(tile_m=64, tile_n=32, threads=64)
    rows, offsets, widths = b_step_pattern(layer, traces.KernelConfig(tile_k=8, **small))
    assert rows.tolist() == [k * 9 * 20 * 4 for k in range(32)]
    # 27 k-steps (9 positions x 3 blocks of 8, 8, 4 channels), 16 of them sampled: step i = 27 i // 16
    picked = [27 * i // 16 for i in range(16)]
    assert offsets.tolist() == [(t // 3) * 80 + (t % 3) * 32 for t in picked]
    assert widths.tolist() == [(4 if t % 3 == 2 else 8) * 4 for t in picked]
    rows, offsets, widths = b_step_pattern(layer, traces.KernelConfig(tile_k=8, layout="nchw", **small))
    assert rows.tolist() == [k * 180 * 4 for k in range(32)]
    assert offsets.tolist() == [t * 32 for t in (23 * i // 16 for i in range(16))]    # 180 / 8: 23 k-steps
    assert widths.tolist()[-1] == 32
    wide = b_step_pattern(layer, traces.KernelConfig(tile_k=32, layout="nchw", **small))
    assert wide[2].tolist()[-1] == (180 - 5 * 32) * 4
    rows, offsets, widths = b_step_pattern(layer, traces.KernelConfig(op="dgrad", tile_m=64, tile_n=16, tile_k=8,
                                                                      threads=64))
    assert rows.tolist() == [k * 720 for k in range(8)]
    # 9 positions x 5 blocks of k: 45 k-steps
    picked = [45 * i // 16 for i in range(16)]
    assert offsets.tolist() == [(t % 5) * 8 * 720 + (t // 5) * 80 for t in picked]
    assert set(widths.tolist()) == {64}
    strided = dataclasses.replace(layer, stride=(2, 2))
    assert b_step_pattern(strided, traces.KernelConfig(op="dgrad")) is None


def test_two_way_l2_filter_rereads_against_simulation():
    """2 #121 (p100 with a quarter of its L2 in 64 slices of 64 sets x 2 ways; nchw fp16 5x5, 256 filters of 50
    lines a row): some k-steps' filter lines three to a set. The filter's DRAM reads, 4.2x its size simulated
    (compulsory and the second wave's re-reads: 2x), within 5 %. The pattern hangs on where the filter starts
    (the slice hash): the same layer with batch 1 or 2 has no overfull set."""
    p100 = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 0.25, "sms": 1.5, "l2_slices": 2.0})
    assert p100.l2_ways == 2
    layer = traces.ConvLayer(n=4, c=128, h=56, w=56, k=256, r=5, s=5, stride=(1, 1), pad=(2, 2))
    kernel = traces.KernelConfig(tile_m=128, tile_n=256, tile_k=8, threads=256, layout="nchw", dtype="fp16")
    assert b_overfull_share(layer, kernel, p100) > 0.01
    assert b_overfull_share(traces.ConvLayer(n=2, c=128, h=56, w=56, k=256, r=5, s=5, stride=(1, 1), pad=(2, 2)),
                            kernel, p100) == 0.0
    f = analytic.ReuseFactors.load("validation/data/factors.json")
    sim = traces.simulate_layer(layer, p100, kernel)
    pred = analytic.predict_layer(layer, p100, kernel, f)
    key = "dram__sectors_read.sum:B"
    assert sim[key] > 4 * 51200
    assert abs(pred[key] - sim[key]) / sim[key] < 0.05


@pytest.mark.parametrize("name,scale", [("v100", {}), ("a100", {}), ("h100", {}), ("p100", {"l2_bytes": 0.25}),
                                        ("p100", {"l2_bytes": 0.25, "l2_slices": 2.0}), ("titanxp", {"l2_bytes": 0.5})])
def test_screen_floor_is_the_least_count_the_screen_passes(name, scale):
    from analytic._set_thrash import OVERFULL_SCREEN, _random_overfull, _screen_floor
    gpu = simcore.scale_gpu(simcore.gpu(name), scale) if scale else simcore.gpu(name)
    floor = _screen_floor(gpu)
    sets = gpu.l2_slices * gpu.l2_sets_per_slice
    assert floor > gpu.l2_ways
    assert _random_overfull(floor, sets, gpu.l2_ways) >= OVERFULL_SCREEN
    assert floor == gpu.l2_ways + 1 or _random_overfull(floor - 1, sets, gpu.l2_ways) < OVERFULL_SCREEN
