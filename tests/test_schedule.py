"""analytic._schedule against the brute-force dispatch of tests/naive_schedule.py."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from analytic._schedule import (CFG_ASHARE, CFG_BREP, CFG_K, CFG_NA, CFG_NB, CFG_PREV, GAP_MAX, l2_classes,
                               last_wave_hists, sm_config_summary, sm_configs, tile_of, wave_classes,
                               wave_stats)
from tests.naive_schedule import _dispatch, merge_configs, naive_sm_configs, naive_valid_blocks, naive_wave_stats

grids = st.tuples(st.integers(1, 40), st.integers(1, 12), st.integers(0, 3), st.integers(1, 12),
                  st.integers(1, 4))


@given(grids)
@settings(max_examples=300)
def test_tile_of_is_the_dispatch_order(grid):
    tm, tn, swz, _sms, _cps = grid
    assert [tile_of(v, tm, tn, swz) for v in range(tm * tn)] == naive_valid_blocks(tm, tn, swz)


@given(grids)
@settings(max_examples=300)
def test_sm_config_summary_counts_the_naive_configurations(grid):
    # every CTA sampled: one row per distinct configuration, its weight the number of CTAs that have it
    tm, tn, swz, sms, cps = grid
    summary = sm_config_summary(tm, tn, swz, sms, cps, 10 ** 6)
    got = {tuple(float(x) for x in r[1:]): float(r[0]) for r in summary}
    assert len(got) == summary.shape[0]
    want = Counter(tuple(float(x) for x in r) for r in naive_sm_configs(tm, tn, swz, sms, cps))
    assert got == {key: float(n) for key, n in want.items()}


@given(st.integers(1, 900), st.integers(1, 9), st.integers(0, 3), st.integers(8, 140), st.integers(1, 4),
       st.integers(1, 64))
@settings(max_examples=200)
def test_sm_config_summary_is_the_merged_sample(tm, tn, swz, sms, cps, samples):
    # sampled grids: the keyed merge gives the rows, weights and order of merging the sampled rows
    merged = merge_configs(sm_configs(tm, tn, swz, sms, cps, samples))
    assert np.array_equal(sm_config_summary(tm, tn, swz, sms, cps, samples), merged)


def test_first_wave_is_sampled_when_the_last_wave_fills_every_sm():
    # 132 SMs, 2 CTAs each, 784 CTAs: 2 full waves' pairs sampled beside the 132 SMs of the partial
    # last one; the first wave's CTAs (no previous occupant) carry their share of the weight
    rows = sm_config_summary(196, 4, 0, 132, 2, 128)
    first = rows[rows[:, CFG_PREV] == 0.0, 0].sum()
    assert abs(first - 264) <= 0.1 * 264
    assert abs(rows[:, 0].sum() - 784) < 1e-6


@given(grids)
@settings(max_examples=300)
def test_sm_configs_exhaustive_equals_naive(grid):
    tm, tn, swz, sms, cps = grid
    rows = sm_configs(tm, tn, swz, sms, cps, 10 ** 6)
    assert np.all(rows[:, 0] == 1.0)
    assert sorted(tuple(float(x) for x in r[1:]) for r in rows) == \
        [tuple(float(x) for x in r) for r in naive_sm_configs(tm, tn, swz, sms, cps)]


@given(grids)
@settings(max_examples=300)
def test_wave_stats_exhaustive_equals_naive(grid):
    tm, tn, swz, sms, cps = grid
    got = wave_stats(tm, tn, swz, sms * cps, 10 ** 6)
    want = naive_wave_stats(tm, tn, swz, sms * cps, GAP_MAX)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


def test_hand_made_swizzle_and_partial_row():
    # 3 x 3 tiles, swizzle 1 (width 2): rows of 6 blocks (tile_n 0-1), then a last row keeping lane 0 only
    blocks = [tile_of(v, 3, 3, 1) for v in range(9)]
    assert blocks == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (0, 2), (1, 2), (2, 2)]
    # waves of 4 CTAs: wave 0 = blocks 0..3 (tile_m 0, 1; tile_n 0, 1); wave 1 = blocks 4..7 re-reads
    # tile_m 0 and 1 and tile_n 0 and 1 (gap 1), first reads tile_m 2 and tile_n 2; wave 2 = block 8
    # re-reads tile_m 2 and tile_n 2 (gap 1)
    hist_a, hist_b, hist_h, sums, per = wave_stats(3, 3, 1, 4, 100)
    assert hist_a[1] == 3 and hist_a.sum() == 3
    assert hist_b[1] == 3 and hist_b.sum() == 3
    # boundaries: wave 1 touches (0,1) and (1,2), both read before (gap 1); wave 2 touches (1,2): gap 1
    assert hist_h[1] == 3 and hist_h.sum() == 3
    # CTA-weighted: waves of 4, 4 and 1 CTAs with 2, 3 and 1 distinct tile_m (and tile_n)
    assert list(sums) == [2 + 3 + 1, 2 + 3 + 1, 9, 3, 1 + 1 + 1, 4 * 2 + 4 * 3 + 1, 4 * 2 + 4 * 3 + 1]
    # each wave on its own: [weight, distinct tile_m, distinct tile_n, CTAs, tile_m runs]
    assert per.tolist() == [[1, 2, 2, 4, 1], [1, 3, 3, 4, 1], [1, 1, 1, 1, 1]]
    # 1, 2 and 3 distinct tile_m differ by more than 10 %: three classes, each tile_m fetch / 3 tile_m
    np.testing.assert_allclose(wave_classes(per, 3), [[1, 1, 1, 1 / 3, 1], [1, 2, 2, 2 / 3, 1], [1, 3, 3, 1, 1]])


def test_wave_classes_merge_alike_waves_weighted_by_their_ctas():
    # waves of 100 and 105 distinct tile_m (within 10 %) are one class, averaged over their CTAs (2 x 50 and
    # 1 x 200 CTAs: (100 * 100 + 105 * 200) / 300); a wave of 20 tile_m is a class of its own
    per = np.array([[2.0, 100, 4, 50, 1], [1.0, 105, 2, 200, 2], [1.0, 20, 1, 10, 1]])
    got = wave_classes(per, 500)
    assert got.shape == (2, 5)
    np.testing.assert_allclose(got[0], [1.0, 20, 1, 20 / 500, 1])
    np.testing.assert_allclose(got[1], [3.0, (100 * 100 + 105 * 200) / 300, (4 * 100 + 2 * 200) / 300,
                                        (2 * 100 + 105) / 500, (1 * 100 + 2 * 200) / 300])
    # every wave's tile_m fetches are counted once, whatever the classes
    assert abs(got[:, 3].sum() * 500 - (2 * 100 + 105 + 20)) < 1e-9


def test_sampled_statistics_stay_close_to_exhaustive():
    # a grid with 60 waves; 16 sampled waves estimate the sums within a few percent
    exact = wave_stats(300, 6, 2, 30, 10 ** 6)
    sampled = wave_stats(300, 6, 2, 30, 16)
    for e, s in zip(exact[:4], sampled[:4]):
        assert abs(e.sum() - s.sum()) <= 0.05 * e.sum() + 1
    # the per-wave rows stand for every wave: their weights sum to the waves, CTAs x weight to the CTAs
    for per in (exact[4], sampled[4]):
        assert abs(per[:, 0].sum() - 60) < 1e-9 and abs(per[:, 0] @ per[:, 3] - 1800) < 1e-6
    rows_e = sm_configs(300, 6, 2, 10, 3, 10 ** 6)
    rows_s = sm_configs(300, 6, 2, 10, 3, 64)
    assert abs(rows_e[:, 0].sum() - rows_s[:, 0].sum()) < 1e-6      # weights sum to the CTAs
    for col in range(2, rows_e.shape[1]):
        me = np.average(rows_e[:, col], weights=rows_e[:, 0])
        ms = np.average(rows_s[:, col], weights=rows_s[:, 0])
        assert abs(me - ms) <= 0.05 * max(1.0, me)


def test_l2_classes_scale_each_class_to_the_l2():
    # the classes of the hand-made test above, with 3 tile_m of 128 rows, 2 lines a row, a halo of 10
    # rows a run, 5 B lines a tile_n, an L2 of 1,000 lines
    per = np.array([[1.0, 2, 2, 4, 1], [1.0, 3, 3, 4, 1], [1.0, 1, 1, 1, 1]])
    got = l2_classes(per, 3, 1000.0, 5.0, 2.0, 128.0, 10.0)
    for row, (na, nb, share) in zip(got, [(1, 1, 1 / 3), (2, 2, 2 / 3), (3, 3, 1.0)]):
        np.testing.assert_allclose(row, [na / 1000, 2 * (na * 128 + 10) / 1000, nb * 5 / 1000, share])


@given(st.integers(2, 40), st.integers(1, 5), st.integers(1, 4), st.integers(0, 2), st.integers(1, 12),
       st.integers(1, 4), st.data())
@settings(max_examples=150)
def test_strided_dgrad_configurations_follow_the_naive_dispatch(tpf, subs, tn, swz, sms, cps, data):
    # strided dgrad (`m_div`, `bcls`): tile_m tpf apart belong to the next sub-problem; a CTA's A window is its
    # tile's place in its sub-problem (a_key), its B reads its column and its sub-problem's class (b_key).
    # Per CTA of the naive dispatch: the SM's distinct A windows and B keys, an earlier slot of the same B key
    # (BREP), and ASHARE: an earlier slot with the same A window but another tile_m
    bcls = np.array(data.draw(st.lists(st.integers(0, 2), min_size=subs, max_size=subs)), np.int64)
    tm = tpf * subs
    rows = sm_configs(tm, tn, swz, sms, cps, 10 ** 6, tpf, bcls)
    got = Counter(tuple(float(r[c]) for c in (CFG_K, CFG_NA, CFG_NB, CFG_BREP, CFG_ASHARE)) for r in rows)
    want = Counter()
    for slots_by_sm in _dispatch(tm, tn, swz, sms, cps):
        for tiles in slots_by_sm.values():
            akeys = [t[0] % tpf for t in tiles]
            bkeys = [t[1] * len(bcls) + int(bcls[t[0] // tpf]) for t in tiles]
            for s in range(len(tiles)):
                ashare = any(akeys[j] == akeys[s] and tiles[j][0] != tiles[s][0] for j in range(s))
                want[(float(len(tiles)), float(len(set(akeys))), float(len(set(bkeys))),
                      float(bkeys[s] in bkeys[:s]), float(ashare))] += 1
    assert got == want


@settings(max_examples=60, deadline=None)
@given(tm=st.integers(1, 40), tn=st.integers(1, 8), swz=st.integers(0, 3), per_wave=st.integers(1, 30))
def test_last_wave_hists_are_the_last_waves_own(tm, tn, swz, per_wave):
    """`last_wave_hists`: the grid's last wave's re-read histograms alone, against the naive dispatch that
    follows every wave and counts only the last one's fetches."""
    waves = -(-tm * tn // per_wave)
    want_a, _b, want_h, _sums = naive_wave_stats(tm, tn, swz, per_wave, GAP_MAX, only_wave=waves - 1)
    got_a, got_h = last_wave_hists(tm, tn, swz, per_wave)
    assert got_a.tolist() == pytest.approx(want_a)
    assert got_h.tolist() == pytest.approx(want_h)

