"""A filter line re-read by the SM's next CTA of the same slice (fprop nhwc 1x1). Two effects, each checked
against the simulator:

- The line's own L1 set (`_geometry.b_hold_in_set`): with C e a multiple of the L1's sets x line, every
  row's line l of a k-step falls in one set, so the walk visits a set only during its line's k-steps and
  nothing of the set lies between the last CTA's reads and the next CTA's. resnext50_32x4d
  ``layer1.0.conv3`` (C 128, K 256 fp32) on the a100 at batch 32 had its filter L1 misses +151 %.
- The round back (`_reuse.l1_configs`' ``d_b``): co-resident CTAs of one slice read a filter line in turn,
  so between the last one's read and the first one's next only the other CTAs' lines and the first
  one's own lie, not the whole round's.

Seed 1 #258 (C 256 fp32, 8 lines a row over 4 sets: each set visited twice a lifetime) keeps its misses:
counting only the line's own visit there put its L2 reads at -20 %."""
import dataclasses

import pytest

import analytic
import simcore
import traces
from simcore import metrics as M
from validation.random_cases import random_case

B_MISS = M.L1_LD_MISSES + ":B"


@pytest.mark.parametrize("gpu_name", ["a100", "h100", "v100"])
def test_projection_filter_misses(gpu_name):
    layer = traces.ConvLayer(name="proj", n=4, c=128, h=28, w=28, k=256, r=1, s=1)
    gpu = dataclasses.replace(simcore.gpu(gpu_name), sms=4)      # 50 CTAs, 8 a wave: the slice re-read
    kernel = traces.KernelConfig()
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert pred[B_MISS] == pytest.approx(sim[B_MISS], rel=0.1)


def test_set_visited_twice_a_lifetime_keeps_its_misses():
    c = random_case(1, 258)
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel)
    assert pred[B_MISS] == pytest.approx(sim[B_MISS], rel=0.05)
    assert pred[M.L2_RD_SECTORS] == pytest.approx(sim[M.L2_RD_SECTORS], rel=0.05)


def test_dgrad_filter_slice_in_one_set():
    """6 #177's shape (dgrad 3x3 dilation 2, C 256 fp32, one 32-channel column of one line, one CTA an SM, SMs a
    multiple of the swizzle's band: the next wave's CTA on an SM reads the same slice) on 2 images and 12 SMs.
    The slice's lines are filter positions C e = 1,024 bytes apart, all in one of the L1's 4 sets: its 576 lines
    over 224 ways never survive a lifetime, though the lifetime's lines (the slice and the dy window) fit the L1
    spread over every set. Judged on the sets of the whole row (fprop's lifetime), the model had 97.7 % of B's
    reads hit on the random case (simulated: none; L2 reads -71.6 %), here B hits 184,320 predicted against
    none, L2 reads -56.7 %."""
    layer = traces.ConvLayer(n=2, c=256, h=20, w=20, k=64, r=3, s=3, pad=(2, 2), dilation=(2, 2), name="d")
    kernel = traces.KernelConfig(tile_m=32, tile_n=32, tile_k=32, threads=256, vector=4, swizzle_log=2,
                                 ctas_per_sm=1, op="dgrad")
    gpu = dataclasses.replace(simcore.scale_gpu(simcore.gpu("h100"), {"l1_smem_bytes": 0.5}), sms=12)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    hit_b = M.L1_LD_HITS + ":B"
    assert sim[hit_b] < 0.01 * sim[M.L1_LD_SECTORS + ":B"]
    assert pred[hit_b] <= 0.01 * pred[M.L1_LD_SECTORS + ":B"]
    assert pred[M.L2_RD_SECTORS] == pytest.approx(sim[M.L2_RD_SECTORS], rel=0.06)
