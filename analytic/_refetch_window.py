"""The L2 cliff of a later wave's re-read window, counted over the window's own lines (MODEL.md section 3).

A re-fetch of A by a later wave (`model._tile_refetches`) misses where the lines touched since its last
read fill its set. `_l2.l2_miss_prob` judges that on the GPU's cliff: the window's lines spread over the
sets as one contiguous run does (a power-of-two slice count: evenly). A real window holds the tiles' A
lines, their filter slices and their stores, each an address pattern of its own: nchw stores of a tile
column are ``tile_n`` planes of each image, nhwc stores ``tile_n`` channels of every pixel. Such lines pile
into some sets, and an A line in such a set misses long before the window fills the L2 (p100, 0.72 L2s:
13 % of A's lines in overfull sets, the cliff 0.1 %).

Here the window is walked as the grid runs it: from a CTA on, CTA after CTA in block order
(`_schedule.tile_of`), each CTA's A lines (its tile_m's input pixels through the filter, every channel;
unit-stride dgrad: its dx rows' dy pixels through the flipped filter, every output channel), its filter
slice and its stores, at the tensors' places (`traces.stream.tensor_bases`), each line through
the GPU's slice and set functions. At each window size of `_l2.PATTERN_X` the share of the window's A
lines whose set holds more than ``ways`` lines is the chance that a re-read of that window misses, averaged
over `PLACES` starts spread over the grid (a window's tail swings with where it starts: seed 148 #87, 4
starts at wave boundaries gave 0 or 14 % at 0.75 L2s).
"""
from __future__ import annotations

import functools

import numpy as np

from traces.stream import tensor_bases
from simcore._jit import njit
from . import _l2, _schedule

#: window starts spread evenly over the grid's blocks (148 #87 DRAM +0.6 % with 16; cached cases: 8 starts moved
#: 89 and bettered 49, 16 moved 78 and bettered 48 at a lower mean error, 32 the same means as 16)
PLACES = 16
#: the most A lines (summed over the tiles) and window line visits a table may cost; beyond, the cliff
MAX_TILE_LINES = 4_000_000
MAX_VISITS = 30_000_000
#: the most lines the three tensors may span (the walk keeps a set id and a stamp per line)
MAX_LINES = 8_000_000


@njit(cache=True)
def _all_sets(total, slices, sets, xor):
    """slice x sets + set of lines 0 .. total - 1: `_l2._set_ids` (the walk looks each line up many times)."""
    bits = 0
    while (1 << (bits + 1)) <= sets:
        bits += 1
    pow2 = sets & (sets - 1) == 0
    out = np.empty(total, np.int32)
    for ln in range(total):
        q = ln // slices
        if xor:
            sl = (ln ^ (ln >> 7) ^ (ln >> 14)) % slices
            st = (q ^ (q >> bits) ^ (q >> (2 * bits))) & (sets - 1)
        elif pow2:
            sl, st = ln % slices, q & (sets - 1)
        else:
            sl, st = ln % slices, q % sets
        out[ln] = sl * sets + st
    return out


