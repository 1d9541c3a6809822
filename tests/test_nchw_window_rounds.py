"""nchw fprop with several filter positions: a window of d positions holds the A and B lines of fewer than d / T_k
rounds where consecutive k-steps share lines (`_window.nchw_window_rounds`): the taps of one input row read
overlapping columns, and a k-step's filter bytes continue the last one's. Seed 4 #172 (11x11 stride 4, C 4 fp32):
re-reads 44 positions back, 5.5 rounds, hit at half the L1 in the simulation; d / T_k rounds' lines put them past
the ways (L2 reads +27.3 %)."""
import pathlib

import numpy as np
import pytest

import analytic
import traces
from analytic._geometry import geometry
from analytic._window import nchw_window_rounds
from simcore import metrics as M
from validation.random_cases import random_case

FACTORS = pathlib.Path(__file__).resolve().parent.parent / "validation" / "data" / "factors.json"
LINE = 128


def naive_a_lines(win, tm, g0, d, eb, tile):
    """Distinct A lines of one tile over GEMM k positions g0 .. g0 + d - 1, element by element (nchw x (N, C, H,
    W); gk = (c R + r) S + s; output row m = (n P + p) Q + q)."""
    lines = set()
    for gk in range(g0, min(g0 + d, win.c * win.r * win.s)):
        c, rs = divmod(gk, win.r * win.s)
        r, s = divmod(rs, win.s)
        for m in range(tile * tm, min((tile + 1) * tm, win.n * win.p * win.q)):
            n, pq = divmod(m, win.p * win.q)
            p, q = divmod(pq, win.q)
            h = p * win.sh + r * win.dh - win.ph
            w = q * win.sw + s * win.dw - win.pw
            if 0 <= h < win.h and 0 <= w < win.w:
                lines.add((((n * win.c + c) * win.h + h) * win.w + w) * eb // LINE)
    return len(lines)


def naive_a_rounds(win, tm, tk, eb, d):
    """Mean distinct lines of d-position windows over those of a k-step's T_k positions, on three tiles."""
    gk = win.c * win.r * win.s
    num = np.mean([naive_a_lines(win, tm, g, d, eb, t) for t in range(3) for g in range(0, gk - d + 1, 3)])
    den = np.mean([naive_a_lines(win, tm, g, tk, eb, t) for t in range(3) for g in range(0, gk - tk + 1, tk)])
    return num / den


def naive_b_rounds(filter_elems, tk, eb, d):
    """Distinct lines of a filter row's d consecutive elements over those of T_k, over every start and every
    128-byte alignment of the row."""
    def lines(n):
        out = []
        for base in range(0, LINE, eb):
            for g0 in range(0, filter_elems - n + 1):
                out.append((base + (g0 + n) * eb - 1) // LINE - (base + g0 * eb) // LINE + 1)
        return np.mean(out)
    return lines(d) / lines(tk)


CASES = [  # c, h, r, stride, tile_m, tile_k, bytes
    (4, 112, 11, 4, 64, 8, 4),
    (3, 64, 7, 2, 128, 8, 4),
    (8, 60, 5, 3, 128, 16, 2),
]


@pytest.mark.parametrize("c, h, r, stride, tm, tk, eb", CASES)
def test_window_rounds_against_an_element_count(c, h, r, stride, tm, tk, eb):
    layer = traces.ConvLayer(n=2, c=c, h=h, w=h, k=32, r=r, s=r, stride=(stride, stride), pad=(r // 2, r // 2))
    kernel = traces.KernelConfig(tile_m=tm, tile_n=32, tile_k=tk, threads=128, layout="nchw",
                                 dtype="fp32" if eb == 4 else "fp16")
    win = geometry(layer, kernel).win
    got = nchw_window_rounds(win, tm, tk, eb, LINE)
    rs = r * r
    assert got.shape == (2, rs) and not got.flags.writeable
    for d in (2 * tk, 3 * tk, rs - 1):
        if d >= rs:
            continue
        assert got[0, d] <= d / tk and got[1, d] <= d / tk
        # A: the sampled k-steps' estimate within 40 % of the element count
        want = naive_a_rounds(win, tm, tk, eb, d)
        if d >= 4 * tk:
            assert want < 0.8 * d / tk          # several k-steps: far fewer lines than d / T_k rounds'
        assert got[0, d] == pytest.approx(min(d / tk, want), rel=0.4)
        # B: the average over starts and alignments, exactly
        assert got[1, d] == pytest.approx(min(d / tk, naive_b_rounds(c * rs, tk, eb, d)), rel=0.02)


def test_stem_against_simulation():
    """Seed 4 #172: L2 reads (A's L1 misses) within 5 % of the simulation."""
    case = random_case(4, 172)
    sim = traces.simulate_layer(case.layer, case.gpu, case.kernel)
    pred = analytic.predict_layer(case.layer, case.gpu, case.kernel, analytic.ReuseFactors.load(FACTORS))
    assert pred[M.L2_RD_SECTORS] == pytest.approx(sim[M.L2_RD_SECTORS], rel=0.05)
