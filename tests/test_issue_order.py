"""The window of a reuse one filter position back (`analytic._issue_order`): the rows' places in their
k-steps, the tiles' valid rows and dgrad's filter lines in the reused line's set, against the slow
references of tests/naive_issue_order.py; and the L1 hits they give against simulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic
import simcore
import traces
from analytic._geometry import Window, geometry
from analytic._issue_order import (NB, NQ, NV, _OVERLAP_SAMPLES, _VALID_SAMPLES, NB_COLS, _shift_corrections,
                                   b_lines_in_a_set, issue_corrections, request_order, row_positions,
                                   tile_valid_rows)
from analytic._line_windows import line_corrections
from simcore.hypothetical import scale_gpu
from simcore import metrics as Mx
from traces import ConvLayer, KernelConfig

from . import naive_issue_order as naive


def _thread_map(tm, tk, vector, threads):
    t_c = tk // vector
    return t_c <= threads and threads % t_c == 0 and tm % (threads // t_c) == 0


@settings(max_examples=60, deadline=None)
@given(tm=st.sampled_from([16, 32, 64, 128]), tk=st.sampled_from([8, 16, 32]), vector=st.sampled_from([1, 2, 4, 8]),
       threads=st.sampled_from([64, 128, 256]))
def test_row_positions_follow_the_threads(tm, tk, vector, threads):
    if not _thread_map(tm, tk, vector, threads):
        return
    assert row_positions(tm, tk, threads, vector).tolist() == naive.issue_order(tm, tk, threads, vector)


@settings(max_examples=40, deadline=None)
@given(tm=st.sampled_from([32, 64, 128, 256]), tk=st.sampled_from([32, 64]), threads=st.sampled_from([64, 128, 256]))
def test_raked_row_positions_follow_the_threads(tm, tk, threads):
    t_s = 32 // (tk // 8)
    if tm % t_s or (tm // t_s) % (threads // 32):
        return
    assert row_positions(tm, tk, threads, 8, raked=True).tolist() == naive.raked_issue_order(tm, tk, threads, 8)


@settings(max_examples=80, deadline=None)
@given(tm=st.sampled_from([16, 32, 64, 128]), tk=st.sampled_from([8, 16, 32]), vector=st.sampled_from([1, 2, 4]),
       threads=st.sampled_from([64, 128, 256]), pitch=st.sampled_from([16, 32, 64, 96, 128, 256, 384, 512, 640]),
       sets=st.sampled_from([2, 4]), data=st.data())
def test_shift_corrections_count_the_window_row_by_row(tm, tk, vector, threads, pitch, sets, data):
    if not _thread_map(tm, tk, vector, threads):
        return
    dm = data.draw(st.integers(-tm, tm))
    pos = row_positions(tm, tk, threads, vector)
    cls = (np.arange(tm) * pitch // 128) % sets
    got = _shift_corrections(dm, pos, pitch, 128, sets, float(len(set(cls.tolist()))), NQ)
    values = naive.window_corrections(dm, pos.tolist(), pitch, sets)
    want = naive.quantiles(values, NQ) if values and dm else [0.0] * NQ
    assert got.tolist() == pytest.approx(want)


@settings(max_examples=40, deadline=None)
@given(r=st.integers(1, 5), s=st.integers(1, 5), sh=st.integers(1, 3), sw=st.integers(1, 3), dh=st.integers(1, 3),
       dw=st.integers(1, 3), q=st.integers(1, 40), reverse=st.booleans(), c=st.sampled_from([8, 24, 64, 96]))
def test_issue_corrections_take_each_positions_row_shift(r, s, sh, sw, dh, dw, q, reverse, c):
    # position t re-reads what t - 1 read shifted by dm = ((r_t - r_t-1) dh / sh) Q + (s_t - s_t-1) dw / sw
    # rows, where both divide; the table holds that shift's quantiles, zeros elsewhere
    win = Window(1, c, 50, 50, r, s, sh, sw, 0, 0, dh, dw, 10, q, reverse)
    got = issue_corrections(win, 64, 8, 256, 1, 4, 128, 4)
    pos = row_positions(64, 8, 256, 1)
    shared = sw * c * 4 < 128                    # rows that share lines: counted line by line
    if not shared:
        # pixels of a line or more: a request's rows in address order, i.e. by row
        order = sorted(range(64), key=lambda m: (pos[m], m))
        pos = np.array([order.index(m) for m in range(64)])
    cls = (np.arange(64) * sw * c * 4 // 128) % 4
    taps = [(t // s, t % s) for t in range(r * s)]
    if reverse:
        taps = taps[::-1]
    for t in range(1, r * s):
        (r1, s1), (r0, s0) = taps[t], taps[t - 1]
        if ((r1 - r0) * dh) % sh or ((s1 - s0) * dw) % sw:
            assert got[t].tolist() == [0.0] * NQ
        else:
            dm = (r1 - r0) * dh // sh * q + (s1 - s0) * dw // sw
            ncls = float(len(set(cls.tolist())))
            if shared:
                offs = np.arange(0, c * 4, 32)
                want = line_corrections(dm, pos, sw * c * 4, 128, 4, ncls, NQ, offs, np.minimum(32, c * 4 - offs))
            else:
                want = _shift_corrections(dm, pos, sw * c * 4, 128, 4, ncls, NQ)
            assert got[t].tolist() == want.tolist()


@settings(max_examples=80, deadline=None)
@given(tm=st.sampled_from([16, 32, 64, 128]), tk=st.sampled_from([8, 16, 32]), vector=st.sampled_from([1, 2, 4]),
       threads=st.sampled_from([64, 128, 256]), eb=st.sampled_from([2, 4]), c=st.integers(1, 63),
       sw=st.integers(1, 3), sets=st.sampled_from([1, 2, 4]), data=st.data())
def test_line_corrections_count_the_window_line_by_line(tm, tk, vector, threads, eb, c, sw, sets, data):
    pitch = sw * c * eb
    if not _thread_map(tm, tk, vector, threads) or pitch >= 128:
        return
    dm = data.draw(st.integers(-tm, tm))
    pos = row_positions(tm, tk, threads, vector)
    piece = min(tk, c) * eb
    offs = np.arange(0, c * eb, piece)
    ncls = float(len(set(((np.arange(tm) * pitch // 128) % sets).tolist())))
    got = line_corrections(dm, pos, pitch, 128, sets, ncls, NQ, offs, np.minimum(piece, c * eb - offs))
    values = naive.line_window_corrections(dm, pos.tolist(), pitch, sets, c * eb, piece)
    want = naive.quantiles(values, NQ) if values and dm else [0.0] * NQ
    assert got.tolist() == pytest.approx(want)


def test_line_corrections_hand_case():
    """Seed 67 #69's sub-problems (64-byte dy pixels, 256 rows, two warps of one row a request, 4 sets): warp 0
    reads each line's first pixel, warp 1 its second. One filter row on (dm = -105 or -106 rows) the line's last
    touch at t - 1 is warp 1's and its first at t warp 0's: every re-read meets the rest of warp 1's lines, the
    new rows' 53 and the lines warp 0 re-reads before it, 180 of a class's lines (x 4 classes x 2 rows a line:
    +104 rows and more over a k-step's 128). Counted by reads, the rows gave +52 for -106 and -76 for half the
    rows of -105. One tap on (dm = -1): a whole k-step, not half of one."""
    pos = row_positions(256, 32, 64, 1)
    one = (np.zeros(1, np.int64), np.full(1, 64, np.int64))
    for dm in (-105, -106):
        got = line_corrections(dm, pos, 64, 128, 4, 4.0, NQ, *one)
        assert got.min() >= 104.0
        assert _shift_corrections(dm, pos, 64, 128, 4, 4.0, NQ).min() <= 52.0
    assert line_corrections(-1, pos, 64, 128, 4, 4.0, NQ, *one).tolist() == [0.0, 0.0, 0.0, 8.0]
    assert _shift_corrections(-1, pos, 64, 128, 4, 4.0, NQ)[0] == -128.0


def test_a_filter_row_on_every_reread_misses_against_the_simulation():
    """Seed 67 #69 on 2 images (7x7 stride 2, C 6, K 32 fp16, 256x64x32 tiles of 64 threads, one CTA an SM on
    a p100 with 3x its L2: 4 sets of 48 ways): each sub-problem's 82 tiles fill the 56 SMs, so its reuses one tap
    back are judged on the counted window (`model.subproblem_fills_wave`). At the step to the next filter row
    the simulator misses every re-read; counted by reads the window was 151 lines for the 3-wide sub-problems
    (a hit): L2 reads -25.4 %, A hits +12.2 %. Line by line: +0.2 %, -0.2 %."""
    gpu = scale_gpu(simcore.gpu("p100"), {"l2_bytes": 3.0})
    layer = ConvLayer(n=2, c=6, h=193, w=216, k=32, r=7, s=7, stride=(2, 2), pad=(3, 3), name="stem_67_69")
    kernel = KernelConfig(tile_m=256, tile_n=64, tile_k=32, threads=64, vector=1, dtype="fp16", op="dgrad")
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert pred[Mx.L2_RD_SECTORS] == pytest.approx(sim[Mx.L2_RD_SECTORS], rel=0.03)
    assert pred[Mx.L1_LD_HITS + ":A"] == pytest.approx(sim[Mx.L1_LD_HITS + ":A"], rel=0.02)


def test_request_order_by_hand():
    # rows 0, 1 and 4 in request 0, rows 2, 3 in request 1: by request, then by row within it
    assert request_order(np.array([0, 0, 1, 1, 0])).tolist() == [0, 1, 3, 4, 2]


def test_a_requests_own_rows_are_in_the_window_against_the_simulation():
    # dense dgrad 5x5, dy of 256 fp32 channels (1 KB pixels: a k-step's 256 rows all in one of the 4 L1
    # sets of 256 ways), one 256-row CTA an SM, 16 rows a request: a pixel's re-read one tap later meets
    # the set's lines of the requests between and the request's own rows on either side, 254-257 lines;
    # without them 240 (A hits 84 % predicted, 45 % simulated)
    gpu = scale_gpu(simcore.gpu("v100"), {"sms": 1.5, "l1_smem_bytes": 1.5})
    layer = ConvLayer(n=2, c=64, h=29, w=53, k=256, r=5, s=5, stride=(1, 1), pad=(2, 2), name="d")
    kernel = KernelConfig(tile_m=256, tile_n=256, tile_k=16, threads=256, vector=4, op="dgrad")
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    hits, total = (sim[k + ":A"] for k in (Mx.L1_LD_HITS, Mx.L1_LD_SECTORS))
    assert abs(analytic.predict_layer(layer, gpu, kernel)[Mx.L1_LD_HITS + ":A"] - hits) / total < 0.15


def test_shift_corrections_hand_case():
    # two warps of one row a request (T_c = 32): warp 0 reads the even rows, warp 1 the odd ones; pixels two
    # lines wide, so a row's set class is its parity. A pixel read one filter row back by the row 25 on:
    # between the two reads, the class's rows after m + 25 and before m, 63 - 12 = 51 of its 64 (not 63)
    pos = row_positions(128, 32, 64, 1)
    got = _shift_corrections(25, pos, 256, 128, 4, 2.0, NQ)
    assert set(got.tolist()) <= {-26.0, -24.0}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), h=st.integers(3, 24), w=st.integers(3, 24), r=st.integers(1, 5), s=st.integers(1, 5),
       sh=st.integers(1, 2), sw=st.integers(1, 2), dh=st.integers(1, 2), dw=st.integers(1, 2), ph=st.integers(0, 3),
       pw=st.integers(0, 3), tm=st.sampled_from([8, 16, 32, 64]), reverse=st.booleans())
def test_tile_valid_rows_count_each_row(n, h, w, r, s, sh, sw, dh, dw, ph, pw, tm, reverse):
    p = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    q = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
    if p < 1 or q < 1:
        return
    win = Window(n, 4, h, w, r, s, sh, sw, ph, pw, dh, dw, p, q, reverse)
    got = tile_valid_rows(win, tm)
    want = naive.tile_valid_rows(win, tm, _VALID_SAMPLES, NV)
    for t, row in enumerate(want):
        assert got[t].tolist() == pytest.approx(row if row is not None else [-1.0] * NV)


@settings(max_examples=25, deadline=None)
@given(c=st.integers(1, 96), k=st.integers(1, 96), r=st.integers(1, 3), tn=st.sampled_from([32, 64]),
       tk=st.sampled_from([8, 16]), eb=st.sampled_from([2, 4]))
def test_dgrad_filter_lines_in_the_reused_set(c, k, r, tn, tk, eb):
    # dgrad's A is dy (K channels a pixel), its B rows the block's filters k, each a column's T_n channels
    layer = ConvLayer(n=1, c=c, h=6, w=6, k=k, r=r, s=r, pad=r // 2, name="d")
    kernel = KernelConfig(tile_m=32, tile_n=tn, tile_k=tk, threads=64, op="dgrad",
                          dtype="fp16" if eb == 2 else "fp32")
    geo = geometry(layer, kernel)
    got = b_lines_in_a_set("dgrad", geo.win, geo.gemm_n, geo.row_b, geo.pos_b, tn, tk, eb, 128, 4)
    RS, unit, nblk, tiles_n = r * r, k * eb, -(-k // tk), -(-c // tn)
    pick = lambda total, i, most: (i * (total - 1)) // max(1, most - 1) if most > 1 else 0   # noqa: E731
    period = min(4 * 128 // np.gcd(unit, 4 * 128), 64)
    for cols in range(1, min(tiles_n, NB_COLS) + 1):
        ratios = []
        for ib in range(min(nblk, _OVERLAP_SAMPLES)):
            block = pick(nblk, ib, min(nblk, _OVERLAP_SAMPLES))
            a_sets = [((x * unit + block * tk * eb) // 128) % 4 for x in range(period)]
            for it in range(min(RS, _OVERLAP_SAMPLES)):
                tap = pick(RS, it, min(RS, _OVERLAP_SAMPLES))
                ncs = min(tiles_n - cols + 1, _OVERLAP_SAMPLES)
                for ic in range(ncs):
                    col0 = (ic * (tiles_n - cols)) // max(1, ncs - 1) if ncs > 1 else 0
                    lines = naive.dgrad_filter_lines(k, c, RS, geo.row_b, geo.pos_b, tn, tk, eb, 128, block, tap,
                                                     range(col0, col0 + cols))
                    per_set = [sum(1 for ln in lines if ln % 4 == x) for x in range(4)]
                    mean = len(lines) / max(sum(1 for v in per_set if v), len(set(a_sets)))
                    ratios += [per_set[a] / mean for a in a_sets]
        assert got[cols - 1].tolist() == pytest.approx(naive.quantiles(ratios, NB))


def _a_hits(layer, gpu, kernel):
    key = Mx.L1_LD_HITS + ":A"
    sim = traces.simulate_layer(layer, gpu, kernel)[key]
    return sim, analytic.predict_layer(layer, gpu, kernel)[key]


def test_one_filter_row_back_is_a_shorter_window_against_simulation():
    # seed 1 #65's layer on two images: 5x5 on 29-wide images, 128-row tiles, two warps of one row a request.
    # A pixel one filter row down is re-read by the row 25 on, so 51 of a set's 64 A lines lie between, and
    # with its 16 filter lines the window fits 64 ways; at the edge taps a tile's padding rows shrink it more.
    # Judged on one whole k-step, none of these reuses hit (predicted A hits 2 %, simulated 15 %)
    layer = ConvLayer(n=2, c=64, h=29, w=29, k=32, r=5, s=5, pad=2, name="c")
    kernel = KernelConfig(tile_m=128, tile_n=256, tile_k=32, threads=64, swizzle_log=3)
    sim, pred = _a_hits(layer, simcore.gpu("v100"), kernel)
    assert sim > 0.1 * traces.simulate_layer(layer, simcore.gpu("v100"), kernel)[Mx.L1_LD_SECTORS + ":A"]
    assert pred == pytest.approx(sim, rel=0.15)


def test_dgrad_filter_lines_reach_the_reused_set_in_half_the_rounds_against_simulation():
    # seed 1 #58's kernel (dgrad 256 x 64 x 16 fp32, one CTA an SM) on two 56 x 56 dy of 512 channels: a
    # round's A lines fill one set nearly to its 256 ways; its 16 filters' 32 lines sit in two sets that hold
    # the reused line in half the rounds. With them in every round (the mean over the sets they reach), on the
    # fitted ramp, the reuses one position back mostly miss (predicted A hits 40 % below the simulated)
    layer = ConvLayer(n=2, c=768, h=56, w=56, k=512, r=3, s=3, pad=1, name="d")
    kernel = KernelConfig(tile_m=256, tile_n=64, tile_k=16, threads=256, vector=4, op="dgrad", ctas_per_sm=1)
    gpu = simcore.scale_gpu(simcore.gpu("a100"), {"l2_bytes": 0.75})
    sim, pred = _a_hits(layer, gpu, kernel)
    assert pred == pytest.approx(sim, rel=0.15)


def test_tensor_op_one_position_back_against_simulation():
    # seed 2 #75's kernel (tensor-op 256 x 64 x 32 bf16, one CTA an SM on an h100 with half its L1: 56 ways)
    # on a 1 x 7 layer of 192 channels: a k-step's rows put 64 lines in each set, so a pixel the next tap
    # re-reads one row earlier mostly misses (15 % hits simulated); the fitted ramp over the averaged window
    # gave 27 %, the counted window 19 %
    layer = ConvLayer(n=4, c=192, h=22, w=22, k=192, r=1, s=7, pad=(0, 3), name="t")
    kernel = KernelConfig(tile_m=256, tile_n=64, tile_k=32, threads=256, dtype="bf16", vector=8, stages=4,
                          swizzle_log=3, math="tensorop")
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l1_smem_bytes": 0.5})
    key = Mx.KIND_KEYS[Mx.KIND_CP_ASYNC_CA]
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    hits = [k for k in key if "hit" in k][0] + ":A"
    sectors = [k for k in key if k.endswith("cache_access.sum") and "sectors" in k][0] + ":A"
    assert sim[hits] < 0.2 * sim[sectors]
    assert pred[hits] == pytest.approx(sim[hits], abs=0.05 * sim[sectors])



def test_a_rows_class_moves_with_its_pixel_against_simulation():
    # seed 67 #48's layer and kernel: fp16 C 96, 192-byte pixels (1.5 lines), 5x5, 128-row tiles of two warps of
    # two rows a request, on an h100 with half its L1 (4 sets of 56 ways). Row m re-reads at the next tap what
    # row m + 1 read: the same line, so its set is row m + 1's. Taken as row m's own, a quarter of the rows
    # counted half a k-step more between (A hits 70 % predicted, 89 % simulated)
    layer = ConvLayer(n=1, c=96, h=53, w=45, k=48, r=5, s=5, pad=2, name="p")
    kernel = KernelConfig(tile_m=128, tile_n=128, tile_k=16, threads=64, dtype="fp16", swizzle_log=3)
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l2_bytes": 4.0, "l1_smem_bytes": 0.5})
    sim, pred = _a_hits(layer, gpu, kernel)
    assert sim > 0.85 * traces.simulate_layer(layer, gpu, kernel)[Mx.L1_LD_SECTORS + ":A"]
    assert pred == pytest.approx(sim, rel=0.03)
