"""Strided dgrad's tiles of one place in the grid's sub-problems (DESIGN section 3a), for the schedule
statistics of `_schedule` (Numba): which A window and filter tile a CTA reads (`a_key`, `b_key`), the
share of a sub-problem's filter sectors another reads near the same k-step (`step_overlap`), and how the
dy rows that co-resident tiles of one place read at each k-step overlap (`row_shifts`, `_cover`,
`_in_step`, `_extra_windows`): in step, a later tile reads what an earlier one has just read; out of step,
it adds rows of its own, step by step.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit


@njit(cache=True, inline="always")
def b_key(tm, tn, m_div, bcls):
    """What a CTA's B reads are: its tile_n, or where ``bcls`` is given (strided dgrad: tile_m
    ``m_div`` apart belong to the next sub-problem), its tile_n and its sub-problem's class of filter
    sectors (`_geometry.dgrad_b_classes`)."""
    if bcls is None:
        return tn
    return tn * bcls.shape[0] + bcls[tm // m_div]


@njit(cache=True, inline="always")
def a_key(tm, m_div, bcls):
    """Which A window a CTA's reads fall in, for counting an SM's distinct windows: its tile_m, or where
    ``bcls`` is given (strided dgrad), its tile's place in its sub-problem: every sub-problem reads
    (nearly) all of dy, tile i of each the same rows shifted by its taps' offsets (an earlier slot of
    another sub-problem is an AREP only where its taps read the same rows at every k-step: `_in_step`)."""
    if bcls is None:
        return tm
    return tm % m_div


@njit(cache=True)
def step_overlap(subs, R, S, C, K, eb, tk, width, sec, depth, cls):
    """`_geometry.dgrad_step_overlap`'s table: ``subs`` rows (start_r, start_s, nr, ns, stride_h,
    stride_w) of the loading sub-problems; [f, g] for f, g of one class (``cls``), 0 elsewhere."""
    n = subs.shape[0]
    nblk = min(2, (K + tk - 1) // tk)
    per = 2 * tk                                       # sectors a k-step reads at most (a tap each k)
    tmax = 0
    for f in range(n):
        tmax = max(tmax, nblk * subs[f, 2] * subs[f, 3])
    secs = np.full((n, tmax, per), -1, np.int64)
    cnt = np.zeros((n, tmax), np.int64)
    top = 0
    for f in range(n):
        t = 0
        for blk in range(nblk):
            for i in range(subs[f, 2]):
                r = subs[f, 0] + i * subs[f, 4]
                for j in range(subs[f, 3]):
                    s = subs[f, 1] + j * subs[f, 5]
                    for k in range(blk * tk, min(K, blk * tk + tk)):
                        start = ((k * R + r) * S + s) * C * eb
                        for x in range(start // sec, (start + width - 1) // sec + 1):
                            seen = False
                            for y in range(cnt[f, t]):
                                if secs[f, t, y] == x:
                                    seen = True
                                    break
                            if not seen and cnt[f, t] < per:
                                secs[f, t, cnt[f, t]] = x
                                cnt[f, t] += 1
                                top = max(top, x + 1)
                    t += 1
    out = np.zeros((n, n), np.float64)
    for g in range(n):
        tg = nblk * subs[g, 2] * subs[g, 3]
        # steps of g per sector, in order: CSR
        ptr = np.zeros(top + 1, np.int64)
        for u in range(tg):
            for y in range(cnt[g, u]):
                ptr[secs[g, u, y] + 1] += 1
        for x in range(top):
            ptr[x + 1] += ptr[x]
        fill = ptr[:-1].copy()
        at = np.empty(ptr[top], np.int64)
        for u in range(tg):
            for y in range(cnt[g, u]):
                x = secs[g, u, y]
                at[fill[x]] = u
                fill[x] += 1
        for f in range(n):
            if cls[f] != cls[g]:
                continue
            tf = nblk * subs[f, 2] * subs[f, 3]
            total = 0
            common = 0
            for t in range(tf):
                for y in range(cnt[f, t]):
                    x = secs[f, t, y]
                    total += 1
                    for z in range(ptr[x], ptr[x + 1]):
                        if abs(at[z] - t) <= depth:
                            common += 1
                            break
            out[f, g] = common / total if total else 0.0
    return out


# a shift of `row_shifts` where two tiles read no common line (one of them done, or other lines of the pixels)
NO_OVERLAP = 1e18


@njit(cache=True)
def row_shifts(subs, nblk, tk, eb, line, width, steps):
    """Strided dgrad's tiles of one place, at ``steps`` k-steps t_u = u T / steps of the longest
    sub-problem's T: [f, g, u] = the shift, in dy pixels (rows ``width`` wide), of the rows that sub-problem
    f's taps read at its k-step t_u from those of g's at its own (CTAs that start together run in step);
    NO_OVERLAP where f or g is done, or where their channel blocks lie in other lines of a pixel; [f, f, u] =
    0 while f runs. ``subs`` rows (off_h, off_w, nr, ns) of the loading sub-problems: k-step t reads the
    tile's rows shifted by (off_h - i, off_w - j), tap (i, j) = divmod(t mod (nr ns), ns), channel block
    t div (nr ns), whose line in a pixel is (block tk eb) div ``line``. Seed 1 #292 (11x11 stride 3): starts
    r = 0 and 1 read the same dy rows at every k-step, r = 2 (3 taps, not 4) one filter row off, and
    further off as its channel blocks come sooner."""
    n = subs.shape[0]
    tmax = 1
    for f in range(n):
        tmax = max(tmax, nblk * subs[f, 2] * subs[f, 3])
    steps = min(steps, tmax)
    out = np.full((n, n, steps), NO_OVERLAP, np.float64)
    for u in range(steps):
        t = u * tmax // steps
        for g in range(n):
            taps_g = subs[g, 2] * subs[g, 3]
            if t >= nblk * taps_g:
                continue
            ig, jg = divmod(t % taps_g, subs[g, 3])
            for f in range(n):
                taps_f = subs[f, 2] * subs[f, 3]
                if t >= nblk * taps_f:
                    continue
                if ((t // taps_g) * tk * eb) // line != ((t // taps_f) * tk * eb) // line:
                    continue
                i_f, j_f = divmod(t % taps_f, subs[f, 3])
                out[f, g, u] = ((subs[f, 0] - i_f) - (subs[g, 0] - ig)) * width + (subs[f, 1] - j_f) - (subs[g, 1] - jg)
    return out


@njit(cache=True, inline="always")
def _tile_start(apq, f, place):
    """dy pixel (rows ``apq[-1, 1]`` wide, images ``apq[-1, 0]`` pixels apart) of the first row of
    sub-problem f's tile at ``place``: its dx rows (n, p', q') in f's own P' x Q' grid (``apq[f]``)."""
    return _row_pixel(apq, f, place * apq[-1, 2])


@njit(cache=True, inline="always")
def _row_pixel(apq, f, m):
    """`_tile_start` of GEMM row ``m`` of sub-problem f."""
    n, rem = divmod(m, apq[f, 0] * apq[f, 1])
    return n * apq[-1, 0] + (rem // apq[f, 1]) * apq[-1, 1] + rem % apq[f, 1]


@njit(cache=True, inline="always")
def _tile_rows(apq, f, place):
    """Sub-problem f's tile at ``place`` in its own dx grid (``apq[f]``): (its first image, first grid row p0 and
    its first column q0, last image, last grid row p1 and its last column q1), rows past the batch (``apq[-1, 4]``
    images) left out."""
    tm = apq[-1, 2]
    plane = apq[f, 0] * apq[f, 1]
    last = min(place * tm + tm, apq[-1, 4] * plane) - 1
    n0, r0 = divmod(place * tm, plane)
    n1, r1 = divmod(last, plane)
    p0, q0 = divmod(r0, apq[f, 1])
    p1, q1 = divmod(r1, apq[f, 1])
    return n0, p0, q0, n1, p1, q1


@njit(cache=True, inline="always")
def _image_piece(apq, f, tile, n):
    """The grid rows of the tile (`_tile_rows`) in image n: (p0, q0, p1, q1), p1 < p0 where it has none."""
    n0, p0, q0, n1, p1, q1 = tile
    if n < n0 or n > n1:
        return 0, 0, -1, 0
    if n > n0:
        p0, q0 = 0, 0
    if n < n1:
        p1, q1 = apq[f, 0] - 1, apq[f, 1] - 1
    return p0, q0, p1, q1


@njit(cache=True, inline="always")
def _row_spans(apq, f, p0, q0, p1, q1, y):
    """The dy columns that the tile (grid rows p0 .. p1, `_tile_rows`) reads in dy row y: at most two
    disjoint spans (lo1, hi1, lo2, hi2; hi < lo where none), clipped to dy's width. Grid row p reads dy rows
    p + first - taps_h + 1 .. p + first (``apq[f, 2]``, ``apq[f, 4]``), and its columns q read q + first -
    taps_w + 1 .. q + first."""
    Q = apq[-1, 1]
    lo = max(p0, y - apq[f, 2])
    hi = min(p1, y - apq[f, 2] + apq[f, 4] - 1)
    if hi < lo:
        return 0, -1, 0, -1
    a = q0 if lo == p0 else 0                          # the columns of grid rows lo .. hi: a run from the
    b = q1 if hi == p1 else apq[f, 1] - 1              # first row's start to the last row's end, or two pieces
    reach = apq[f, 3] - apq[f, 5] + 1
    if hi > lo + 1 or (hi == lo + 1 and (lo != p0 or hi != p1 or q1 + 1 >= q0)):
        return max(0, reach), min(Q - 1, apq[f, 1] - 1 + apq[f, 3]), 0, -1
    if hi == lo:
        return max(0, a + reach), min(Q - 1, b + apq[f, 3]), 0, -1
    # two rows, the first from q0 to the end, the second from 0 to q1 < q0 - 1
    lo2, hi2 = max(0, q0 + reach), min(Q - 1, apq[f, 1] - 1 + apq[f, 3])
    lo1, hi1 = max(0, reach), min(Q - 1, q1 + apq[f, 3])
    if hi1 + 1 >= lo2:
        return lo1, hi2, 0, -1
    return lo1, hi1, lo2, hi2


@njit(cache=True, inline="always")
def _meet(a0, a1, b0, b1):
    return max(0, min(a1, b1) - max(a0, b0) + 1)


@njit(cache=True, inline="always")
def _insert(merged, nm, lo, hi):
    """Insert the span [lo, hi] into the sorted, disjoint spans ``merged[:nm]``, joining those it meets or
    touches; returns their new number."""
    i = 0
    while i < nm and merged[i, 1] < lo - 1:
        i += 1
    j = i
    while j < nm and merged[j, 0] <= hi + 1:
        lo = min(lo, merged[j, 0])
        hi = max(hi, merged[j, 1])
        j += 1
    # spans i .. j - 1 join into one at i; the rest shift
    shift = (j - i) - 1
    if shift > 0:
        for k in range(j, nm):
            merged[k - shift, 0], merged[k - shift, 1] = merged[k, 0], merged[k, 1]
    elif shift < 0:
        for k in range(nm - 1, i - 1, -1):
            merged[k + 1, 0], merged[k + 1, 1] = merged[k, 0], merged[k, 1]
    merged[i, 0], merged[i, 1] = lo, hi
    return nm - shift


@njit(cache=True)
def window_layers(apq, m_div, tm, others, labels, n, out):
    """Tile_m ``tm``'s dy pixels (sub-problem tm // m_div, place tm % m_div) by the lowest label among the tiles
    ``others[:n]`` (tile_m values, -1 none; ``labels[:n]`` ascending, below ``out``'s length) that read them:
    ``out[l]`` the share whose lowest is l (what the tiles of label l read and those of lower labels did not),
    counted image by image and dy row by dy row (`_row_spans`). Labels are how far back a tile ran on the SM
    (`_schedule._strided_covers`), so ``out`` says how much of this tile's window each earlier wave left for it to
    find. Where several earlier CTAs of other sub-problems and places read parts of one window, the part they
    leave is what this one fetches (seed 9 #65, 5x5 stride 4, 4 CTAs an SM: sub-problems of 56 and 55 dx columns
    place their tiles a few rows apart, more the later the place, so an SM fetches 951 .. 2,322 sectors over its
    7 CTAs, not one window; this count gives each SM's exactly)."""
    out[:] = 0.0
    f = tm // m_div
    mine = _tile_rows(apq, f, tm % m_div)
    rows = np.empty((max(n, 1), 8), np.int64)
    m = 0
    for i in range(n):
        if others[i] < 0:
            continue
        g = others[i] // m_div
        t = _tile_rows(apq, g, others[i] % m_div)
        if t[3] < mine[0] or t[0] > mine[3]:
            continue
        rows[m, 0] = g
        rows[m, 1], rows[m, 2], rows[m, 3], rows[m, 4], rows[m, 5], rows[m, 6] = t
        rows[m, 7] = labels[i]
        m += 1
    merged = np.empty((2 * m + 1, 2), np.int64)
    P = apq[-1, 3]
    total = 0
    for img in range(mine[0], mine[3] + 1):
        p0, q0, p1, q1 = _image_piece(apq, f, mine, img)
        for y in range(max(0, p0 + apq[f, 2] - apq[f, 4] + 1), min(P - 1, p1 + apq[f, 2]) + 1):
            a0, a1, a2, a3 = _row_spans(apq, f, p0, q0, p1, q1, y)
            total += max(0, a1 - a0 + 1) + max(0, a3 - a2 + 1)
            nm = 0
            seen = 0
            i = 0
            while i < m:
                lab = rows[i, 7]
                while i < m and rows[i, 7] == lab:
                    g = rows[i, 0]
                    t = (rows[i, 1], rows[i, 2], rows[i, 3], rows[i, 4], rows[i, 5], rows[i, 6])
                    g0, gq0, g1, gq1 = _image_piece(apq, g, t, img)
                    i += 1
                    if g1 < g0:
                        continue
                    b0, b1, b2, b3 = _row_spans(apq, g, g0, gq0, g1, gq1, y)
                    if b1 >= b0:
                        nm = _insert(merged, nm, b0, b1)
                    if b3 >= b2:
                        nm = _insert(merged, nm, b2, b3)
                met = 0
                for k in range(nm):
                    met += _meet(merged[k, 0], merged[k, 1], a0, a1) + _meet(merged[k, 0], merged[k, 1], a2, a3)
                out[lab] += met - seen
                seen = met
    if total:
        out /= total


@njit(cache=True, inline="always")
def _cover(ashift, apq, f, g, u, place):
    """The share of g's dy lines at k-step u (`row_shifts`) that f's tile at the same ``place`` reads then:
    two shifts of a tile of tm rows overlap in tm - |shift| rows, the shift counting where each tile's
    rows start in its own dx grid (sub-problems with other Q' drift apart along the grid)."""
    sh = ashift[f, g, u]
    if sh >= NO_OVERLAP:
        return 0.0
    d = abs(sh + _tile_start(apq, f, place) - _tile_start(apq, g, place))
    tm = apq[-1, 2]
    return 1.0 - d / tm if d < tm else 0.0


@njit(cache=True, inline="always")
def _in_step(ashift, apq, f, g, place):
    """Whether sub-problem f's tile at ``place`` reads g's dy lines at each of g's k-steps: their tiles
    start at one pixel and run in grids of one width (and height, where the tile crosses an image)."""
    m = place * apq[-1, 2]
    if apq[f, 1] != apq[g, 1]:
        return False
    if apq[f, 0] != apq[g, 0] and (m // (apq[f, 0] * apq[f, 1]) != (m + apq[-1, 2] - 1) // (apq[f, 0] * apq[f, 1])
                                   or m // (apq[g, 0] * apq[g, 1]) != (m + apq[-1, 2] - 1) // (apq[g, 0] * apq[g, 1])):
        return False
    for u in range(ashift.shape[2]):
        if ashift[g, g, u] < NO_OVERLAP and _cover(ashift, apq, f, g, u, place) < 1.0:
            return False
    return True


@njit(cache=True)
def _extra_windows(k, tm_, m_div, bcls, ashift, apq, hist):
    """Strided dgrad: the SM's A lines beyond one window per running place, over the k-steps of
    ``ashift`` (`row_shifts`): at each, every running slot whose place an earlier running slot holds adds
    1 less the larger share such a slot covers (`_cover`); ``hist`` [b] = the share of k-steps that add
    b / 4 windows. Per k-step, not on average: the union of two tiles one filter row apart changes from step
    to step, and the L1's LRU step is judged on each. (Where no slot shares another's place, hist[0] = 1:
    the caller skips it then, `_schedule.sm_config_summary`.)"""
    hist[:] = 0.0
    steps = ashift.shape[2]
    for u in range(steps):
        extra = 0.0
        for s in range(k):
            g = tm_[s] // m_div
            if ashift[g, g, u] >= NO_OVERLAP:
                continue
            held = False
            cover = 0.0
            for s2 in range(s):
                f = tm_[s2] // m_div
                if a_key(tm_[s2], m_div, bcls) != a_key(tm_[s], m_div, bcls) or ashift[f, f, u] >= NO_OVERLAP:
                    continue
                held = True
                if tm_[s2] == tm_[s]:
                    cover = 1.0
                cover = max(cover, _cover(ashift, apq, f, g, u, tm_[s] % m_div))
            if held:
                extra += 1.0 - cover
        hist[min(hist.shape[0] - 1, int(4.0 * extra + 0.5))] += 1.0 / steps
