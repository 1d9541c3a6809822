"""nhwc rows narrower than a sector (stems of C 3-8): A's reuse histogram lets a row's first touch stand for the
sectors of its whole stride period (``spr`` = stride_w C e / 32) and the taps after it for reuses one position
back. Such a reuse that misses the L1 re-fetches the sectors of its own read, which are fewer where the stride
spreads the pixels more than a sector apart (`model._one_back_sectors`). Seed 2 #120 (7x7 stride 4, 28-byte
pixels, four CTAs an SM at the L1's capacity): A L1 misses +59.6 % with ``spr`` for every missed row."""
import math
import pathlib

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import analytic
import traces
from analytic._geometry import geometry
from analytic._window import a_window
from analytic.model import _one_back_sectors
from simcore import metrics as M
from validation.random_cases import random_case

FACTORS = pathlib.Path(__file__).resolve().parent.parent / "validation" / "data" / "factors.json"
SEC, LINE = 32, 128


def naive_one_back(c, eb, sw, s, rows=400, starts=(0,)):
    """Byte by byte: output column q reads pixel sw q + tap at each of the s taps (c eb bytes each) of an input
    row starting ``starts[i]`` bytes into a sector; a read's sectors, averaged over the columns and the rows'
    starts, s times over a sweep, less the sweep's new sectors (sw c eb / 32 a column), over the s - 1 taps
    after the first."""
    unit = c * eb
    reads = 0
    for start in starts:
        for q in range(rows):
            for tap in range(s):
                lo = start + (sw * q + tap) * unit
                reads += (lo + unit - 1) // SEC - lo // SEC + 1
    per_read = reads / (rows * s * len(starts))
    period = sw * unit / SEC
    return min(period, (s * per_read - period) / (s - 1))


@settings(max_examples=25, deadline=None)
@given(c=st.integers(3, 8), eb=st.sampled_from([2, 4]), sw=st.integers(2, 4), extra=st.integers(1, 8),
       tile_m=st.sampled_from([32, 64, 128, 256]), tile_k=st.sampled_from([8, 16, 32]))
def test_one_back_sectors_match_a_byte_count(c, eb, sw, extra, tile_m, tile_k):
    """The model's figure (the tile column's A sector reads, exact, less ``spr`` for each first touch, over the
    reuses one back) against the byte-level count of the rows' sweeps at the layer's row alignments: within 3 %
    (tile and image edges; 1.5 % at most over a grid of C, element size, stride, taps and tile_m. With one
    alignment, a row starting at a sector, the count missed by up to 11.5 % where the stride period is whole
    sectors: C 6 fp32, stride 4, five taps)."""
    assume(c * eb < SEC)                     # rows narrower than a sector: the histogram's dense form
    s = sw + extra
    layer = traces.ConvLayer(n=2, c=c, h=16, w=s + sw * 150, k=32, r=1, s=s, stride=(1, sw))
    kernel = traces.KernelConfig(tile_m=tile_m, tile_n=32, tile_k=max(tile_k, 8), threads=64,
                                 dtype="fp32" if eb == 4 else "fp16")
    geo = geometry(layer, kernel)
    hist, _rows_t, rows_total = a_window(geo.win, tile_m, kernel.tile_k, eb, True, SEC, LINE, 0.95)[:3]
    period = sw * c * eb / SEC
    got = _one_back_sectors(hist, rows_total, float(geo.counts["sec_A"]), period)
    # the layer's input rows start at every offset (n H + h) W c e takes modulo a sector
    starts = sorted({(row * layer.w * c * eb) % SEC for row in range(layer.n * layer.h)})
    want = naive_one_back(c, eb, sw, s, starts=starts)
    assert got <= period + 1e-12
    assert got == pytest.approx(want, rel=0.03)


def test_one_back_sectors_without_reuses_is_the_period():
    hist = np.array([[10.0], [10.0]])
    assert _one_back_sectors(hist, 20.0, 55.0, 2.5) == 2.5


def test_stem_at_the_l1_capacity_against_simulation():
    """Seed 2 #120: a100 with 4x its L2, 7x7 stride 4, C 7 fp32, 32x64x32 tiles of 64 threads. Its reuses one
    tap back lie at the L1's capacity (30 % hit in the simulation); A's L1 misses within 8 %."""
    case = random_case(2, 120)
    sim = traces.simulate_layer(case.layer, case.gpu, case.kernel)
    pred = analytic.predict_layer(case.layer, case.gpu, case.kernel, analytic.ReuseFactors.load(FACTORS))
    key = M.L1_LD_MISSES + ":A"
    assert 0.2 < sim[key] / sim[M.L1_LD_SECTORS + ":A"] < 0.8          # reuses that miss in part
    assert pred[key] == pytest.approx(sim[key], rel=0.08)
    assert math.isclose(pred[M.L1_LD_SECTORS + ":A"], sim[M.L1_LD_SECTORS + ":A"])
