"""The L2 cliff of A's re-fetch windows counted over the window's own lines (`analytic._refetch_window`;
MODEL.md section 9): the set function, each tile's A lines and the table against slow references (a pure
Python walk of the grid's CTAs through dict-counted sets, fprop and unit-stride dgrad), and the model's A DRAM
reads against simulation where the stores of tile columns crowd some sets below the GPU's cliff (nchw fprop,
nhwc dgrad)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import analytic.model as model
import simcore
import traces
from analytic._l2 import PATTERN_X, _set_ids, l2_miss_prob
from analytic._memo import clear_memo
import dataclasses

from analytic._refetch_window import PLACES, _a_tile_lines, _all_sets, refetch_window_table
from analytic._schedule import tile_of

DRAM_A = "dram__sectors_read.sum:A"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([1, 2, 5, 8, 32, 80, 160]), st.sampled_from([1, 2, 12, 16, 64, 128]), st.booleans(),
       st.integers(1, 5000))
def test_set_ids_are_the_l2_set_function(slices, sets, xor, total):
    index = "xor" if xor else "linear"
    if xor and sets & (sets - 1):
        return                                        # the xor index needs a power-of-two set count
    want = _set_ids(np.arange(total, dtype=np.int64), slices, sets, index)
    np.testing.assert_array_equal(_all_sets(total, slices, sets, xor), want)


def _tile_lines_reference(shape, tm, eb, line, x_base, nhwc):
    """Each tile_m's distinct A lines: every row, tap and channel of the tile, one element at a time."""
    N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw = shape
    M = N * P * Q
    out = []
    for t in range(-(-M // tm)):
        lines = set()
        for m in range(t * tm, min(M, (t + 1) * tm)):
            n, p, q = m // (P * Q), (m % (P * Q)) // Q, m % Q
            for r in range(R):
                for s in range(S):
                    h, w = p * sh - ph + r * dh, q * sw - pw + s * dw
                    if 0 <= h < H and 0 <= w < W:
                        for c in range(C):
                            elem = ((n * H + h) * W + w) * C + c if nhwc else ((n * C + c) * H + h) * W + w
                            lines.add((x_base + elem * eb) // line)
        out.append(lines)
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(1, 6), st.integers(3, 9), st.integers(3, 9), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 2), st.integers(0, 2), st.integers(1, 2), st.sampled_from([4, 8, 16, 32]),
       st.sampled_from([2, 4]), st.sampled_from([32, 128]), st.booleans(), st.sampled_from([0, 256]))
def test_each_tiles_a_lines_against_an_element_walk(n, c, h, w, r, s, stride, pad, dil, tm, eb, line, nhwc, x_base):
    p = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
    q = (w + 2 * pad - dil * (s - 1) - 1) // stride + 1
    if p < 1 or q < 1:
        return
    shape = (n, c, h, w, p, q, r, s, stride, stride, pad, pad, dil, dil)
    tiles_m = -(-(n * p * q) // tm)
    ptr, lines = _a_tile_lines(np.array(shape, np.int64), tm, tiles_m, eb, line, x_base, nhwc, 1 << 40)
    want = _tile_lines_reference(shape, tm, eb, line, x_base, nhwc)
    assert [set(lines[ptr[t]:ptr[t + 1]].tolist()) for t in range(tiles_m)] == want
    assert all(len(set(lines[ptr[t]:ptr[t + 1]].tolist())) == ptr[t + 1] - ptr[t] for t in range(tiles_m))


def _dgrad_tile_lines(layer, tm, eb, line, y_base):
    """Each dgrad tile_m's distinct dy lines: every dx row, tap and output channel (DESIGN section 3a)."""
    N, H, W, K, P, Q = layer.n, layer.h, layer.w, layer.k, layer.p, layer.q
    (ph, pw), (dh, dw) = layer.pad, layer.dilation
    M = N * H * W
    out = []
    for t in range(-(-M // tm)):
        lines = set()
        for m in range(t * tm, min(M, (t + 1) * tm)):
            n, h, w = m // (H * W), (m % (H * W)) // W, m % W
            for r in range(layer.r):
                for s in range(layer.s):
                    p, q = h + ph - r * dh, w + pw - s * dw
                    if 0 <= p < P and 0 <= q < Q:
                        for k in range(K):
                            lines.add((y_base + (((n * P + p) * Q + q) * K + k) * eb) // line)
        out.append(lines)
    return out


def _table_reference(layer, kernel, gpu, tiles_m, tiles_n, swz, starts):
    """The table by a dict walk: from each start, CTA after CTA in block order, each CTA's A lines (its tile's),
    filter slice and stores as sets of lines, element by element; at each window size, the share of the
    window's A lines whose set holds more than the ways of the window's lines."""
    eb, line = kernel.elem_bytes, gpu.line_bytes
    x_base, w_base, y_base = traces.tensor_bases(layer, kernel)
    nhwc, fprop = kernel.layout == "nhwc", kernel.op == "fprop"
    N, C, K, R, S = layer.n, layer.c, layer.k, layer.r, layer.s
    if fprop:
        shape = (N, C, layer.h, layer.w, layer.p, layer.q, R, S, *layer.stride, *layer.pad, *layer.dilation)
        a_tiles = _tile_lines_reference(shape, kernel.tile_m, eb, line, x_base, nhwc)
        M, NOUT, PQ, out_base = N * layer.p * layer.q, K, layer.p * layer.q, y_base
    else:
        a_tiles = _dgrad_tile_lines(layer, kernel.tile_m, eb, line, y_base)
        M, NOUT, PQ, out_base = N * layer.h * layer.w, C, layer.h * layer.w, x_base
    cap = gpu.l2_slices * gpu.l2_sets_per_slice * gpu.l2_ways
    sums, reached = np.zeros(len(PATTERN_X)), np.zeros(len(PATTERN_X))
    for v0 in starts:
        seen, a_seen, per_set = set(), set(), {}
        j = 1
        for v in range(v0, tiles_m * tiles_n):
            t, n = (int(x) for x in tile_of(v, tiles_m, tiles_n, swz))
            cols = range(n * kernel.tile_n, min(NOUT, (n + 1) * kernel.tile_n))
            if fprop:            # filters k of R S C elements each
                b = {(w_base + (k * R * S * C + i) * eb) // line for k in cols for i in range(R * S * C)}
            else:                # channels c of every (k, r, s)
                b = {(w_base + (krs * C + c) * eb) // line for krs in range(K * R * S) for c in cols}
            stores = set()
            for m in range(t * kernel.tile_m, min(M, (t + 1) * kernel.tile_m)):
                for k in cols:
                    elem = m * NOUT + k if nhwc else ((m // PQ) * NOUT + k) * PQ + m % PQ
                    stores.add((out_base + elem * eb) // line)
            for ln, is_a in [(x, True) for x in sorted(a_tiles[t])] + [(x, False) for x in sorted(b | stores)]:
                if ln in seen:
                    continue
                seen.add(ln)
                sid = int(_set_ids(np.array([ln], np.int64), gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_index)[0])
                per_set.setdefault(sid, []).append(ln)
                if is_a:
                    a_seen.add(ln)
            while j < len(PATTERN_X) and len(seen) >= PATTERN_X[j] * cap:
                sid_of = {x: s for s, xs in per_set.items() for x in xs}
                over = sum(1 for x in a_seen if len(per_set[sid_of[x]]) > gpu.l2_ways)
                sums[j] += over / max(len(a_seen), 1)
                reached[j] += 1
                j += 1
            if j == len(PATTERN_X):
                break
    return sums, reached


# a small L2: 2 slices x 8 sets x 4 ways = 64 lines, against layers of a few hundred lines
SMALL_L2 = dataclasses.replace(simcore.gpu("p100"), l2_bytes=2 * 8 * 4 * 128, l2_slices=2, l2_ways=4)


@pytest.mark.parametrize("op, layout, pad", [("fprop", "nhwc", 1), ("fprop", "nchw", 1), ("dgrad", "nhwc", 1),
                                             ("dgrad", "nhwc", 0)])
def test_table_against_a_dict_walk_of_the_grid(op, layout, pad):
    layer = traces.ConvLayer(2, 8, 6, 6, 48, 3, 3, stride=1, pad=pad)
    kernel = traces.KernelConfig(tile_m=16, tile_n=16 if op == "fprop" else 4, tile_k=8,
                                 threads=64 if op == "fprop" else 32, layout=layout, dtype="fp32", op=op)
    rows, cols = (layer.n * layer.p * layer.q, layer.k) if op == "fprop" else (layer.n * layer.h * layer.w, layer.c)
    tiles_m, tiles_n = -(-rows // 16), -(-cols // kernel.tile_n)
    assert SMALL_L2.l2_sets_per_slice == 8
    got = refetch_window_table(layer, kernel, SMALL_L2, 1.0, tiles_m, tiles_n, 0, 4, (0.4, 0.0))
    span = max(1, tiles_m * tiles_n - 4)
    starts = sorted(set(int((k + 0.5) * span / PLACES) for k in range(PLACES)))
    sums, reached = _table_reference(layer, kernel, SMALL_L2, tiles_m, tiles_n, 0, starts)
    assert reached[1:].min() > 0                      # every window size reached: the counts alone decide
    np.testing.assert_allclose(got[1:], sums[1:] / reached[1:], atol=1e-12)
    assert 0.0 <= got.min() and got.max() <= 1.0
    if op == "fprop":
        assert got[-1] > 0.5 and got[len(got) // 4] < got[-1]


def test_windows_past_the_grid_take_the_cliff():
    # a grid of one CTA never holds 1.5 L2s of lines: those sizes take the GPU's cliff, at least the last count
    layer = traces.ConvLayer(1, 4, 4, 4, 8, 1, 1)
    kernel = traces.KernelConfig(tile_m=16, tile_n=8, tile_k=8, threads=64, dtype="fp32")
    got = refetch_window_table(layer, kernel, SMALL_L2, 1.0, 1, 1, 0, 1, (0.4, 0.0))
    assert got is not None
    assert got[-1] == pytest.approx(max(got[-2], l2_miss_prob(PATTERN_X[-1], 4.0, (0.4, 0.0))))


def _errors_counted_and_on_the_cliff(layer, gpu, kernel):
    """A's DRAM reads predicted with the window table and with the GPU's cliff (the table off), each as its
    relative error against the simulation."""
    f = analytic.ReuseFactors.load("validation/data/factors.json")
    sim = traces.simulate_layer(layer, gpu, kernel)[DRAM_A]
    clear_memo()
    counted = analytic.predict_layer(layer, gpu, kernel, f)[DRAM_A]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "refetch_window_table", lambda *a: None)
        clear_memo()
        on_the_cliff = analytic.predict_layer(layer, gpu, kernel, f)[DRAM_A]
    clear_memo()
    return (counted - sim) / sim, (on_the_cliff - sim) / sim


def test_dram_reads_where_nchw_stores_crowd_some_sets():
    """Seed 148 #87's layer at batch 4 on a p100 with a quarter of its L2: dilated 3x3, nchw fp16, 8 tile
    columns of 32 planes. A column's stores are 32 planes of every 256, and their lines pile into some
    sets: the later columns' re-reads of A miss there below the GPU's cliff (counted: -2.8 % of the simulated
    A DRAM reads; the cliff, which spreads the window like one contiguous run, -24.6 %)."""
    layer = traces.ConvLayer(4, 48, 32, 32, 256, 3, 3, stride=1, pad=3, dilation=3)
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 0.25})
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=32, threads=256, layout="nchw", dtype="fp16")
    counted, on_the_cliff = _errors_counted_and_on_the_cliff(layer, gpu, kernel)
    assert abs(counted) < 0.08
    assert on_the_cliff < -0.15


def test_dram_reads_where_dgrad_stores_crowd_some_sets():
    """Seed 52 #48's layer (dgrad 1x7, C 384 fp32, 32x32 tiles, 12 columns) at batch 3 on a p100 with 0.375 of
    its L2: each column stores 128 bytes of every 1,536-byte dx pixel, and a later wave's re-reads of dy meet
    those lines piled into some sets (counted: +4.1 % of the simulated A DRAM reads; the GPU's cliff -39.2 %)."""
    layer = traces.ConvLayer(3, 384, 24, 24, 128, 1, 7, stride=1, pad=(0, 3))
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 0.375})
    kernel = traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, vector=4, op="dgrad", dtype="fp32",
                                 ctas_per_sm=1)
    counted, on_the_cliff = _errors_counted_and_on_the_cliff(layer, gpu, kernel)
    assert abs(counted) < 0.10
    assert on_the_cliff < -0.25
