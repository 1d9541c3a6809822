"""nhwc 1x1 fprop: consecutive k-steps walk the classes of L1 sets (`_set_phase.fprop_block_phases`,
`_reuse._in_class_rounds`): the classes against the sets of every A and B sector of the real request stream, the
rounds of a class against a plain count, and the filter hits of a layer whose filter lines come back one round
of the other class later, simulated (67 #60)."""
import math

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._reuse import _in_class_rounds
from analytic._set_phase import fprop_block_phases
from traces import ConvLayer, KernelConfig
from traces.stream import iter_request_chunks, tensor_bases

LINE, SETS = 128, 4


def _phases(layer, kernel):
    unit = layer.c * kernel.elem_bytes
    return fprop_block_phases(layer, kernel, unit, layer.r * layer.s * unit, SETS, LINE)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([32, 48, 64, 96, 128, 256]), st.sampled_from(["fp32", "fp16"]), st.sampled_from([8, 16, 32]),
       st.sampled_from([32, 64]), st.sampled_from([1, 3]))
def test_each_k_step_reads_lines_of_its_class(c, dtype, tile_k, k, r):
    layer = ConvLayer(1, c, 6, 5, k, r, r, pad=r // 2, name="blocks")
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=tile_k, threads=64, dtype=dtype)
    p, rpl = _phases(layer, kernel)
    eb = kernel.elem_bytes
    if r > 1 or (c * eb) % LINE or math.gcd(c * eb // LINE, SETS) == 1:
        assert (p, rpl) == (1, 1)
        return
    assert (p, rpl) == (math.gcd(c * eb // LINE, SETS), LINE // (tile_k * eb))
    x_base, w_base, _y = tensor_bases(layer, kernel)
    first = (x_base // LINE) % p
    assert (w_base // LINE) % p == first
    seen = 0
    for chunk in iter_request_chunks(layer, simcore.gpu("v100"), kernel):
        for i in range(len(chunk.cta)):
            if chunk.operand[i] >= 2:
                continue
            want = (first + int(chunk.kstep[i]) // rpl) % p
            for j in range(int(chunk.first[i]), int(chunk.first[i]) + int(chunk.count[i])):
                assert (int(chunk.sectors[j]) // LINE) % p == want
                seen += 1
    assert seen > 0


def naive_in_class_rounds(d, p, rpl):
    """Rounds 1 .. d after a line's last read whose line lies p classes on (a whole walk of the classes), each
    counted p times."""
    return p * sum(1 for j in range(1, d + 1) if math.ceil(j / rpl) % p == 0)


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize("rpl", [1, 2, 4])
def test_in_class_rounds_count_the_rounds_of_the_class(p, rpl):
    for d in range(0, 40):
        want = d if p == 1 else naive_in_class_rounds(d, p, rpl)
        assert _in_class_rounds(float(d), float(p), float(rpl)) == pytest.approx(want)


def test_filter_lines_back_after_a_round_of_the_other_class_hit():
    """67 #60's kernel and GPU on 4 images: C 64 fp32 (two lines a pixel, classes of 2 sets of the p100's 4 at
    half its L1: 48 ways), two k-steps a CTA. The previous wave's filter line comes back after one round of the
    other class: 47 other lines in its set (67 #60 replayed: every such read hits), 85 % of B's reads at 4 images.
    Counted over the whole lifetime the model found it at x = 1.67: B's hits 49 % low, now 7 %."""
    layer = ConvLayer(4, 64, 55, 55, 192, 1, 1, name="proj_67_60")
    kernel = KernelConfig(tile_m=64, tile_n=32, tile_k=32, threads=256, swizzle_log=1)
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 0.5})
    assert kernel.l1_config(gpu).ways == 48 and _phases(layer, kernel) == (2, 1)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    key = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B"
    assert sim[key] > 0.8 * sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:B"]
    assert pred[key] == pytest.approx(sim[key], rel=0.1)
