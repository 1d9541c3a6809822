"""A grouped layer's CTA columns re-read sectors the columns before read (`analytic._grouped_model`
`_column_reread_miss`): against the simulated hierarchy."""
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
