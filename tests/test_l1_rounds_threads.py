"""`analytic._l1_rounds` replays its (wave, SM) samples on threads (`_threads.in_order`): the counts must be those of one
thread taking the samples in order, the budget rule included, whatever the number of threads."""
import multiprocessing
import time

import numpy as np
import pytest

import simcore
import traces
from analytic import _l1_rounds
from analytic import _threads
from analytic._l1_rounds import _COMPILED
from analytic._threads import in_order
from tests.test_l1_rounds import round_args


def _serial(args, n_sm, budget, warm, classes):
    """The rule written out: the plan's samples one after the other, at least MIN_SAMPLES, none once ``budget``
    touches are replayed."""
    dims, tm, tn, tk, vec, threads, eb, tiles_m, tiles_n, swz, sms, cps, line, sec, sets, ways, w_base = args
    tmv, tnv, cand = _COMPILED["plan"](dims, tm, tiles_m, tiles_n, swz, sms, cps, n_sm)
    out = np.zeros(4, np.int64)
    spent = done = 0
    for w0, sm, base in cand:
        if done >= _l1_rounds.MIN_SAMPLES and spent >= budget:
            break
        got = _COMPILED["sample"](dims, tmv, tnv, int(w0), int(sm), int(base), tm, tn, tk, vec, threads, eb, sms, cps,
                                  line, sec, sets, ways, w_base, warm, classes)
        out += np.array(got[:4])
        spent += got[4]
        done += 1
    return tuple(int(x) for x in out), done


CASE = (traces.ConvLayer(name="stem", n=4, c=3, h=40, w=40, k=64, r=7, s=7, stride=(2, 2), pad=(3, 3)),
        simcore.gpu("v100"), traces.KernelConfig(tile_m=64, tile_n=64, threads=128))


@pytest.mark.parametrize("width", [1, 2, 3, 8])
@pytest.mark.parametrize("budget", [1, 20_000, 10 ** 12])
def test_threaded_counts_are_the_serial_ones(monkeypatch, width, budget):
    layer, gpu, kernel = CASE
    args = round_args(layer, gpu, kernel)
    classes = np.zeros(0, np.int64)
    want, done = _serial(args, 24, budget, 1, classes)
    if budget == 1:
        assert done == _l1_rounds.MIN_SAMPLES          # the budget stops the replay, past the least samples
    monkeypatch.setattr(_threads, "sample_threads", lambda: width)
    got = _COMPILED["hits"](*args, 24, budget, 1, classes)
    assert tuple(got[:4]) == want


@pytest.mark.parametrize("width", [1, 2, 4])
def test_in_order_takes_rows_in_order_until_the_rule_stops(monkeypatch, width):
    monkeypatch.setattr(_threads, "sample_threads", lambda: width)
    taken, ran = [], []

    def slow(x):
        ran.append(x)
        time.sleep(0.002 * (5 - x % 5))           # later rows finish first
        return x * x

    for v in in_order(slow, list(range(20)), lambda: len(taken) >= 7):
        taken.append(v)
    assert taken == [x * x for x in range(7)]
    time.sleep(0.05)
    assert len(ran) <= 7 + width - 1              # at most a window's rows run past the stop


def _replay_in_child(queue):
    layer, gpu, kernel = CASE
    got = _COMPILED["hits"](*round_args(layer, gpu, kernel), 16, 10 ** 12, 0, np.zeros(0, np.int64))
    queue.put(tuple(int(x) for x in got[:4]))


def test_a_forked_child_replays_on_its_own_threads(monkeypatch):
    """A child forked after the parent made its thread pool (Dask's and multiprocessing's workers) gets a new one:
    the parent's threads do not exist there, and waiting on them would never end."""
    monkeypatch.setattr(_threads, "sample_threads", lambda: 2)
    layer, gpu, kernel = CASE
    here = _COMPILED["hits"](*round_args(layer, gpu, kernel), 16, 10 ** 12, 0, np.zeros(0, np.int64))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_replay_in_child, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=120) == tuple(int(x) for x in here[:4])
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()


@pytest.mark.parametrize("budget", [30_000, 10 ** 12])
def test_dgrad_threaded_shares_are_the_serial_ones(monkeypatch, budget):
    """`_l1_sampled` replays dgrad's samples one a call on threads, each with its own stream state and L1: the same
    shares as one call over every sample (the pilot and the budget's stop included)."""
    from analytic import _l1_sampled
    layer = traces.ConvLayer(n=6, c=8, h=41, w=37, k=32, r=3, s=3, stride=(2, 2), pad=(1, 1), name="s2")
    kernel = traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, op="dgrad", ctas_per_sm=2)
    gpu = simcore.replace_gpu(simcore.gpu("p100"), sms=4)
    monkeypatch.setattr(_l1_sampled, "WHOLE_TOUCHES", 0)
    monkeypatch.setattr(_l1_sampled, "TOUCH_BUDGET", budget)
    monkeypatch.setattr(_threads, "sample_threads", lambda: 1)
    serial = _l1_sampled._count(layer, kernel, gpu)
    for width in (2, 3):
        monkeypatch.setattr(_threads, "sample_threads", lambda: width)
        assert _l1_sampled._count(layer, kernel, gpu) == serial
