"""Strided dgrad's dy re-read by a later wave (`analytic.model._later_wave_rereads`), against the
simulated hierarchy."""
import analytic
import simcore
import traces
from analytic.model import _later_wave_rereads
from analytic.factors import ReuseFactors
from simcore.hypothetical import scale_gpu

DRAM_A = "dram__sectors_read.sum:A"
# 4x4 stride 2: four sub-problems of 2x2 taps each (equal lengths), 64 tiles each, two 32-wide columns
LAYER = traces.ConvLayer(n=16, c=64, h=32, w=32, k=64, r=4, s=4, stride=(2, 2), pad=(1, 1), name="sd")
KERNEL = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=16, threads=64, dtype="fp16", op="dgrad", ctas_per_sm=1)


def test_no_later_wave_in_one_wave():
    gpu = simcore.gpu("v100")
    assert _later_wave_rereads(LAYER, KERNEL, gpu, ReuseFactors(), 4, 64, 512, 16384.0, 1e5, 1e5) == 0.0


def test_later_waves_read_dy_again():
    # 160 SMs, one CTA each: the 512 CTAs in 3.2 waves; a 256 KB L2 (dy 512 KB, dx 2 MB): a region's
    # reads a wave apart miss. Simulated dy DRAM reads 5.3 x its distinct sectors (the sub-problems' own
    # grids, one wave each, predicted 2.0 x)
    gpu = scale_gpu(simcore.gpu("v100"), {"sms": 2.0, "l2_bytes": 1 / 32})
    sim = traces.simulate_layer(LAYER, gpu, KERNEL, jobs=1)
    pred = analytic.predict_layer(LAYER, gpu, KERNEL)
    distinct = LAYER.n * LAYER.p * LAYER.q * LAYER.k * 2 // 32
    assert sim[DRAM_A] > 4 * distinct
    assert abs(pred[DRAM_A] / sim[DRAM_A] - 1) < 0.2
