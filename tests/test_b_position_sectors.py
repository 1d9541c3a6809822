"""fprop nhwc with C <= T_k: a k-step reads one filter position's C e bytes of each filter row, and where C e is
off the sector grid the next position's bytes begin in the sector this one ends in, re-read one round later
(`_geometry._fprop`'s ``reuse_b1``). That held for C e < 32 only: 48- and 40-byte positions (C 24 fp16, 12 fp32,
20 fp16) had no B hits predicted where the stream hits every shared sector (seed 4 #208: L2 reads +32.8 %)."""
import pytest

import analytic
import simcore
import traces
from simcore import metrics as M
from validation.random_cases import random_case

B_HITS = M.L1_LD_HITS + ":B"


@pytest.mark.parametrize("c, dtype", [(24, "fp16"), (12, "fp32"), (20, "fp16"), (6, "fp32")])
def test_filter_sectors_of_adjacent_positions_hit(c, dtype):
    layer = traces.ConvLayer(name="stem", n=2, c=c, h=24, w=24, k=64, r=3, s=3, pad=(1, 1))
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=32, threads=128, dtype=dtype)
    gpu = simcore.gpu("v100")
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert sim[B_HITS] > 0
    assert pred[B_HITS] == pytest.approx(sim[B_HITS], rel=0.1)


@pytest.mark.parametrize("case", ["4:208", "5:305"])
def test_random_cases_l2_reads(case):
    """Seed 4 #208 (+32.8 % before) and seed 5 #305 (+15.1 %): C 24 fp16, 5x5."""
    c = random_case(*map(int, case.split(":")))
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel)
    assert pred[M.L2_RD_SECTORS] == pytest.approx(sim[M.L2_RD_SECTORS], rel=0.08)
