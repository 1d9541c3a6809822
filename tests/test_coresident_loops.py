"""Strided dgrad: co-resident CTAs whose k-loops differ in length read their A lines in other classes of sets
(`analytic.model._co_resident_loops`, `_reuse.l1_configs`' q_set; MODEL.md section 9). dy rows of 256 fp32
channels are 8 lines apart, so a k-step's 128 rows land in one set of a v100's four; a 2 x 2-tap sub-problem
moves to the next set every 16 k-steps, a 2 x 1-tap one every 8."""
import collections

import pytest

import analytic
import analytic._l1_rounds
import analytic.model as model
import simcore
import traces
from analytic._memo import clear_memo
from traces.stream import iter_request_chunks

L2_READS = "lts__t_sectors_srcunit_tex_op_read.sum"
HITS_A = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:A"
KERNEL = traces.KernelConfig(op="dgrad")


def _layer(n):
    return traces.ConvLayer(n, 256, 28, 28, 256, 3, 3, stride=2, pad=1, name=f"stride2_n{n}")


def _tpf(layer):
    return -(-layer.n * -(-layer.h // 2) * -(-layer.w // 2) // KERNEL.tile_m)


def _first_wave_pairs(layer, gpu, cps):
    """From the simulated stream (the generator's own block order and dispatch): per SM, its first ``cps`` CTAs
    and their k-steps; the share of those co-resident pairs whose k-loops are as long."""
    ctas = collections.defaultdict(list)
    steps = collections.Counter()
    for chunk in iter_request_chunks(layer, gpu, KERNEL):
        for sm, cta, step in zip(chunk.sm.tolist(), chunk.cta.tolist(), chunk.kstep.tolist()):
            if cta not in ctas[sm]:
                ctas[sm].append(cta)
            steps[cta] = max(steps[cta], step)
    same = pairs = 0
    for held in ctas.values():
        first = held[:cps]
        for j in range(1, len(first)):
            pairs += 1
            same += steps[first[0]] == steps[first[j]]
    return same / pairs


@pytest.mark.parametrize("n, sms", [(4, 0.5), (8, 0.25)])
def test_share_of_co_resident_pairs_in_step_matches_the_generator(n, sms):
    layer, gpu = _layer(n), simcore.scale_gpu(simcore.gpu("v100"), {"sms": sms})
    cps = model._machine(gpu, KERNEL)[0]
    assert cps == 2
    expected = _first_wave_pairs(layer, gpu, cps)
    assert 0.0 < expected < 1.0
    assert model._co_resident_loops(layer, KERNEL, gpu.sms, cps, _tpf(layer)) == pytest.approx(expected)


@pytest.mark.parametrize("n, sms", [(4, 0.5), (8, 0.25)])
def test_co_resident_ctas_of_other_loop_lengths_leave_the_set(monkeypatch, n, sms):
    """resnet50 layer3.0.conv2's shape at batch 4 and 8 on a v100 with a half and a quarter of its SMs: two
    CTAs an SM, of sub-problems with 4 and 2 taps mostly. Replayed at batch 32 on all 80 SMs, 73 % of A's re-reads
    one tap back hit: the window is one CTA's 128 lines where the other reads another set, over 256 where it
    reads the same. Taken as in step (the other CTA's lines always in the set), the model found 8-50 % of the
    simulator's A hits and L2 reads +14-17 %. The model's windows, here; dgrad's hits counted on the kernel's
    stream (`analytic._l1_sampled`) replace them, and give the simulator's."""
    layer, gpu = _layer(n), simcore.scale_gpu(simcore.gpu("v100"), {"sms": sms})
    sim = traces.simulate_layer(layer, gpu, KERNEL)
    clear_memo()
    counted = analytic.predict_layer(layer, gpu, KERNEL)
    assert counted[L2_READS] == pytest.approx(sim[L2_READS], rel=0.01)
    monkeypatch.setattr(analytic._l1_rounds, "dgrad_hit_shares", lambda *args: None)
    clear_memo()
    now = analytic.predict_layer(layer, gpu, KERNEL)
    with monkeypatch.context() as m:
        m.setattr(model, "_co_resident_loops", lambda *args: 1.0)
        clear_memo()
        in_step = analytic.predict_layer(layer, gpu, KERNEL)
    clear_memo()
    assert now[L2_READS] == pytest.approx(sim[L2_READS], rel=0.06)
    assert now[HITS_A] == pytest.approx(sim[HITS_A], rel=0.25)
    assert in_step[L2_READS] > 1.1 * sim[L2_READS]
    assert in_step[HITS_A] < 0.5 * sim[HITS_A]
