"""A filter slice one CTA lifetime back, counted in whole lines, is judged on the LRU step (`_reuse.l1_configs`,
``step_b``; MODEL.md section 9): nhwc layers whose pixels and filter rows are whole lines, simulated."""
import pytest

import analytic
import simcore
import traces
from traces import ConvLayer, KernelConfig

HITS_B = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B"
LOADS_B = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:B"
L2_READS = "lts__t_sectors_srcunit_tex_op_read.sum"


def test_a_slice_that_fills_the_l1_with_the_tile_is_gone_a_lifetime_later():
    """Held-out 30 #6 on 4 images: 1x7, C 128 fp32, K 128, 64x256x8 tiles, one CTA an SM on an h100 with half its
    SMs and twice its L1 (960 ways x 4 sets). The slice is 128 filters x 28 lines = 3,584 lines, the tile's A
    lines some 256 more: the previous CTA's slice exactly fills the L1 and none of it is there when the next CTA
    reads it (simulated: 512 of 989,184 filter sectors hit). On the fitted ramp (x = 1.0: 91 %) the model found
    38,861 hits; on the step, 623."""
    layer = ConvLayer(4, 128, 33, 33, 128, 1, 7, pad=(0, 3), name="asym_1x7_30_6")
    kernel = KernelConfig(tile_m=64, tile_n=256, tile_k=8, threads=64, vector=4, ctas_per_sm=1)
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"sms": 0.5, "l2_slices": 0.5, "l1_smem_bytes": 2.0})
    assert kernel.l1_config(gpu).ways * kernel.l1_config(gpu).sets == 3840
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert sim[HITS_B] < 0.01 * sim[LOADS_B]
    assert pred[HITS_B] < 0.01 * sim[LOADS_B]
    assert pred[L2_READS] == pytest.approx(sim[L2_READS], rel=0.01)


def test_a_dilated_layer_one_cta_an_sm_at_the_ways():
    """Seed 5 #351 on 8 images (3x3 dilation 2, C 512 fp16, 32x32x32 tiles, one CTA an SM on an h100 with 1.5x
    its L1): its SMs' CTAs find 0, 28 or 56 % of the slice (MODEL.md section 8), 20,992 of 147,456 filter
    sectors of 1,548,288 (the model, on the step: none). L2 reads -5.2 % on the ramp (-41 % at 57 images), +0.9 % on
    the step."""
    layer = ConvLayer(8, 512, 32, 21, 32, 3, 3, pad=2, dilation=2, name="dil_5_351")
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=32, threads=128, dtype="fp16", vector=8, ctas_per_sm=1)
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l2_bytes": 1.5, "l1_smem_bytes": 1.5})
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert pred[L2_READS] == pytest.approx(sim[L2_READS], rel=0.03)
