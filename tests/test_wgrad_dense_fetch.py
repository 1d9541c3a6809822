"""wgrad's x narrower than a sector (`_wgrad.dense_fetch_ratio`): the sectors a column tile fetches per
byte it reads, against the bytes of a long run of output columns enumerated column by column; and B's L2
reads of small layers whose last tile reads part of a pixel, simulated (CUTLASS loads the columns past
R S C too: DESIGN section 3a)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._wgrad import dense_fetch_ratio

SEC = 32


def naive_fetch_ratio(C, S, sh, sw, dw, eb, lo, hi, q_run=96):
    """Per input row class r mod sh: the bytes of columns [lo, hi) (r = rsc // (S C), s, c) at output
    columns q = 0 .. q_run - 1 (pixel sw q + s dw), distinct sectors and bytes, less the first half of the
    run (its start), summed over the classes: sectors x 32 / bytes."""
    sectors = nbytes = 0
    for kappa in range(sh):
        def run(n):
            got = set()
            for q in range(n):
                for col in range(lo, hi):
                    j = col // C
                    if (j // S) % sh != kappa:
                        continue
                    base = ((sw * q + (j % S) * dw) * C + col % C) * eb
                    got.update(range(base, base + eb))
            return got
        full, half = run(q_run), run(q_run // 2)
        nbytes += len(full) - len(half)
        sectors += len({b // SEC for b in full}) - len({b // SEC for b in half})
    return max(1.0, sectors * SEC / nbytes) if nbytes else 1.0


@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 4), st.integers(1, 4), st.sampled_from([2, 4]),
       st.integers(0, 60), st.sampled_from([4, 8, 16, 32, 64]))
@settings(max_examples=80, deadline=None)
def test_dense_fetch_ratio_is_a_long_runs_count(C, S, sh, sw, eb, lo, width):
    if C * eb >= SEC:
        return
    mine = dense_fetch_ratio(C, S, sh, sw, 1, eb, SEC, np.array([lo]), np.array([lo + width]))
    assert mine == pytest.approx(naive_fetch_ratio(C, S, sh, sw, 1, eb, lo, lo + width), rel=1e-9)


@pytest.mark.parametrize("C, S, sh, sw, dw, eb, lo, width, want", [
    # one column tile's taps 84 bytes past its first (C = 4 fp32, S = 6): in a long run every byte is read,
    # one sector a 32 bytes; a start of one period (2 columns) counted the next columns' overlap as new: 2.0
    (4, 6, 1, 1, 1, 4, 21, 4, 1.0),
    (4, 6, 1, 2, 1, 4, 21, 4, 2.0),
    (4, 5, 1, 2, 1, 4, 33, 8, 8.0 / 7.0),
])
def test_dense_fetch_ratio_after_a_long_start(C, S, sh, sw, dw, eb, lo, width, want):
    """Patterns that span several column steps: the counted period starts past every column that can share
    its bytes (these three failed against the long run before: 14 of 39,200 points of a grid like the
    hypothesis test's)."""
    assert naive_fetch_ratio(C, S, sh, sw, dw, eb, lo, lo + width) == pytest.approx(want)
    got = dense_fetch_ratio(C, S, sh, sw, dw, eb, SEC, np.array([lo]), np.array([lo + width]))
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("c, r, stride, tile_n, dtype", [(4, 1, 4, 32, "fp32"), (4, 7, 4, 64, "fp32"),
                                                         (6, 5, 3, 32, "fp16")])
def test_partial_pixels_fetch_whole_sectors(c, r, stride, tile_n, dtype):
    """x's pixels under a sector, read a few channels or one pixel in several: each CTA's L1 fetches whole
    sectors; B's L2 reads predicted within 3 % of the simulation (the element count was 7 to 50 % short)."""
    gpu = dataclasses.replace(simcore.gpu("a100"), sms=4)
    layer = traces.ConvLayer(name="stem", n=2, c=c, h=60, w=60, k=24, r=r, s=r, stride=stride)
    kernel = traces.KernelConfig(tile_m=32, tile_n=tile_n, tile_k=16, threads=128, dtype=dtype, op="wgrad")
    key = "lts__t_sectors_srcunit_tex_op_read.sum:B"
    simulated = traces.simulate_layer(layer, gpu, kernel)[key]
    assert analytic.predict_layer(layer, gpu, kernel)[key] == pytest.approx(simulated, rel=0.03)


def test_a_missed_reuse_of_dense_x_fetches_its_bytes_sectors():
    """Seed 5 #289 on 2 images (5x5 stride 4, C 7 fp16: 14-byte pixels; 64x256x8 tiles, one CTA an SM on a p100
    with half its L1, 96 lines). A pixel row's windows are read again one output row on (34 rows of npq), which
    the L1 loses; the elements re-read then are a run of bytes, and a k-step's accesses that share a sector
    find it refilled by the first. Counted a sector lookup per missed element (the column tile's lookups over
    its element accesses) the model lost a quarter of x's L1 hits: B hits -25.8 %, L2 reads +25.4 %. Counted
    by their bytes' sectors, as first touches are (`dense_fetch_ratio`): +6.9 %, -6.8 %."""
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 1.5, "l2_slices": 0.5, "l1_smem_bytes": 0.5})
    layer = traces.ConvLayer(name="stem_5_289", n=2, c=7, h=136, w=136, k=96, r=5, s=5, stride=4, pad=2)
    kernel = traces.KernelConfig(tile_m=64, tile_n=256, tile_k=8, threads=256, dtype="fp16", swizzle_log=3,
                                 ctas_per_sm=1, op="wgrad")
    assert kernel.l1_config(gpu).ways * kernel.l1_config(gpu).sets == 96
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    hits = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B"
    assert pred[hits] == pytest.approx(sim[hits], rel=0.1)
    l2_reads = "lts__t_sectors_srcunit_tex_op_read.sum"
    assert pred[l2_reads] == pytest.approx(sim[l2_reads], rel=0.1)
