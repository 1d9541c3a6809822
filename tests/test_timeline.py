"""`analytic._timeline` (the dispatcher's timeline for CTAs of unequal lengths) against the round-by-round
reference of tests/naive_timeline.py, and strided dgrad's filter sharing against simulation."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import analytic._l1_rounds
import simcore
import traces
from analytic import model
from analytic._memo import clear_memo
from analytic._timeline import lead_share, lockstep_lead_share

from .naive_timeline import naive_lead_share, naive_starts


def _share(lengths, counts, loads, sms, cps, fit):
    return lead_share(np.array(lengths, np.int64), np.array(counts, np.int64), np.array(loads, np.bool_),
                      sms, cps, fit)


def test_reference_by_hand():
    # one SM, two slots: run 0 (3 rounds) takes slot 0, run 1's first CTA slot 1 at round 0; slot 0 frees
    # at 3, slot 1 at 5, slot 0 again at 8
    assert naive_starts([3, 5], [1, 4], 1, 2) == [(0, 0, 0, 0), (0, 1, 1, 0), (0, 0, 1, 3), (0, 1, 1, 5),
                                                  (0, 0, 1, 8)]


@pytest.mark.parametrize("fit, share", [(1, 0.0), (2, 0.25), (3, 0.75)])
def test_desynchronised_slots_by_hand(fit, share):
    # run 1's CTAs start at 0, 3, 5, 8 on alternate slots: leads 3 (at 3), 2 (at 5), 3 (at 8); the first
    # has no CTA of run 1 beside it
    assert _share([3, 5], [1, 4], [False, True], 1, 2, fit) == pytest.approx(share)
    assert naive_lead_share([3, 5], [1, 4], [False, True], 1, 2, fit) == pytest.approx(share)


@pytest.mark.parametrize("sms, cps, waves", [(3, 2, 4), (5, 4, 2), (1, 3, 7)])
def test_lockstep_waves(sms, cps, waves):
    # equal lengths, full waves: every slot but the lowest is led, in the same round, by slot 0
    assert _share([6], [sms * cps * waves], [True], sms, cps, 0) == pytest.approx((cps - 1) / cps)


@settings(max_examples=150, deadline=None)
@given(sms=st.integers(1, 6), cps=st.integers(1, 4), fit=st.integers(0, 8),
       runs=st.lists(st.tuples(st.sampled_from([1, 2, 3, 5, 7, 8, 12]), st.integers(0, 40), st.booleans()),
                     min_size=1, max_size=6))
def test_lead_share_matches_reference(sms, cps, fit, runs):
    lengths, counts, loads = (list(x) for x in zip(*runs))
    assert _share(lengths, counts, loads, sms, cps, fit) == pytest.approx(
        naive_lead_share(lengths, counts, loads, sms, cps, fit), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(sms=st.integers(1, 7), cps=st.integers(1, 4), fit=st.integers(0, 8), length=st.integers(1, 20),
       runs=st.lists(st.tuples(st.integers(0, 60), st.booleans()), min_size=1, max_size=8))
def test_lockstep_closed_form_matches_the_fill(sms, cps, fit, length, runs):
    """Equal lengths: the closed form (a block led where the block one pass before it is of its run) against the
    slot-by-slot fill and the round-by-round reference."""
    counts, loads = (list(x) for x in zip(*runs))
    got = lockstep_lead_share(np.array(counts, np.int64), np.array(loads, np.bool_), sms, cps)
    lengths = [length] * len(counts)
    assert got == pytest.approx(_share(lengths, counts, loads, sms, cps, fit), abs=1e-12)
    assert got == pytest.approx(naive_lead_share(lengths, counts, loads, sms, cps, fit), abs=1e-12)


def test_strided_dgrad_filter_sharing_out_of_step(monkeypatch):
    """5x5 stride 2: sub-problems of 9, 6, 6 and 4 taps, so CTAs of 28, 19, 19 and 13 rounds. Two CTAs
    of an SM share their filter tile only while close in time; judged in lockstep, the model puts the
    filter's L1 hits some 15 points above the simulation. The model's windows (dgrad's hits counted on the kernel's
    stream, `analytic._l1_sampled`, replace them: off here)."""
    monkeypatch.setattr(analytic._l1_rounds, "dgrad_hit_shares", lambda *args: None)
    layer = traces.ConvLayer(n=16, c=64, h=49, w=39, k=48, r=5, s=5, stride=(2, 2), pad=(2, 2))
    kernel = traces.KernelConfig(tile_m=64, tile_n=64, tile_k=16, threads=256, vector=4, op="dgrad")
    gpu = simcore.replace_gpu(simcore.GPUS["titanxp"], sms=38)
    hits, sectors = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B",
                     "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:B")
    sim = traces.simulate_layer(layer, gpu, kernel)
    simulated = sim[hits] / sim[sectors]
    assert abs(analytic.predict_layer(layer, gpu, kernel)[hits] / sim[sectors] - simulated) < 0.03
    monkeypatch.setattr(model, "_lockstep_share", lambda *args: 1.0)
    clear_memo()                          # the memoized prediction was made with the real share
    assert analytic.predict_layer(layer, gpu, kernel)[hits] / sim[sectors] - simulated > 0.10
