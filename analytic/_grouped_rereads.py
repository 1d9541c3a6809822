"""The grouped model's re-reads of a pixel (MODEL.md section 6a, "A's L1 misses"): which tile re-reads it at
which taps (`_tile_rereads`, `_reread_table`), where the two rows sit in the k-step's issue order
(`_jittered_miss`), how many CTAs share an SM (`residency_classes`), a tile's distinct pixels between two
taps (`_window_pixels`), and the compiled sums of the miss chances over them (`_reread_misses`).
`_grouped_model.reuse_misses` gathers the figures of a layer, a kernel and a GPU and calls them.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from simcore._jit import njit

from ._common import cdiv, nsets, position_phases
from ._counts import _ramp
from ._memo import memo

# Numba's on-disk cache checks only this file's own time stamp; the kernels here call `_counts._ramp`, and
# tests/test_jit_deps.py counts every kernel module they import: updating this digest of them after an edit
# there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "19987d90b14e214e"


@functools.lru_cache(maxsize=1024)
def _axis_taps(out_size, in_size, stride, pad, dil, taps):
    """{((tap, output index - the first tap's), ...): input coordinates}: the taps that read each input
    coordinate along one axis (ascending), with their outputs relative to the first tap's."""
    out = {}
    for x in range(in_size):
        hit = [(t, (x + pad - t * dil) // stride) for t in range(taps)
               if (x + pad - t * dil) % stride == 0 and 0 <= (x + pad - t * dil) // stride < out_size]
        if hit:
            key = tuple((t, o - hit[0][1]) for t, o in hit)
            out[key] = out.get(key, 0) + 1
    return out


@functools.lru_cache(maxsize=1024)
def _axis_arrays(out_size, in_size, stride, pad, dil, taps) -> tuple:
    """`_axis_taps` as arrays: (every class's taps, their output offsets, each class's first index into
    those two (and the end), how many input coordinates each class holds)."""
    classes = _axis_taps(out_size, in_size, stride, pad, dil, taps)
    tap = np.array([t for key in classes for t, _o in key], np.int64)
    off = np.array([o for key in classes for _t, o in key], np.int64)
    start = np.cumsum([0] + [len(key) for key in classes]).astype(np.int64)
    return tap, off, start, np.array(list(classes.values()), np.float64)


@njit(cache=True)
def _miss_ramp(x, lo, hi) -> float:
    """Miss chance of an L1 reuse whose window fills ``x`` of the ways it maps to (the dense engine's
    ramp, `_counts._ramp`, as its complement)."""
    return 1.0 - _ramp(x, lo, hi)


@njit(cache=True)
def _jittered_miss(window, reach, tile_px, scale, others, b_lines, d, dm, order, lo, hi) -> float:
    """Miss chance of a re-read d k-steps after the tile's last read of its pixel, by a row dm GEMM rows
    on, averaged over where the first row sits in the k-step's issue order (DESIGN section 3: all of
    warp 0's iterations, then warp 1's; the row's place in its iteration, m mod T_s, taken uniform): the
    requests between the two reads are d R + pos(m + dm) - pos(m), R a k-step's requests, pos(m) =
    warp(m mod T_s) I + m div T_s; ``window`` (the tile's distinct pixels of d k-steps) scales with
    them, at most ``reach`` (those of the d + 1 k-steps the requests touch: the two partial k-steps
    read many of the same pixels) and the tile's pixels. The SM's ``others`` co-resident CTAs step once a
    round each, so they read their d k-steps in between whatever the rows' places. ``order`` = (T_s rows an iteration, g rows a
    warp request covers (T_c threads a row divide 32), iterations I, requests a k-step R).

    With dm = a T_s + qb g + rb (0 <= rb < g, qb < W = T_s / g warps), a row r = qr g + rr moves qb
    warps on, one more when rr + rb >= g (chance rb / g), and wraps into the next iteration when its
    warp passes W (chance qb / W, or (qb + 1) / W after the carry): four cases, exact for r uniform.
    Seed 2 #86 (one row a warp request, 4 warps, 32 iterations): a pixel the next tap reads one row
    earlier comes 96 rows later for three rows in four and 223 for the fourth, not 128.

    Where the tile's rows fall in classes of sets by their pixel (pixels of whole lines, a tap's rows reaching
    ``nsa`` > 1 sets: `_issue_order`'s row figures), the lines between two reads in the re-read's set are the
    rows of its class read between, not a share of all the requests: rows a warp reads may all lie in one
    class, so the re-read's set sees a whole k-step's lines where half a k-step's requests lie between.
    Each row m of the tile is then counted exactly: its class's rows after it in its k-step, the d - 1
    k-steps between, and the class's rows before row m + dm in the last (``order`` past its fifth entry:
    `_class_shifts`' table of those counts per dm, rows alike merged). Held-out seed 19 #10 (1x7
    depthwise, C 384 fp16: 6 lines a pixel on 4 sets, pixels alternating between two; 2 warps reading
    alternate rows): each warp's rows of a tap lie in one set, every re-read one tap on saw 1.09-1.31 times
    the ways replayed (`l1sd3`), where the requests between said half of them 0.69."""
    ts, g, iters, req = order[0], order[1], order[2], order[3]
    i = 5
    for _ in range(int(order[4])):          # rows in classes of sets (`_class_shifts`): this dm's entry
        k = int(order[i + 1])
        if int(order[i]) == dm:
            out = 0.0
            for j in range(i + 2, i + 2 + 3 * k, 3):
                # the class's rows between, the re-read row included, over d k-steps' of them
                f = (order[j] + (d - 1) * order[j + 1]) / (d * order[j + 1])
                out += order[j + 2] * _miss_ramp(scale * (min(tile_px, reach, window * f)
                                                          + others * min(tile_px, window)) + b_lines, lo, hi)
            return out
        i += 2 + 3 * k
    warps = ts / g
    a = dm // ts
    b = dm - a * ts
    qb = float(int(b // g))
    rb = b - qb * g
    out = 0.0
    for k in range(4):
        carry = k % 2
        wrapped = k // 2
        pc = rb / g if carry else 1.0 - rb / g
        pw = (qb + carry) / warps
        w = pc * (pw if wrapped else 1.0 - pw)
        if w <= 0.0:
            continue
        delta = (qb + carry - warps * wrapped) * iters + a + wrapped
        f = max(0.0, 1.0 + delta / (d * req))
        out += w * _miss_ramp(scale * (min(tile_px, reach, window * f) + others * min(tile_px, window))
                              + b_lines, lo, hi)
    return out


@njit(cache=True)
def _tile_rereads(h_tap, h_off, h_start, h_count, w_tap, w_off, w_start, w_count, S, Q, tm, rs):
    """The re-reads of a pixel by one tile, over the classes of input rows and columns (their taps in
    order: t = r S + s ascending): rows (t, d, dm, weight) of the re-reads inside a group (at tap t, d
    k-steps and dm GEMM rows after the tile's previous read), rows (t_last, t_first, dm, weight) of the next
    group's re-reads (the tile's last tap of the pixel, its first, which the next group re-reads it at),
    the number of (pixel, tile) pairs, per image, and each pair's longest re-read (kind: 0 inside the
    group, 1 the next group's; t, d or t_last, t_first; dm; weight): where a pixel misses the L1 at all.

    A tile holds T_m consecutive GEMM rows, so it reads a pixel only at the taps whose output row falls
    in it: with the tile's first row u rows from the pixel's first reader (one tile every T_m rows, u
    uniform), the taps with offset m in [u, u + T_m). Each stretch of u with the same taps weighs its
    length / T_m; inside the tile consecutive taps re-read, and the next group re-reads from the tile's
    last tap to its first: a 5x5 filter on 52-wide images with 64-row tiles reads a pixel at one or two
    filter rows per tile, and the next group's re-read comes some 21 k-steps later, not 1 (seed 5 #19)."""
    nmax = 0
    rows = 0
    for a in range(h_count.shape[0]):
        for b in range(w_count.shape[0]):
            n = (h_start[a + 1] - h_start[a]) * (w_start[b + 1] - w_start[b])
            nmax = max(nmax, n)
            rows += 2 * n * n
    tap = np.empty(nmax, np.int64)
    off = np.empty(nmax, np.int64)
    cuts = np.empty(2 * nmax, np.int64)
    intra = np.empty((max(rows, 1), 4), np.float64)
    cross = np.empty((max(rows, 1), 4), np.float64)
    longest = np.empty((max(rows, 1), 5), np.float64)
    ni = 0
    nc = 0
    pairs = 0.0
    for a in range(h_count.shape[0]):
        for b in range(w_count.shape[0]):
            n = 0
            for i in range(h_start[a], h_start[a + 1]):
                for j in range(w_start[b], w_start[b + 1]):
                    tap[n] = h_tap[i] * S + w_tap[j]
                    off[n] = h_off[i] * Q + w_off[j]
                    cuts[2 * n] = off[n] - tm + 1
                    cuts[2 * n + 1] = off[n] + 1
                    n += 1
            order_cuts = np.sort(cuts[:2 * n])
            for k in range(2 * n - 1):
                u = order_cuts[k]
                span = order_cuts[k + 1] - u
                if span <= 0:
                    continue
                share = span / tm * h_count[a] * w_count[b]
                first = -1
                last = -1
                gap = -1                                # the pair's longest re-read inside the group
                for q in range(n):                      # taps in order; those in [u, u + T_m)
                    if u <= off[q] < u + tm:
                        if first < 0:
                            first = q
                        else:
                            intra[ni, 0] = tap[q]
                            intra[ni, 1] = tap[q] - tap[last]
                            intra[ni, 2] = off[q] - off[last]
                            intra[ni, 3] = share
                            if intra[ni, 1] > gap:
                                gap = intra[ni, 1]
                                longest[nc, 0] = 0.0
                                longest[nc, 1] = intra[ni, 0]
                                longest[nc, 2] = intra[ni, 1]
                                longest[nc, 3] = intra[ni, 2]
                            ni += 1
                        last = q
                if first < 0:
                    continue
                pairs += share
                cross[nc, 0] = tap[last]
                cross[nc, 1] = tap[first]
                cross[nc, 2] = off[first] - off[last]
                cross[nc, 3] = share
                if rs - tap[last] + tap[first] >= gap:  # the next group's re-read is the longest
                    longest[nc, 0] = 1.0
                    longest[nc, 1] = tap[last]
                    longest[nc, 2] = tap[first]
                    longest[nc, 3] = cross[nc, 2]
                longest[nc, 4] = share
                nc += 1
    return intra[:ni], cross[:nc], pairs, longest[:nc]


@njit(cache=True)
def _merged(rows, keys) -> np.ndarray:
    """``rows`` with equal first ``keys`` columns (small integers, the last of them signed) merged, their
    last column (weight) summed: one integer key a row, sorted (np.unique over rows, then over keys in
    Python: 40 % and 10 % of the grouped model's time, measured)."""
    n = rows.shape[0]
    out = np.zeros((n, keys + 1), np.float64)
    if n == 0:
        return out
    code = np.zeros(n, np.int64)
    for i in range(n):
        c = 0
        for k in range(keys - 1):
            c = c * 4096 + np.int64(rows[i, k])
        code[i] = c * (np.int64(1) << 32) + (np.int64(rows[i, keys - 1]) + (np.int64(1) << 31))
    order = np.argsort(code, kind="mergesort")
    m = -1
    last = 0
    for j in range(n):
        i = order[j]
        if m < 0 or code[i] != last:
            m += 1
            last = code[i]
            for k in range(keys):
                out[m, k] = rows[i, k]
        out[m, keys] += rows[i, keys]
    return out[:m + 1]


@functools.lru_cache(maxsize=256)
def tap_phases(layer, eb, sets, line) -> tuple:
    """(each tap's class of L1 sets, the number of classes, the sets a class reaches), the dense engine's
    filter-position phases (`model._predict_gemm`) for a grouped layer: where pixels are whole lines, one
    tap's rows (a stride's pixels apart) reach ``nsa`` sets, and taps whose pixel offsets differ by other
    than a multiple of the set step read pixels of another class, in other sets. mobilenet_v2
    ``features.7.conv.1.0`` (3x3 stride 2, C 192 fp32, v100: 6 lines a pixel, 4 sets): every row of a tap
    reads pixels of one column parity, so taps s = 1 and s = 0, 2 put their lines in two different sets;
    over the pixels' 2 sets a re-read from tap 2 to tap 6 saw 376 lines on 384 ways and hit, where its
    set holds 266 of them on 192 (simulated: 91 % of these re-reads miss). Not whole lines: one class,
    over the sets a pixel pitch reaches."""
    unit = layer.c * eb
    rs = layer.r * layer.s
    reach = nsets((unit,), sets, line)
    if unit % line:
        return np.zeros(rs, np.int64), 1, reach
    (sh, sw), (dh, dw) = layer.stride, layer.dilation
    nsa = nsets((sw * unit, sh * layer.w * unit, layer.h * layer.w * unit), sets, line)
    nphase = sets // nsa
    phase = position_phases(layer.r, layer.s, layer.w, dh, dw, unit // line, nphase)
    phase.setflags(write=False)
    return phase, nphase, nsa


@memo()
def _reread_table(layer, kernel, sets, line) -> tuple:
    """`_tile_rereads` of ``layer``, rows alike merged, per input pixel of the images: (intra rows
    (t, d, dm, weight), cross rows (d, dm, weight, window, reach): `_cross_windows` in the taps' classes of
    sets, `tap_phases`), read-only (they depend on neither the GPU's other figures nor the factors)."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    h = _axis_arrays(layer.p, layer.h, sh, ph, dh, layer.r)
    w = _axis_arrays(layer.q, layer.w, sw, pw, dw, layer.s)
    rs = layer.r * layer.s
    intra, cross, pairs, longest = _tile_rereads(*h, *w, layer.s, layer.q, min(kernel.tile_m, layer.gemm_m), rs)
    intra, cross, longest = _merged(intra, 3), _merged(cross, 3), _merged(longest, 4)
    if pairs:
        intra[:, 3] /= pairs
        cross[:, 3] /= pairs
        longest[:, 4] /= pairs
    phase = tap_phases(layer, kernel.elem_bytes, sets, line)[0]
    longest = _longest_rows(longest, cross, rs, phase)
    cross = _cross_windows(cross, rs, phase)
    longest[:, 8] = _rows_of(longest, intra, cross)
    intra.setflags(write=False)
    cross.setflags(write=False)
    longest.setflags(write=False)
    return intra, cross, longest


def _rows_of(longest, intra, cross) -> np.ndarray:
    """The index of the intra row (kind 0: t, d, dm) or merged cross row (kind 1: d, dm, window, reach, window in
    every set) that each longest row is (its miss chance is that row's: 0 apart, rows are merged on these keys):
    the nearest row of its kind's table (`_nearest_rows`; a row-by-row search took 8 % of a grouped prediction,
    numpy's broadcast search 175 us a layer shape, measured on the grouped networks;
    tests/test_grouped_rereads.py keeps the row-by-row search as the reference)."""
    out = np.zeros(longest.shape[0], np.float64)
    for kind, table, cols, keys in ((0.0, intra, [0, 1, 2], [1, 2, 3]), (1.0, cross, [0, 1, 3, 4, 5], [2, 3, 5, 6, 7])):
        rows = np.flatnonzero(longest[:, 0] == kind)
        if rows.shape[0] == 0 or table.shape[0] == 0:
            continue
        out[rows] = _nearest_rows(np.ascontiguousarray(longest[rows][:, keys]), np.ascontiguousarray(table[:, cols]))
    return out


@njit(cache=True)
def _nearest_rows(query, ref):
    """Per row of ``query``, the first row of ``ref`` nearest in the sum of absolute differences (numpy's
    argmin of that sum, the sum in numpy's order: the first term, then the rest added up)."""
    out = np.empty(query.shape[0], np.int64)
    for i in range(query.shape[0]):
        best = np.inf
        at = 0
        for j in range(ref.shape[0]):
            rest = 0.0
            for c in range(1, query.shape[1]):
                rest += abs(query[i, c] - ref[j, c])
            gap = abs(query[i, 0] - ref[j, 0]) + rest
            if gap < best:
                best = gap
                at = j
        out[i] = at
    return out


def _longest_rows(longest, cross, rs, phase) -> np.ndarray:
    """Each (pixel, tile) pair's longest re-read (`_tile_rereads`' fourth table, rows (kind, t or t_last, d or
    t_first, dm, weight)) as (kind, t, d, dm, weight, window, reach, window in every set, the row it is,
    `_rows_of`): a next group's re-read (kind 1) with `_cross_windows`' shares from the cross rows' (last,
    first) distribution, d = R S - t_last + t_first; one inside the group (kind 0) with t and d."""
    out = np.zeros((longest.shape[0], 9), np.float64)
    out[:, :5] = longest
    rows = longest[:, 0] == 1.0
    if not rows.any():
        return out
    last, first = longest[rows, 1].astype(np.int64), longest[rows, 2].astype(np.int64)
    c_last, c_first = cross[:, 0].astype(np.int64), cross[:, 1].astype(np.int64)
    out[rows, 2] = rs - last + first
    out[rows, 1] = last
    window = np.zeros(last.shape[0])
    reach = np.zeros(last.shape[0])
    for c in np.unique(phase[last]):
        mine = phase[last] == c
        window[mine], reach[mine] = _between(c_last, c_first, cross[:, 3], phase[c_last] == c, rs,
                                             last[mine], first[mine])
    out[rows, 5], out[rows, 6] = window, reach
    out[rows, 7] = _between(c_last, c_first, cross[:, 3], np.ones(c_last.shape[0], np.bool_), rs, last, first)[0]
    return out


def _cross_windows(cross, rs, phase) -> np.ndarray:
    """The next group's re-reads (rows t_last, t_first, dm, weight) with the share of a tile's pixels that
    lie between in the re-read pixel's class of sets (``phase`` of each tap: a pixel's taps share it):
    (d, dm, weight, window, reach, window in every set: the L2's), d = R S - t_last + t_first k-steps. The
    re-read's window, taps t_last .. R S - 1 of this group and 0 .. t_first - 1 of the next, holds every pixel
    of the tile in that class but those that the tile reads only at taps in [t_first, t_last) (first tap >=
    t_first, last < t_last); ``reach`` (t_first too) every one but those first read after it. The pixels'
    (first, last) taps are the rows' own distribution. d T_m rows were assumed before, at most the tile's pixels:
    resnext50_32x4d ``layer1.0.conv2`` (3x3, 128-row tiles of 56-wide images) re-reads a pixel last read at
    tap 5 four k-steps on, after some 200 of the tile's 241 pixels (replayed: 86 % of these re-reads hit
    with two CTAs on 448 ways; the whole tile said all missed)."""
    last, first = cross[:, 0].astype(np.int64), cross[:, 1].astype(np.int64)
    out = np.empty((cross.shape[0], 6), np.float64)
    out[:, 0] = rs - last + first
    out[:, 1] = cross[:, 2]
    out[:, 2] = cross[:, 3]
    out[:, 5] = _between(last, first, cross[:, 3], np.ones(last.shape[0], np.bool_), rs)[0]
    for c in np.unique(phase[last]):
        rows = phase[last] == c
        out[rows, 3], out[rows, 4] = _between(last, first, cross[:, 3], rows, rs)
    # rows alike in (d, dm, window, reach, window in every set) summed: the compiled sums judge each row once
    # (a 3x3 layer's pairs of taps give some 30 rows, 9 of them distinct)
    keys, inverse = _unique_rows(np.round(out[:, [0, 1, 3, 4, 5]], 9))
    merged = np.zeros((keys.shape[0], 6), np.float64)
    merged[:, [0, 1, 3, 4, 5]] = keys
    np.add.at(merged[:, 2], inverse, out[:, 2])
    return merged


def _unique_rows(rows) -> tuple:
    """`np.unique(rows, axis=0, return_inverse=True)`: the distinct rows in lexicographic order, and each row's
    index among them, by one `np.lexsort` (np.unique over rows took 180 us of `_cross_windows`' 290, measured
    on the grouped networks' layers; tests/test_grouped_rereads.py checks the two equal)."""
    if rows.shape[0] == 0:
        return rows.copy(), np.zeros(0, np.int64)
    order = np.lexsort(rows.T[::-1])
    ranked = rows[order]
    new = np.empty(rows.shape[0], np.bool_)
    new[0] = True
    new[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    inverse = np.empty(rows.shape[0], np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ranked[new], inverse


def _between(last, first, weight, rows, rs, q_last=None, q_first=None) -> tuple:
    """`_cross_windows`' (window, reach) shares for the rows ``rows`` (one class of sets), from those rows'
    (last, first) tap distribution; at (``q_last``, ``q_first``) where given, else at the rows' own. The joint
    table and the shares are compiled (`_joint_taps`, `_shares_at`: 40 us a call in numpy, four or five calls
    a layer shape, measured); its sum stays numpy's (pairwise), so the figures are those of the numpy form,
    kept in tests/test_grouped_rereads.py as the reference."""
    joint = _joint_taps(last, first, weight, rows, rs)
    if q_last is None:
        q_last, q_first = last[rows], first[rows]
    return _shares_at(joint, joint.sum(), q_last, q_first, rs)


@njit(cache=True)
def _joint_taps(last, first, weight, rows, rs):
    """The rows' weights by (last tap, first tap), padded with a zero row and column (np.add.at's order)."""
    joint = np.zeros((rs + 1, rs + 1), np.float64)
    for i in range(last.shape[0]):
        if rows[i]:
            joint[last[i], first[i]] += weight[i]
    return joint


@njit(cache=True)
def _shares_at(joint, share, q_last, q_first, rs):
    """(window, reach) at each (q_last, q_first): share less the weight whose last tap < q_last and first tap
    >= q_first (window) or > q_first (reach), clipped to [0, 1]; the sums in numpy's cumsum order (along the
    first taps from the top, then down the last taps)."""
    below = np.zeros((rs + 1, rs + 2), np.float64)
    for l in range(rs):
        acc = 0.0
        for f in range(rs, -1, -1):
            acc += joint[l, f]
            below[l + 1, f] = below[l, f] + acc               # row 0 is zeros: 0 + acc is acc (weights >= 0)
    n = q_last.shape[0]
    window = np.empty(n, np.float64)
    reach = np.empty(n, np.float64)
    for i in range(n):
        window[i] = min(max(share - below[q_last[i], q_first[i]], 0.0), 1.0)
        reach[i] = min(max(share - below[q_last[i], q_first[i] + 1], 0.0), 1.0)
    return window, reach


@njit(cache=True)
def _b_sets(lines, ways, sets) -> tuple:
    """(share of the L1 sets that hold ``lines`` filter lines of one contiguous slice, those lines a set over
    the ways): they fill consecutive sets (at most all of them) evenly and leave the others; a fraction of a
    line is the chance of straddling into one more set (`_b_lines_round`: 1 + (T_k e - 1) / 128 lines)."""
    if lines <= 0.0:
        return 0.0, 0.0
    held = min(sets, max(1.0, lines))
    return held / sets, lines / (held * ways)


@njit(cache=True)
def _cyclic_miss(window, reach, tile_px, scale, others, b_lines, tiles, d, dm, order, ways, sets) -> float:
    """Miss chance of the next group's re-read of a pixel, ``d`` k-steps and ``dm`` rows after the tile's last
    read of it (`_jittered_miss` over the rows' places in the issue order; ``window`` and ``reach`` its
    pixels between, `_cross_windows`). The group's walk replays itself over the same pixels, so a re-read's
    set holds exactly the window's lines: LRU hits while they fit the ways and misses past them, a step at
    x = 1, not the dense engine's ramp, which stands for windows that differ from row to row. The filter
    lines between are each filter tile's contiguous slice (``b_lines`` lines a tile; ``tiles`` distinct
    filter tiles on the SM): a slice fills the sets it is expected to touch (`_b_sets`) out of ``sets`` (those
    the re-read pixels' windows fill) and leaves the others, and the slices of other CTA
    columns lie apart, so the re-read's set holds k of them with binomial chances (one slice of all the
    tiles' lines put a line in every set: held-out seed 181 #42 +137 %, now +108.6 %, a window exactly at
    the ways). Two consecutive groups' slices are one contiguous block, so the line a slice may straddle
    into counts once across the group step (held-out 151 #84, 448 pixels on 448 ways: +40.5 -> +23.8 %).

    Measured (`tests/test_grouped_cyclic.py`, A's L1 misses against simulation, 1x1 depthwise layers whose
    tiles read one line a pixel a set at the ways): v100 C = 256 fp32, 128 pixels a tile on 128 ways:
    -88.5 % -> -6.2 % (a filter line in one set in four, its re-reads missing there); seed 4 #52 (126 lines
    a round in one set of 120 ways) -43.5 -> -0.1 % L2 reads; held-out seeds 25 #15 -63.8 -> -12.2 %, 93 #82
    -67.1 -> -4.4 % (pitches reaching one set), 81 #97 -65.0 -> +5.3 % and 67 #40 -41.0 -> -33.2 % (two)."""
    share, per_set = _b_sets(b_lines, ways, sets)
    n = int(tiles + 0.5)
    if share >= 1.0:                      # every set holds every tile's slice
        return _jittered_miss(window, reach, tile_px, scale, others, n * per_set, d, dm, order, 1.0, 1.0)
    out = 0.0
    weight = (1.0 - share) ** n           # binomial weights of k tiles' slices in the re-read's set
    for k in range(n + 1):
        out += weight * _jittered_miss(window, reach, tile_px, scale, others, k * per_set, d, dm, order, 1.0, 1.0)
        weight *= (n - k) / (k + 1.0) * share / (1.0 - share)
    return out


@njit(cache=True)
def _class_lines(w, nphase):
    """(lines in its own class of sets, lines in each other class) of a pixel's window of ``w`` consecutive
    lines (a mean over alignments: between floor and ceiling) where taps fall in ``nphase`` classes of sets:
    line j of the window lies in the class j on (`tap_phases`: consecutive lines, consecutive sets)."""
    if nphase <= 1.0 or w <= 1.0:
        return w, 0.0
    lo = math.floor(w)
    hi = lo + 1.0
    own_lo, own_hi = math.ceil(lo / nphase), math.ceil(hi / nphase)
    own = own_lo + (w - lo) * (own_hi - own_lo)
    return own, (w - own) / (nphase - 1.0)


@njit(cache=True)
def _intra_miss(win_tile, t1, d, dm, ratio, own, other, wl, tile_px, scale, others, b_lines, order, lo, hi):
    """`_jittered_miss` of a re-read inside a group at tap t1, d taps on: a window of ``wl`` lines puts its
    next ones in the next classes of sets (`_class_lines`: ``own`` lines in its class, ``other`` in each
    other), so the taps of other classes between count there (win_tile[2] - [0]), in pixels of this class's
    ``wl`` lines."""
    spill = other * max(0.0, win_tile[2, t1, d] - win_tile[0, t1, d]) * ratio
    return _jittered_miss((own * win_tile[0, t1, d] * ratio + spill) / wl,
                          (own * win_tile[1, t1, d] * ratio + spill) / wl, tile_px, scale, others, b_lines, d, dm,
                          order, lo, hi)


@njit(cache=True)
def _next_group_miss(window, reach, window_all, own, other, wl, tile_px, scale, others, b_lines, tiles, d, dm, order,
                     l1):
    """`_cyclic_miss` of the next group's re-read (`_cross_windows`' shares of the tile's pixels), the other
    classes' pixels counted as in `_intra_miss`."""
    spill = other * max(0.0, window_all - window) * tile_px
    return _cyclic_miss((own * window * tile_px + spill) / wl, (own * reach * tile_px + spill) / wl, tile_px, scale,
                        others, b_lines, tiles, d, dm, order, l1[0], l1[2])


@njit(cache=True)
def _reread_misses(intra_rows, cross_rows, longest, windows, classes, residents, denom, b_scale, b_cap, win_tile,
                   lo, hi, order, l1):
    """(cross, intra): the miss chance of the next group's re-read of a pixel by a tile, and the summed
    miss chances of its re-reads inside a group (`_reread_table`'s rows), over the channel-block windows
    and tile classes. The filter lines of the rounds between (``b_scale`` a round) are at most the
    group's filter slice (``b_cap``; two across the next group's re-read): its K_g filters of R S C_g
    elements are one block, some ten lines for C_g = 3 and a 5x5 filter, which 21 rounds re-read.

    A re-read inside a group sees its tile's distinct pixels of the taps between (``win_tile``, the layer's
    mean per T_m rows) in proportion to its class's pixels over the classes' mean: a partial last tile, or
    one at the images' edge, reads fewer (seed 2 #84 L2 reads -23.5 -> -14.6 %, seed 5 #92 -22.8 -> -18.5 %).
    The next group's re-read sees the share of its tile's pixels that `_cross_windows` counts, and replays the
    group's walk over the same pixels: an exact cyclic walk whatever the pixel's place in the issue order,
    judged on the LRU step with the filter slices in their own sets (`_cyclic_miss`; ``l1`` = (ways, sets, the
    sets the re-read pixels' windows fill: a filter line between lands in one of those, the taps' classes of
    sets, the filter lines of a round in the re-read's set over their mean a set: `_grouped_filters.in_set_ratio`,
    for the re-reads inside a group)).
    Replayed, such re-reads are kept below the ways and lost past them: seed 3 #77 (3 CTAs of 302 pixels, 1.5
    lines a pixel, on a v100 with twice the L1) loses 61 % of them at x = 1.05, where the fitted ramp kept
    57 %; its L2 reads went -27.7 -> -3.2 %."""
    cross = 0.0
    intra = 0.0
    # the L2 side's figures (`_grouped_model._l2_rereads`), per class of window lines li: [li, 0] the next
    # group's miss chances, [li, 1] those inside a group, [li, 2] the re-reads (each weighed like its miss
    # chance), [li, 3] the pairs whose longest re-read misses (those whose lines miss the L1 at all); per
    # distance d: [li, d, 0] the miss chances inside a group, [li, d, 1] the same times the tile's pixels
    # between in every set (win_tile[2]), [li, d, 2:4] the same for the next group's
    by_class = np.zeros((windows.shape[0], 4))
    by_dist = np.zeros((windows.shape[0], win_tile.shape[2] + 1, 4))
    p_intra = np.zeros(intra_rows.shape[0])       # the rows' miss chances, for the pairs' longest rows
    p_cross = np.zeros(cross_rows.shape[0])
    # a tile's windows inside a group (``win_tile``, per T_m rows of the layer) scale with its class's pixels
    px_mean = 0.0
    px_w = 0.0
    for ci in range(classes.shape[0]):
        px_mean += classes[ci, 0] * classes[ci, 1]
        px_w += classes[ci, 1]
    px_mean = px_mean / px_w if px_w > 0.0 else 1.0
    lines = l1[0] * l1[1]                         # b_scale, b_cap: lines over every set's ways
    for k in range(residents.shape[0]):     # (CTAs on the SM, those in its class of sets, share, filter tiles)
        bs, bc = residents[k, 3] * b_scale, residents[k, 3] * b_cap
        for li in range(windows.shape[0]):
            scale = windows[li, 0] / denom
            own, other = _class_lines(windows[li, 0], l1[3])
            others = residents[k, 1] - 1.0
            for ci in range(classes.shape[0]):
                wt = residents[k, 2] * windows[li, 1] * classes[ci, 1]
                tile_px = classes[ci, 0]
                ratio = tile_px / px_mean if px_mean > 0.0 else 1.0
                wl = windows[li, 0]
                for r in range(intra_rows.shape[0]):
                    t1, d, dm = int(intra_rows[r, 0]), int(intra_rows[r, 1]), int(intra_rows[r, 2])
                    p_intra[r] = _intra_miss(win_tile, t1, d, dm, ratio, own, other, wl, tile_px, scale, others,
                                             min(bs * d, bc) * l1[4], order, lo, hi)
                    miss = wt * intra_rows[r, 3] * p_intra[r]
                    intra += miss
                    by_class[li, 1] += miss
                    by_class[li, 2] += wt * intra_rows[r, 3]
                    by_dist[li, d, 0] += miss
                    by_dist[li, d, 1] += miss * min(win_tile[2, t1, d] * ratio, tile_px)
                for r in range(cross_rows.shape[0]):
                    d, dm = int(cross_rows[r, 0]), int(cross_rows[r, 1])
                    p_cross[r] = _next_group_miss(
                        cross_rows[r, 3], cross_rows[r, 4], cross_rows[r, 5], own, other, wl, tile_px, scale, others,
                        min(b_scale * d * lines, 2.0 * b_cap * lines - 1.0), residents[k, 3], d, dm, order, l1)
                    miss = wt * cross_rows[r, 2] * p_cross[r]
                    cross += miss
                    by_class[li, 0] += miss
                    by_class[li, 2] += wt * cross_rows[r, 2]
                    by_dist[li, d, 2] += miss
                    by_dist[li, d, 3] += miss * cross_rows[r, 5] * tile_px
                for r in range(longest.shape[0]):     # where the pair's lines miss the L1 at all: its row's
                    p = p_intra[int(longest[r, 8])] if longest[r, 0] == 0.0 else p_cross[int(longest[r, 8])]
                    by_class[li, 3] += wt * longest[r, 4] * p
    return cross, intra, by_class, by_dist


@functools.lru_cache(maxsize=256)
def _issue_head(kernel) -> np.ndarray:
    """`_issue_order` without the rows' classes (T = 0): (T_s rows an iteration, rows a warp request covers,
    iterations, requests a k-step, 0) of the stripmined map with T_c = T_k / V threads a row."""
    t_c = kernel.tile_k // kernel.vector
    t_s = kernel.threads // t_c
    iters = kernel.tile_m // t_s
    out = np.array([t_s, 32.0 / t_c, iters, kernel.threads // 32 * iters, 0.0], np.float64)
    out.setflags(write=False)
    return out


def _issue_order(layer, kernel, sets, line) -> np.ndarray:
    """A's issue order inside a k-step (`_jittered_miss`): `_issue_head`'s (T_s rows an iteration, rows a warp
    request covers, iterations, requests a k-step), then T, the rows of the layer's first tile, and per row,
    where a tap's rows fall in classes of sets by their pixel (pixels of whole lines reaching ``nsa`` > 1 sets,
    `tap_phases`: the pixel's first line, linear index): its class's rows issued after it in the k-step,
    before it, and in all (T = 0 and none elsewhere). The other rows of its warp request count half before it
    and half after: where every row is of one class this gives `_jittered_miss`' requests between."""
    head = _issue_head(kernel)
    unit = layer.c * kernel.elem_bytes
    if unit % line or tap_phases(layer, kernel.elem_bytes, sets, line)[2] == 1:
        return head
    t_s, iters = int(head[0]), int(head[2])
    rows = min(kernel.tile_m, layer.gemm_m)
    r = np.arange(rows)
    image, rest = np.divmod(r, layer.p * layer.q)
    p, q = np.divmod(rest, layer.q)
    pixel = (image * layer.h + p * layer.stride[0]) * layer.w + q * layer.stride[1]
    key = pixel * (unit // line) % sets
    pos = (r % t_s) // int(head[1]) * iters + r // t_s
    out = np.empty(5 + 3 * rows)
    out[:4] = head[:4]
    out[4] = rows
    _row_classes(key, pos, out[5:5 + rows], out[5 + rows:5 + 2 * rows], out[5 + 2 * rows:])
    out.setflags(write=False)
    return out


@njit(cache=True)
def _row_classes(key, pos, ahead, behind, same):
    """Per row: the rows of its class (equal ``key``) issued after it, before it, and in all (itself
    included); a warp request's other rows (equal ``pos``) go with it, half before it and half after
    (`_jittered_miss`' requests between). Filled in place (compiled: the numpy matrices took 58 us a shape)."""
    n = key.shape[0]
    for m in range(n):
        a = 0.0
        b = 0.0
        c = 0.0
        for r in range(n):
            if key[r] != key[m]:
                continue
            c += 1.0
            if r == m:
                continue
            if pos[r] > pos[m]:
                a += 1.0
            elif pos[r] < pos[m]:
                b += 1.0
            else:
                a += 0.5
                b += 0.5
        ahead[m] = a
        behind[m] = b
        same[m] = c


@njit(cache=True)
def _class_shifts(order, dms):
    """`_jittered_miss`' issue order with the rows' classes as a table per dm: `_issue_order`'s first four
    figures, the number of dms, then per dm in ``dms`` (dm, K, then K triples (x, S, weight)): over the rows m
    of the tile with m + dm in it, x = its class's rows after m + those before m + dm + 1 (the re-read row)
    and S = its class's rows, distinct (x, S) pairs with their share of the rows. The per-row figures run a
    few rows' patterns, so a dm's table holds a handful of pairs where the rows number up to 256 (the
    grouped benchmark's re-read sums were 2.4 times slower row by row). Without classes (T = 0) the order
    is returned as it is."""
    rows = int(order[4])
    if rows == 0:
        return order.copy()
    ahead, behind, same = order[5:5 + rows], order[5 + rows:5 + 2 * rows], order[5 + 2 * rows:5 + 3 * rows]
    out = np.empty(5 + dms.shape[0] * (2 + 3 * rows))
    out[:4] = order[:4]
    n = 0
    i = 5
    keys = np.empty(rows, np.float64)
    for q in range(dms.shape[0]):
        dm = int(dms[q])
        lo_m, hi_m = max(0, -dm), min(rows, rows - dm)
        if hi_m <= lo_m:
            continue
        count = hi_m - lo_m
        for m in range(lo_m, hi_m):              # (2 x, S) as one sortable key: x counts halves, S < 2^20 rows
            keys[m - lo_m] = 2.0 * (ahead[m] + behind[m + dm] + 1.0) * 1048576.0 + same[m]
        ordered = np.sort(keys[:count])
        out[i] = dm
        k = 0
        j = 0
        while j < count:
            e = j
            while e < count and ordered[e] == ordered[j]:
                e += 1
            key = ordered[j]
            twice = math.floor(key / 1048576.0)
            base = i + 2 + 3 * k
            out[base] = twice / 2.0
            out[base + 1] = key - twice * 1048576.0
            out[base + 2] = (e - j) / count
            k += 1
            j = e
        out[i + 1] = k
        i += 2 + 3 * k
        n += 1
    out[4] = n
    return out[:i]


@functools.lru_cache(maxsize=4096)
def residency_classes(ctas, sms, cps) -> tuple:
    """((CTAs resident on an SM, share of the CTAs that run so), ...): full waves hold ``cps`` on every
    SM; the last wave's r CTAs go out one an SM a pass, so ceil(r / sms) sit on r - (that - 1) sms SMs
    and one fewer on the others (DESIGN section 3's dispatch; every CTA of a grouped layer runs the same
    k-steps, so waves start together)."""
    per_wave = sms * cps
    full, r = divmod(ctas, per_wave)
    out = {}
    if full:
        out[cps] = full * per_wave
    if r:
        hi = -(-r // sms)
        n_hi = r - (hi - 1) * sms
        out[hi] = out.get(hi, 0) + n_hi * hi
        if hi > 1:
            out[hi - 1] = out.get(hi - 1, 0) + (sms - n_hi) * (hi - 1)
    return tuple((float(k), n / ctas) for k, n in sorted(out.items()) if n)


@memo()
def _window_pixels(layer, kernel, sec, sets, line) -> np.ndarray:
    """win[0, t, d]: one tile's distinct input pixels read from filter position t - d to t - 1 in position
    t's class of sets (`tap_phases`; the dense engine's reuse histogram and window, `_reuse.window_rows`, per
    tile): a re-read d positions after
    the last one sees these in between, where ``d T_m`` rows were assumed (seed 4 #37, 11x11 stride 2
    on 218-wide images: two rows of taps re-read a pixel 22 positions later, after some 650 of the
    tile's pixels, not its whole 2,439; L1 misses +358 %); win[1, t, d]: from t - d to t, both ends
    included (a re-read's window covers the end of the first k-step and the start of the last); win[2, t, d]:
    win[0]'s pixels in every class of sets (the L2 sees them all, `_grouped_model._l2_rereads`)."""
    from ._reuse import reuse_histogram, window_rows
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    tm = min(kernel.tile_m, layer.gemm_m)
    tiles_m = cdiv(layer.gemm_m, tm)
    dense = layer.c * kernel.elem_bytes < sec
    frac = np.full(max(sw, 1), 1.0 if dense else 0.0)
    hist = reuse_histogram(layer.n, layer.h, layer.w, layer.r, layer.s, sh, sw, ph, pw, dh, dw, layer.p, layer.q,
                           tm, tiles_m, frac, 1.0, False)
    rs = layer.r * layer.s
    phase, nphase, _ = tap_phases(layer, kernel.elem_bytes, sets, line)
    win = window_rows(hist, phase, nphase)
    # [1]: the same with position t itself: + its rows whose nearest earlier read is further back than t - d
    out = np.empty((3, rs, rs), np.float64)
    out[0] = win
    out[2] = window_rows(hist, np.zeros(rs, np.int64), 1) if nphase > 1 else win
    seen = np.cumsum(hist[:, 1:], axis=1)            # seen[t, d - 1]: rows of t read again within d
    rows = hist.sum(axis=1)
    out[1, :, 0] = rows
    out[1, :, 1:] = win[:, 1:] + rows[:, None] - seen[:, :rs - 1]
    out *= tm / layer.gemm_m
    if dense and sw > 1:
        # pixels narrower than a sector: the histogram takes a tap's pixel sw C e bytes from the row's previous
        # tap's as a re-read (fractional offsets), so its window counts rows, each sw pixels of the tile's
        # bytes: seed 16 #74 (a 5-channel fp32 stem, stride 4): 4 taps read 64 rows x 80 bytes a CTA, 41 lines,
        # where 65.6 pixels x 20 bytes said 10; its A L1 misses were -73.5 %
        out *= sw
    out.setflags(write=False)
    return out
