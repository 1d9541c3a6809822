"""Strided dgrad's store-only CTAs between two reads of dy (`analytic._store_only`): the runs' start spans
against the round-by-round dispatcher of tests/naive_timeline.py, and dy's DRAM reads against simulation."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._memo import clear_memo
from analytic._store_only import run_spans, store_only_rereads
from simcore.hypothetical import scale_gpu

from .naive_timeline import naive_starts

DY_DRAM = "dram__sectors_read.sum:A"


@settings(max_examples=150, deadline=None)
@given(sms=st.integers(1, 6), cps=st.integers(1, 4),
       runs=st.lists(st.tuples(st.sampled_from([1, 2, 3, 5, 7, 12]), st.integers(1, 40)), min_size=1, max_size=6))
def test_run_spans_match_the_dispatcher(sms, cps, runs):
    lengths, counts = (list(x) for x in zip(*runs))
    got = run_spans(np.array(lengths, np.int64), np.array(counts, np.int64), sms, cps)
    starts = naive_starts(lengths, counts, sms, cps)
    for r in range(len(runs)):
        mine = [t for _sm, _slot, run, t in starts if run == r]
        assert got[r].tolist() == [min(mine), max(mine)]


def test_run_spans_by_hand():
    # two SMs of one slot: run 0's 3 CTAs of 4 rounds start at 0, 0 and 4 (SM 0, the first in the pass);
    # run 1's 2 CTAs of 1 round on SM 1, free at 4 and again at 5 (SM 0 runs until 8)
    assert run_spans(np.array([4, 1]), np.array([3, 2]), 2, 1).tolist() == [[0, 4], [4, 5]]


def _case():
    # 1x1 stride 2: starts (0, 1), (1, 0), (1, 1) reach no tap, so their CTAs only store their dx rows
    layer = traces.ConvLayer(n=24, c=384, h=17, w=17, k=96, r=1, s=1, stride=(2, 2), name="ds")
    kernel = traces.KernelConfig(tile_m=128, tile_n=128, tile_k=32, threads=256, dtype="fp16", vector=8,
                                 swizzle_log=1, op="dgrad")
    gpu = scale_gpu(simcore.gpu("titanxp"), {"l2_bytes": 0.5, "sms": 0.75})
    return layer, kernel, gpu


def test_no_store_only_sub_problem_adds_nothing():
    layer, kernel, gpu = _case()
    three = traces.ConvLayer(n=24, c=384, h=17, w=17, k=96, r=3, s=3, stride=(2, 2), pad=(1, 1), name="c")
    f = analytic.ReuseFactors()
    assert store_only_rereads(three, kernel, gpu, f, (2, 96, 4), 16, 1000.0, 12000.0) == 0.0
    assert store_only_rereads(layer, kernel, gpu, f, (2, 96, 4), 16, 1000.0, 12000.0) > 0.0


def test_dy_rereads_behind_the_store_only_stores_against_the_simulation(monkeypatch):
    # three columns of 128 channels in bands of two: band 0's 96 store-only CTAs store 24.6k lines in a
    # 12.3k-line L2 before band 1 reads dy again, so dy comes from DRAM twice (1.9 x simulated); the loading
    # CTAs alone would run both bands side by side (predicted -39 % without the store-only term; -47 % before
    # a full wave's footprint replaced the mean over waves, MODEL.md section 9)
    layer, kernel, gpu = _case()
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    assert sim[DY_DRAM] > 1.8 * -(-layer.n * layer.p * layer.q * layer.k * 2 // 32)
    assert abs(analytic.predict_layer(layer, gpu, kernel)[DY_DRAM] / sim[DY_DRAM] - 1) < 0.2
    monkeypatch.setattr(analytic.model, "store_only_rereads", lambda *args: 0.0)
    clear_memo()                          # the memoized prediction was made with the real term
    assert analytic.predict_layer(layer, gpu, kernel)[DY_DRAM] / sim[DY_DRAM] - 1 < -0.3
