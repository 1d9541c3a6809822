"""A grouped re-read inside a group sees its own tile's distinct pixels of the taps between: a partial last
tile (or one at the images' edge) reads fewer of them than the layer's mean per T_m rows, which the windows
used for every tile (`_grouped_rereads._reread_misses` scales them by the tile class's pixels).
resnext50_32x4d ``layer3.0.conv2`` at batch 1 (3x3 stride 2, 32 groups; 196 GEMM rows: tiles of 128 and 68
rows) had its A L1 misses at +13.7 % on the v100."""
import pytest

import analytic
import simcore
import traces
from simcore import metrics as M

A_MISS = M.L1_LD_MISSES + ":A"


@pytest.mark.parametrize("gpu_name", ["v100", "a100"])
def test_partial_tile_windows(gpu_name):
    layer = next(x for x in traces.network("resnext50_32x4d", 1) if x.name == "layer3.0.conv2")
    gpu, kernel = simcore.gpu(gpu_name), traces.KernelConfig()
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert pred[A_MISS] == pytest.approx(sim[A_MISS], rel=0.05)
