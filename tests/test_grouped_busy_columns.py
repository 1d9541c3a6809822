"""The grouped engine's busy CTAs in block order (`analytic._grouped_model.busy_columns`): against an enumeration of
DESIGN section 3's swizzled grid, and the L2 window they make against the simulated hierarchy."""
import math

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._grouped_model import busy_columns
from simcore.hypothetical import scale_gpu

DRAM_A = "dram__sectors_read.sum:A"


def first_blocks(busy, tiles_m, tiles_n, swz):
    """The tiles (tile_m, tile_n) of the grid's first ``busy`` blocks in linear id order (DESIGN 3: bx = b mod
    (tiles_m 2^L), by = b div (tiles_m 2^L), tile_m = bx >> L, tile_n = (by << L) + (bx & (2^L - 1)); blocks
    outside the grid skipped)."""
    out, b = [], 0
    while len(out) < busy:
        bx, by = b % (tiles_m << swz), b // (tiles_m << swz)
        tm, tn = bx >> swz, (by << swz) + (bx & ((1 << swz) - 1))
        if tm < tiles_m and tn < tiles_n:
            out.append((tm, tn))
        b += 1
    return out


@settings(max_examples=200, deadline=None)
@given(tiles_m=st.integers(1, 40), tiles_n=st.integers(1, 12), swz=st.integers(0, 3), data=st.data())
def test_busy_columns_follow_the_block_order(tiles_m, tiles_n, swz, data):
    busy = data.draw(st.integers(1, tiles_m * tiles_n))
    per_column, columns = busy_columns(float(busy), tiles_m, tiles_n, swz)
    tiles = first_blocks(busy, tiles_m, tiles_n, swz)
    held = {}
    for tm, tn in tiles:
        held.setdefault(tn, set()).add(tm)
    most = max(len(rows) for rows in held.values())
    assert math.isclose(per_column * columns, busy)
    assert per_column <= tiles_m and columns <= tiles_n
    if busy < tiles_m * min(1 << swz, tiles_n):
        # short of a band's tiles: every busy column holds the same tile_m's (one fewer in the last ones)
        assert columns == len(held)
        assert most - 1 < per_column <= most
    else:
        # a whole band or more: full columns, the rest a fraction of one
        assert per_column == tiles_m
        assert math.isclose(columns, sum(len(rows) for rows in held.values()) / tiles_m)


def test_unswizzled_grid_is_a_column_at_a_time():
    assert busy_columns(30.0, 100, 4, 0) == (30.0, 1.0)
    assert busy_columns(250.0, 100, 4, 0) == (100.0, 2.5)


def _case(l2_scale):
    # 64 groups of 3 fp32 channels (768-byte pixels), a 1x7 filter; four 32-filter columns (16 groups each) in
    # one band of swizzle_log 3: the 42 busy CTAs of a quarter of a P100's SMs hold 10.5 tile_m's in each column,
    # not 42 of one column. Each group's 16-channel blocks re-read the pixels' lines of the group before
    layer = traces.ConvLayer(n=16, c=192, h=20, w=20, k=128, r=1, s=7, pad=(0, 3), groups=64, name="g64")
    kernel = traces.KernelConfig(tile_m=128, tile_n=32, tile_k=16, threads=128, swizzle_log=3)
    gpu = scale_gpu(simcore.gpu("p100"), {"sms": 0.25, "l2_bytes": l2_scale})
    return layer, gpu, kernel


@pytest.mark.parametrize("l2_scale", [0.3, 0.35])
def test_swizzled_busy_window_fits_the_l2(l2_scale):
    layer, gpu, kernel = _case(l2_scale)
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    pred = analytic.predict_layer(layer, gpu, kernel)
    distinct = layer.n * layer.h * layer.w * layer.c * 4 // 32
    # the busy columns' lines fit the L2: each group re-reads its lines from the L2 (42 tile_m's of one column
    # would have filled it: 7-10 x the distinct sectors predicted)
    assert sim[DRAM_A] < 1.02 * distinct
    assert abs(pred[DRAM_A] / sim[DRAM_A] - 1) < 0.03
