"""Strided dgrad's dy re-reads on the dispatcher's rounds (`analytic._dispatch.dy_reread_misses`,
`analytic.model._later_wave_rereads`): against a round-by-round Python reference that lists what every round
touches, and against the simulated DRAM reads."""
import collections

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from analytic._dispatch import dispatch, dy_reread_misses, strided_blocks
from analytic._l2 import l2_miss_prob


def slow_dy_rereads(blk_tm, blk_tn, blk_steps, placed, tpf, places, readers, nblk, nk, store_lines, block_lines,
                    step_b_lines, cap_lines, ways, cliff):
    """Pure Python: what every round touches (DESIGN 3a: a CTA of T taps reads, at k-step t of its rounds
    start .. end - 2, dy channel block t // T of its place (the sub-problems' windows of one place share most
    rows) and its column's filter rows of (sub-problem, t); it stores its dx tile in round end - 1), as sets; per
    sampled place (its first ``readers`` reads) and channel block (``nk`` of them, evenly spread), its readers in
    time order, and for each one that starts after every earlier one's last read of the block, the units touched
    in the rounds between (a set union), weighed into lines and through the L2 cliff."""
    nb = placed.shape[0]
    rounds = collections.defaultdict(set)
    for b in range(nb):
        start, end = int(placed[b, 2]), int(placed[b, 2] + blk_steps[b])
        rounds[end - 1].add(("store", b))
        if blk_tm[b] < 0:
            continue
        taps = (int(blk_steps[b]) - 1) // nblk
        sub = int(blk_tm[b]) // tpf
        for t in range(end - 1 - start):
            rounds[start + t].add(("dy", int(blk_tm[b]) % tpf, t // taps))
            rounds[start + t].add(("w", int(blk_tn[b]), sub, t))
    miss, pairs = 0.0, 0
    for pi in range(places):
        i = int((pi + 0.5) * tpf / places)
        mine = [b for b in range(nb) if blk_tm[b] >= 0 and blk_tm[b] % tpf == i][:readers]
        if len(mine) < 2:
            continue
        pairs += len(mine) - 1
        for k0 in ((2 * kk + 1) * nblk // (2 * nk) for kk in range(nk)):
            spans = []
            for b in mine:
                taps = (int(blk_steps[b]) - 1) // nblk
                first = int(placed[b, 2]) + k0 * taps
                spans.append((first, first + taps - 1))
            spans.sort(key=lambda s: s[0])                     # stable: dispatch order among equal starts
            last = spans[0][1]
            for first, end in spans[1:]:
                if first > last + 1:
                    seen = set().union(*(rounds[r] for r in range(last + 1, first)))
                    kinds = collections.Counter(u[0] for u in seen)
                    lines = kinds["store"] * store_lines + kinds["dy"] * block_lines + kinds["w"] * step_b_lines
                    miss += l2_miss_prob.py_func(lines / cap_lines, ways, cliff) / nk
                last = max(last, end)
    return miss, pairs


@settings(max_examples=60, deadline=None)
@given(subs=st.lists(st.integers(0, 4), min_size=1, max_size=6), tpf=st.integers(1, 9), tiles_n=st.integers(1, 4),
       swz=st.integers(0, 2), sms=st.integers(1, 7), cps=st.integers(1, 3), nblk=st.integers(1, 7),
       places=st.integers(1, 4), readers=st.integers(2, 6), nk=st.integers(1, 4),
       cap=st.sampled_from([20.0, 60.0, 200.0]))
def test_misses_match_the_round_by_round_reference(subs, tpf, tiles_n, swz, sms, cps, nblk, places, readers, nk,
                                                   cap):
    # sub-problems of 0 taps store only (one round); the others load nblk x taps k-steps
    steps = np.array([nblk * taps + 1 if taps else 1 for taps in subs], np.int64)
    loading = np.array([taps > 0 for taps in subs])
    place = np.where(loading, np.cumsum(loading) - 1, -1).astype(np.int64)
    tm, tn, st_ = strided_blocks(tpf * len(subs), tiles_n, swz, tpf, steps, place)
    placed = dispatch(st_, sms, cps, len(st_))
    places, nk = min(places, tpf), min(nk, nblk)
    args = (tm, tn, st_, placed, tpf, places, readers, nblk, nk, 3.0, 2.0, 1.5, cap, 4.0, (0.4, 0.5))
    miss, pairs = dy_reread_misses(tm, tn, st_, placed, tpf, tiles_n, places, readers, nblk, nk, 3.0, 2.0, 1.5, cap,
                                   4.0, (0.4, 0.5))
    want_miss, want_pairs = slow_dy_rereads(*args)
    assert pairs == want_pairs
    assert miss == pytest.approx(want_miss, rel=1e-9, abs=1e-12)


def test_a_later_column_after_a_whole_wave_of_stores_misses():
    # one place, two columns of one sub-problem, one slot: column 0's CTA reads in rounds 0-1 and stores in 2, three
    # store-only CTAs store in rounds 3-5, column 1's CTA reads from round 6: 4 x 10 lines between, 1.33 L2s of
    # 30 lines (16 ways)
    steps = np.array([3, 1, 1, 1], np.int64)                  # 1 block, 2 taps; three store-only sub-problems
    place = np.array([0, -1, -1, -1], np.int64)
    tm, tn, st_ = strided_blocks(4, 2, 0, 1, steps, place)
    placed = dispatch(st_, 1, 1, len(st_))
    miss, pairs = dy_reread_misses(tm, tn, st_, placed, 1, 2, 1, 8, 1, 1, 10.0, 1.0, 1.0, 30.0, 16.0, (0.4, 0.5))
    assert pairs == 1 and miss > 0.85
    # the same with an L2 of 3,000 lines: kept
    miss, _ = dy_reread_misses(tm, tn, st_, placed, 1, 2, 1, 8, 1, 1, 10.0, 1.0, 1.0, 3000.0, 16.0, (0.4, 0.5))
    assert miss < 1e-6


@pytest.mark.parametrize("case, before, tolerance", [
    # 3x3 stride 2, C 1024 on a titanxp: 9-, 5- and 3-round sub-problems side by side; counted in waves of blocks
    # with the sub-problems' own grids' re-reads added, +23.8 %
    ((5, 188), 0.238, 0.05),
    # 11x11 stride 4, fp16 C 6: +50.7 % before
    ((21, 85), 0.507, 0.12),
])
def test_dy_dram_reads_against_simulation(case, before, tolerance):
    from simcore import metrics as M
    from tests.random_case_error import relative_error
    err = relative_error(case, M.DRAM_RD_SECTORS)
    assert abs(err) <= tolerance < before