@njit(cache=True)
def _a_tile_lines(shape, tm, tiles_m, eb, line, x_base, nhwc, limit):
    """(ptr, lines): each tile_m's distinct A lines (its rows' input pixels through the filter, every channel;
    dgrad passes dy as the input and the flipped filter's padding), tile t's at lines[ptr[t]:ptr[t + 1]]; empty
    arrays past ``limit`` lines in all."""
    N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw = shape
    HW, PQ, M = H * W, P * Q, N * P * Q
    pix_stamp = np.zeros(N * HW, np.int64)
    line_stamp = np.zeros((x_base + N * C * HW * eb) // line + 2, np.int64)
    pix = np.empty(min(N * HW, tm * R * S), np.int64)
    ptr = np.zeros(tiles_m + 1, np.int64)
    out = np.empty(1 << 16, np.int64)
    count = 0
    for t in range(tiles_m):
        # the tile's input pixels, as `_compulsory.tile_sectors` walks them; not shared: this module's kernels
        # call no other kernel, so that `_COMPILED` runs them compiled in the interpreted tier
        npix = 0
        for m in range(t * tm, min(M, (t + 1) * tm)):
            n = m // PQ
            p = (m % PQ) // Q
            q = m % Q
            for r in range(R):
                h = p * sh - ph + r * dh
                if h < 0 or h >= H:
                    continue
                for s in range(S):
                    w = q * sw - pw + s * dw
                    if w < 0 or w >= W:
                        continue
                    idx = n * HW + h * W + w
                    if pix_stamp[idx] != t + 1:
                        pix_stamp[idx] = t + 1
                        pix[npix] = idx
                        npix += 1
        for c in range(1 if nhwc else C):
            for i in range(npix):
                idx = pix[i]
                if nhwc:
                    lo = (x_base + idx * C * eb) // line
                    hi = (x_base + (idx + 1) * C * eb - 1) // line
                else:
                    lo = (x_base + ((idx // HW * C + c) * HW + idx % HW) * eb) // line
                    hi = lo
                for ln in range(lo, hi + 1):
                    if line_stamp[ln] != t + 1:
                        line_stamp[ln] = t + 1
                        if count == out.shape[0]:
                            grown = np.empty(2 * count, np.int64)
                            grown[:count] = out
                            out = grown
                        out[count] = ln
                        count += 1
            if count > limit:
                return np.zeros(0, np.int64), np.zeros(0, np.int64)
        ptr[t + 1] = count
    return ptr, out[:count]


@njit(cache=True)
def _walk(starts, cm, cn, a_ptr, a_lines, set_ids, b_spec, c_spec, nsets, ways, cap, xs, max_visits):
    """Sum over ``starts`` of the share of A lines in overfull sets at each window size ``xs`` (in ``cap``
    lines), and the starts that reached it; False past ``max_visits`` lines. ``b_spec``: (w base, rows, row
    pitch, bytes a unit, units a row): column n's filter slice is units n tile_n .. (n + 1) tile_n of every row
    (fprop: one row of K filters; dgrad: K R S rows of C channels); ``c_spec``: (output base, GEMM-N, output
    pixels an image, tile_m, tile_n, M, nhwc, eb, line). Self-contained (no other kernel called): `_table`
    calls it compiled in either tier of `analytic._tiers`."""
    nx = xs.shape[0]
    acc = np.zeros(nx, np.float64)
    reached = np.zeros(nx, np.float64)
    stamp = np.zeros(set_ids.shape[0], np.int32)
    tot = np.zeros(nsets, np.int64)
    acount = np.zeros(nsets, np.int64)
    w_base, b_rows, b_pitch, b_unit, b_units = b_spec
    y_base, K, PQ, tm, tn, M, nhwc, eb, line = c_spec
    tile_seen = np.zeros(a_ptr.shape[0], np.int64)
    col_seen = np.zeros(K // tn + 2, np.int64)
    ranges = np.empty((b_rows + tm * tn + 2, 2), np.int64)  # a CTA's filter and store lines, (first, last) runs
    visits = 0
    ctas = cm.shape[0]
    for k in range(starts.shape[0]):
        mark = k + 1
        tot[:] = 0
        acount[:] = 0
        distinct = n_a = over_a = 0
        j = 1
        v = starts[k]
        while v < ctas and j < nx:
            t, n = cm[v], cn[v]
            if tile_seen[t] != mark:                  # a tile's A lines are in the window from its first CTA on
                tile_seen[t] = mark
                for i in range(a_ptr[t], a_ptr[t + 1]):
                    ln = a_lines[i]
                    if stamp[ln] == mark:
                        continue
                    stamp[ln] = mark
                    s = set_ids[ln]
                    tot[s] += 1
                    acount[s] += 1
                    distinct += 1
                    n_a += 1
                    if tot[s] > ways + 1:             # a line misses where its set holds more than the ways
                        over_a += 1
                    elif tot[s] == ways + 1:
                        over_a += acount[s]
                visits += a_ptr[t + 1] - a_ptr[t]
            nr = 0
            if col_seen[n] != mark:                   # the column's filter slice, once a window
                col_seen[n] = mark
                u0, u1 = n * tn, min(b_units, (n + 1) * tn)
                for i in range(b_rows):
                    ranges[nr, 0] = (w_base + i * b_pitch + u0 * b_unit) // line
                    ranges[nr, 1] = (w_base + i * b_pitch + u1 * b_unit - 1) // line
                    nr += 1
            m0, m1 = t * tm, min(M, (t + 1) * tm)
            c0, c1 = n * tn, min(K, (n + 1) * tn)
            if nhwc:                                  # the CTA's stores: its rows' tile_n channels
                for m in range(m0, m1):
                    ranges[nr, 0] = (y_base + (m * K + c0) * eb) // line
                    ranges[nr, 1] = (y_base + (m * K + c1) * eb - 1) // line
                    nr += 1
            else:                                     # its tile_n planes' runs of rows, image by image
                for c in range(c0, c1):
                    m = m0
                    while m < m1:
                        img = m // PQ
                        end = min(m1, (img + 1) * PQ)
                        base = y_base + (img * K + c) * PQ * eb
                        ranges[nr, 0] = (base + (m - img * PQ) * eb) // line
                        ranges[nr, 1] = (base + (end - img * PQ) * eb - 1) // line
                        nr += 1
                        m = end
            for r in range(nr):
                for ln in range(ranges[r, 0], ranges[r, 1] + 1):
                    if stamp[ln] == mark:
                        continue
                    stamp[ln] = mark
                    s = set_ids[ln]
                    tot[s] += 1
                    distinct += 1
                    if tot[s] == ways + 1:
                        over_a += acount[s]
                visits += ranges[r, 1] - ranges[r, 0] + 1
            while j < nx and distinct >= xs[j] * cap:
                acc[j] += over_a / max(n_a, 1)
                reached[j] += 1.0
                j += 1
            v += 1
        if visits > max_visits:
            return acc, reached, False
    return acc, reached, True


@njit(cache=True)
def near_cliff(hist, f1, fnew, cap_lines):
    """Whether some later wave re-reads A (``hist``: re-reads per gap in waves) across a window of 0.3 to 1.6
    L2s, f1 + (g - 1) fnew lines (the table matters; elsewhere every re-read hits or misses on either count).
    Compiled: a Python loop over the 64 gaps took 5-10 % of an fprop prediction."""
    for g in range(1, hist.shape[0]):
        if hist[g] > 0.0 and 0.3 <= (f1 + (g - 1) * fnew) / cap_lines <= 1.6:
            return True
    return False


# the compiled kernels, bound here too: `analytic._tiers` swaps module attributes for their Python functions
# in the interpreted tier, and a table walked in Python would take minutes (1.5 L2s of lines, 16 times)
_COMPILED = {"tiles": _a_tile_lines, "sets": _all_sets, "walk": _walk}


def refetch_window_table(layer, kernel, gpu, capacity, tiles_m, tiles_n, swz, per_wave, cliff):
    """`l2_miss_window`'s table of A's re-fetch windows (module docstring) of fprop, or of unit-stride dgrad
    (A = dy read through the flipped filter, B = w by columns of C, stores dx): P(miss) at each
    `_l2.PATTERN_X`; None where the window's work passes `MAX_TILE_LINES` or `MAX_VISITS` (the GPU's cliff
    then). Kept per layer shape, kernel, GPU and grid (`_KEPT`: building `_table`'s key took 10-20 us a
    prediction, the dict lookup about 1 us)."""
    key = (layer.shape, kernel, gpu, capacity, tiles_m, tiles_n, swz, per_wave, cliff)
    if key not in _KEPT:
        if len(_KEPT) >= 4096:
            _KEPT.clear()
        _KEPT[key] = _layer_table(layer, kernel, gpu, capacity, tiles_m, tiles_n, swz, per_wave, cliff)
    return _KEPT[key]


_KEPT = {}


def _layer_table(layer, kernel, gpu, capacity, tiles_m, tiles_n, swz, per_wave, cliff):
    """`refetch_window_table` from the layer's figures (`_table`, lru-cached by them)."""
    x_base, w_base, y_base = tensor_bases(layer, kernel)
    eb = kernel.elem_bytes
    N, C, K, R, S, (dh, dw) = layer.n, layer.c, layer.k, layer.r, layer.s, layer.dilation
    if kernel.op == "fprop":     # x (N, C, H, W) into y (N, K, P, Q); the filter's K rows of R S C elements
        a = (x_base, N, C, layer.h, layer.w, layer.p, layer.q, R, S, *layer.stride, *layer.pad, dh, dw)
        b = (w_base, 1, 0, R * S * C * eb, K)
        c = (y_base, K, layer.p * layer.q, N * layer.p * layer.q)
    else:                        # dy (N, K, P, Q) into dx (N, C, H, W): p = h + pad - r dil, flipped taps
        pad = (dh * (R - 1) - layer.pad[0], dw * (S - 1) - layer.pad[1])
        a = (y_base, N, K, layer.p, layer.q, layer.h, layer.w, R, S, 1, 1, *pad, dh, dw)
        b = (w_base, K * R * S, C * eb, eb, C)
        c = (x_base, C, layer.h * layer.w, N * layer.h * layer.w)
    total = (y_base + layer.output_elements * eb) // gpu.line_bytes      # y is placed last (x, w, y)
    return _table(a, b, c, total + 2, kernel.tile_m, kernel.tile_n, eb, kernel.layout == "nhwc", gpu.l2_slices,
                  gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, gpu.line_bytes, float(capacity), tiles_m, tiles_n,
                  swz, per_wave, tuple(cliff))


@functools.lru_cache(maxsize=512)
def _table(a, b, c, total, tm, tn, eb, nhwc, slices, sets, ways, index, line, capacity, tiles_m, tiles_n, swz,
           per_wave, cliff):
    """The table of A's windows: ``a`` (A's base, N, channels, rows, columns, output rows, output columns, R, S,
    strides, pads, dilations), ``b`` (`_walk`'s ``b_spec``), ``c`` (the output's base, GEMM-N, pixels an image,
    M), ``total`` lines spanned by the three tensors."""
    a_base, N, C, H, W, P, Q = a[:7]
    if N * C * H * W * eb // line > MAX_TILE_LINES or total > MAX_LINES:
        return None
    ptr, a_lines = _COMPILED["tiles"](np.array(a[1:], np.int64), tm, tiles_m, eb, line, a_base, nhwc,
                                      MAX_TILE_LINES)
    if ptr.shape[0] == 0:
        return None
    cm, cn = _schedule.grid_tiles(tiles_m, tiles_n, swz)
    ctas = cm.shape[0]
    span = max(1, ctas - per_wave)
    starts = np.unique(((np.arange(PLACES) + 0.5) * span / PLACES).astype(np.int64))
    set_ids = _COMPILED["sets"](total, slices, sets, index == "xor")
    c_spec = np.array((c[0], c[1], c[2], tm, tn, c[3], nhwc, eb, line), np.int64)
    acc, reached, ok = _COMPILED["walk"](starts, cm, cn, ptr, a_lines, set_ids, np.array(b, np.int64), c_spec,
                                         slices * sets, ways, slices * sets * ways * capacity, _l2.PATTERN_X,
                                         MAX_VISITS)
    if not ok:
        return None
    out = np.zeros(_l2.PATTERN_X.shape[0], np.float64)
    last = 0.0
    for j in range(1, out.shape[0]):
        if reached[j] > 0:
            last = acc[j] / reached[j]
            out[j] = last
        else:                        # no window of the grid is this long: the cliff, at least the last count
            out[j] = max(last, _l2.l2_miss_prob(_l2.PATTERN_X[j], float(ways), cliff))
    out.setflags(write=False)
    return out
