"""A later wave's re-fetch of a tile (`analytic.model._tile_refetches`): the footprint of a full wave, the
last wave's own, and the spread of a line's last touch over its channel blocks (`_l2.spread_refetch_misses`),
against slow references; and the wave rows they read (`_schedule.wave_stats`)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import simcore
from analytic._l2 import NO_TABLE, banded_refetch_misses, cliff_params, l2_miss_prob, spread_refetch_misses
from analytic.factors import ReuseFactors
from analytic.model import _line_blocks, _tile_refetches
from analytic._schedule import last_wave_hists, wave_stats

GPU = simcore.gpu("v100")
CLIFF = cliff_params(GPU, ReuseFactors())
CAP = GPU.l2_bytes / GPU.line_bytes


def _miss_sum(hist, volume, footprint):
    """Slow reference of `refetch_misses` without bands: each gap g's re-reads at footprint(g)."""
    return sum(hist[g] * volume * l2_miss_prob(footprint(g) / CAP, GPU.l2_ways, CLIFF)
               for g in range(1, len(hist)))


@settings(max_examples=50, deadline=None)
@given(f1=st.floats(0.3, 1.6), fnew=st.floats(0.0, 1.0), shrink=st.floats(0.0, 0.4),
       hist=st.lists(st.floats(0.0, 50.0), min_size=4, max_size=4),
       twice=st.lists(st.floats(0.0, 0.5), min_size=4, max_size=4))
def test_spread_refetch_is_the_mean_over_the_places_of_the_last_touch(f1, fnew, shrink, hist, twice):
    # at place u = (i + 0.5) / 8 of the earlier CTA's blocks the footprint is f1 - u shrink (fnew per
    # further wave unchanged), less the lines of the tiles a gap's window holds twice (`_wave_windows`); no
    # spread at all is the banded sum itself
    hist, twice = np.array([0.0] + hist), np.array([0.0] + twice) * CAP
    f1, fnew, shrink = f1 * CAP, fnew * CAP, shrink * CAP
    got = spread_refetch_misses(hist, 3.0, f1, fnew, 0.0, 0.0, True, CAP, GPU.l2_ways, CLIFF, shrink, twice, NO_TABLE)
    want = np.mean([_miss_sum(hist, 3.0, lambda g, u=u: max(0.0, max(0.0, f1 - u * shrink) + (g - 1) * fnew
                                                          - twice[g]))
                    for u in (np.arange(8) + 0.5) / 8])
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert spread_refetch_misses(hist, 3.0, f1, fnew, 0.0, 0.0, True, CAP, GPU.l2_ways, CLIFF, 0.0, twice, NO_TABLE) == \
        banded_refetch_misses(hist, 3.0, f1, fnew, 0.0, 0.0, True, CAP, GPU.l2_ways, CLIFF, twice, NO_TABLE)


def test_line_blocks_count_the_blocks_of_a_line():
    assert _line_blocks(192, 32, 2, 128, True) == 2           # 64-byte blocks of 384-byte pixels
    assert _line_blocks(256, 8, 4, 128, True) == 4            # 32-byte blocks
    assert _line_blocks(64, 32, 4, 128, True) == 1            # a block fills the line
    assert _line_blocks(16, 8, 4, 128, True) == 1             # pixels narrower than a line
    assert _line_blocks(256, 8, 4, 128, False) == 1           # nchw


def test_a_small_last_wave_does_not_shrink_the_full_waves_footprint():
    """Two full waves and a quarter one (seed 5 #44's grid): the full waves' re-reads meet a full wave's
    lines, not the mean over the three waves; the last wave's meet half its own loads and half a full
    wave's. Checked against the miss sums at those footprints, by hand."""
    tiles_m, tiles_n, swz, sms, cps = 90, 12, 2, 60, 8
    per_wave = sms * cps
    hist_a, _hb, hist_h, _sums, per = wave_stats(tiles_m, tiles_n, swz, per_wave, 10 ** 6)
    last_a, last_h = last_wave_hists(tiles_m, tiles_n, swz, per_wave)
    assert per[-1, 3] == 120 and np.all(per[:-1, 3] == per_wave)
    dens_l, tm, delta, b_lines, c_lines = 4.0, 64.0, 72.0, 896.0, 64.0
    full = per[:-1]
    w = full[:, 0].sum()
    na, nb, nc, runs = (full[:, 1:5] * full[:, :1]).sum(axis=0) / w
    loads = dens_l * (na * tm + runs * delta) + nb * b_lines
    last = per[-1]
    loads_last = dens_l * (last[1] * tm + last[4] * delta) + last[2] * b_lines
    f_in, f_last = loads + nc * c_lines, 0.5 * (loads + loads_last) + nc * c_lines
    fnew = 0.5 * f_in
    got = _tile_refetches(100.0, 0.0, 1.0, fnew, 0.0, 0.0, (tiles_m, tiles_n, swz, sms, cps),
                          (dens_l, tm, delta, b_lines, c_lines, 0.0), 1, 16, CAP, GPU.l2_ways, CLIFF, np.zeros(0))
    want = (_miss_sum(hist_a - last_a, 100.0, lambda g: f_in + (g - 1) * fnew)
            + _miss_sum(last_a, 100.0, lambda g: f_last + (g - 1) * fnew))
    assert got == pytest.approx(want, rel=1e-9)
    assert f_in > loads_last + nc * c_lines > 0 and math.isfinite(got)
