"""A partial last channel block reads fewer lines a row than the full ones, and the taps' reuses inside
a block meet that block's window (`analytic.model._block_classes`): against hand counts and the
simulated L1."""
import pytest

import analytic
import simcore
import traces
from analytic._memo import clear_memo
from analytic.model import _block_classes
from simcore.hypothetical import scale_gpu

HITS_A = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:A"
SECTORS_A = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:A"


def naive_lines_per_row(first_byte, width, pitch, rows, unit):
    """Distinct units a run of rows touches with [first_byte, first_byte + width) of each, per row."""
    touched = set()
    for i in range(rows):
        lo = i * pitch + first_byte
        touched.update(range(lo // unit, (lo + width - 1) // unit + 1))
    return len(touched) / rows


def test_classes_of_a_partial_last_block_by_hand():
    # 48 fp32 channels (192-byte pixels) in blocks of 32 and 16: the first block 128 bytes a pixel, the
    # second 64 (rows 192 bytes apart, both read every 2 rows' period of 3 lines)
    classes = _block_classes(48, 32, 4, 192, 192, 128, 32, 1.25, True)
    assert len(classes) == 2
    (lines0, sec0, ks0), (lines1, sec1, ks1) = classes
    assert lines0 == pytest.approx(naive_lines_per_row(0, 128, 192, 64, 128))
    assert lines1 == pytest.approx(naive_lines_per_row(128, 64, 192, 64, 128))
    assert (lines0, lines1) == pytest.approx((1.5, 1.0))
    # sectors: 4 a row in the first block, 2 in the second; k-steps: one block each
    assert (sec0, sec1) == pytest.approx((4 / 6, 2 / 6))
    assert (ks0, ks1) == pytest.approx((0.5, 0.5))
    # whole blocks, or one block, or nchw: one class of the average
    assert _block_classes(64, 32, 4, 256, 256, 128, 32, 1.0, True) == ((1.0, 1.0, 1.0),)
    assert _block_classes(16, 32, 4, 64, 64, 128, 32, 0.5, True) == ((0.5, 1.0, 1.0),)
    assert _block_classes(48, 32, 4, 192, 192, 128, 32, 1.25, False) == ((1.25, 1.0, 1.0),)


@pytest.mark.parametrize("c, tile_m, ctas", [(40, 128, 2), (48, 64, 3)])
def test_a_hits_with_a_partial_last_block_against_the_simulation(c, tile_m, ctas):
    # the first block's window passes the 48 KB L1 between the taps, the partial one's stays in it: the
    # blocks' average window (1.25 lines a row for C = 48) put both inside (A hits 0.56-0.59 predicted,
    # 0.44-0.47 simulated)
    gpu = scale_gpu(simcore.gpu("titanxp"), {"sms": 0.25})
    layer = traces.ConvLayer(n=4, c=c, h=28, w=28, k=64, r=3, s=3, pad=(1, 1), name="partial")
    kernel = traces.KernelConfig(tile_m=tile_m, tile_n=64, tile_k=32, threads=64, ctas_per_sm=ctas)
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    clear_memo()
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert abs(pred[HITS_A] - sim[HITS_A]) / sim[SECTORS_A] < 0.08
