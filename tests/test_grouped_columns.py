"""A grouped layer's CTA columns re-read sectors the columns before read (`analytic._grouped_model`
`_column_reread_miss`): against the simulated hierarchy."""
import math

import numpy as np
import pytest

import analytic
import simcore
import traces
from simcore.hypothetical import scale_gpu

DRAM_A = "dram__sectors_read.sum:A"


def _case(l2_scale):
    # 4 groups of 24 fp16 channels (48 bytes), 32 filters a group, one 32-wide CTA column a group
    # (kSingleGroup), whose two 16-channel blocks read 8 channels into the next group: of a pixel's 6
    # sectors, 3 are read by two columns. Many waves of CTAs on a 20-SM GPU, one a column's pass
    layer = traces.ConvLayer(n=8, c=96, h=24, w=24, k=128, r=3, s=3, pad=(1, 1), groups=4, name="g4")
    kernel = traces.KernelConfig(tile_m=32, tile_n=32, tile_k=16, threads=64, dtype="fp16", ctas_per_sm=1)
    gpu = scale_gpu(simcore.gpu("v100"), {"sms": 0.25, "l2_bytes": l2_scale})
    return layer, gpu, kernel


@pytest.mark.parametrize("l2_scale", [1 / 16, 4.0])
def test_column_rereads_of_shared_sectors(l2_scale):
    layer, gpu, kernel = _case(l2_scale)
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    pred = analytic.predict_layer(layer, gpu, kernel)
    distinct = layer.n * layer.h * layer.w * layer.c * 2 // 32
    if l2_scale < 1:
        # the next column comes a whole pass later, beyond a small L2: the shared sectors are read from
        # DRAM again (every pixel's 3 shared sectors: 1.5 x the distinct sectors)
        assert sim[DRAM_A] > 1.4 * distinct
        assert abs(pred[DRAM_A] / sim[DRAM_A] - 1) < 0.05
    else:
        # a large L2 keeps them
        assert sim[DRAM_A] < 1.05 * distinct
        assert abs(pred[DRAM_A] / sim[DRAM_A] - 1) < 0.05


def test_window_cliffs_follow_the_busy_columns_windows():
    # depthwise, 1,024 fp16 channels (2,048-byte pixels, 16 lines), 256-filter columns: each of the four
    # columns' windows starts 512 bytes (4 lines) after the last; a 1-line window class reaches lines
    # 0, 4, 8, 12 of every pixel the busy tiles read, a 2-line class 0-1, 4-5, 8-9, 12-13
    from analytic._grouped_model import _real_window_cliff, _window_cliffs, _window_lines
    from analytic.factors import ReuseFactors
    layer = traces.ConvLayer(n=4, c=1024, h=40, w=40, k=1024, r=3, s=3, pad=(1, 1), groups=1024, name="dw")
    kernel = traces.KernelConfig(tile_m=256, tile_n=256, tile_k=32, threads=128, dtype="fp16")
    gpu = simcore.gpu("v100")
    f = ReuseFactors()
    cap = gpu.l2_slices * gpu.l2_sets_per_slice * gpu.l2_ways * f.l2_capacity
    tabs = _window_cliffs(layer, kernel, gpu, f, 4, 3.0)
    for (lines, _share), tab in zip(_window_lines(layer, kernel, gpu.line_bytes), tabs):
        width = int(round(lines)) * 128
        want = _real_window_cliff(layer.shape, 2048, (0, 512, 1024, 1536), width, 128, 3 * 256, gpu.l2_slices,
                                  gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, cap)
        assert (tab == want).all()
    # 6,400 pixels of 4 or 8 lines (0.52 / 1.04 L2s): within them the 1-line class overflows no set, the 2-line
    # class a tenth or more of its lines
    from analytic._l2 import PATTERN_X
    half, one = int(np.argmin(abs(PATTERN_X - 0.5))), int(np.argmin(abs(PATTERN_X - 1.0)))
    assert tabs[0][:half + 1].max() < 0.01 and 0.1 < tabs[1][one] < 0.9
    # 2 groups of 16 fp32 channels: a pixel is one line, every line is read (the contiguous cliff); with
    # 4 groups of 16 a pixel is 2 lines, and a group's window one of them: every other line
    for groups, contiguous in ((2, True), (4, False)):
        layer = traces.ConvLayer(n=1, c=16 * groups, h=20, w=20, k=64, r=3, s=3, pad=(1, 1), groups=groups,
                                 name="g")
        kernel = traces.KernelConfig(tile_m=64, tile_n=64, tile_k=16, threads=64)
        tabs = _window_cliffs(layer, kernel, gpu, f, 1)
        assert all(math.isnan(t[0]) == contiguous for t in tabs)


def test_column_rereads_meet_a_full_waves_lines():
    """Two groups of 8 fp16 channels, 1x1, 133 tile_m a column on 112 slots (7 1/8 waves): a pixel is one
    sector, which all six columns read. A column's re-reads one wave on meet a full wave's 28.5k store lines
    (0.98 of the p100's L2 with twice its slices), not the 25.4k of the mean over every wave with the small
    last one (0.87, where the cliff kept most of them: A DRAM -34 %)."""
    layer = traces.ConvLayer(n=8, c=16, h=46, w=46, k=768, r=1, s=1, groups=2, name="g2_1x1")
    kernel = traces.KernelConfig(tile_m=128, tile_n=128, tile_k=16, threads=256, dtype="fp16", vector=8)
    gpu = scale_gpu(simcore.gpu("p100"), {"l2_slices": 2.0})
    f = analytic.ReuseFactors.load("validation/data/factors.json")
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    pred = analytic.predict_layer(layer, gpu, kernel, f)
    distinct = layer.n * layer.h * layer.w * layer.c * 2 // 32
    assert sim[DRAM_A] > 3 * distinct                       # most columns' re-reads miss
    assert abs(pred[DRAM_A] / sim[DRAM_A] - 1) < 0.15
