"""Within-CTA input reuse across filter positions (Numba; loops over R*S k-step pairs only)."""
from __future__ import annotations

import math

import numpy as np
from simcore._jit import njit

from ._counts import _gcd, _ramp, _range_1d
from ._l2 import PATTERN_N, PATTERN_X_MAX, l2_miss_window

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py and _l2.py. tests/test_jit_deps.py checks this digest of them: updating the
# digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "754720449672e8a1"


@njit(cache=True)
def _overlap_1d(lo, hi, shift, size):
    """|{x in [lo, hi]: 0 <= x + shift <= size - 1}| (shift may be fractional)."""
    a = max(float(lo), -shift)
    b = min(float(hi), size - 1 - shift)
    if b < a:
        return 0.0
    return b - a + 1.0


@njit(cache=True)
def _tap(t, RS, S, reverse):
    """(r, s) of the filter position at k-step order t (reversed: dgrad)."""
    tt = RS - 1 - t if reverse else t
    return tt // S, tt % S


@njit(cache=True)
def _tap_box(t, RS, S, reverse, N, P, H, sh, ph, dh, Q, W, sw, pw, dw):
    """(r, s, output rows plo..phi and columns qlo..qhi whose tap t lies in the image, their count x N)."""
    r, s = _tap(t, RS, S, reverse)
    plo, phi = _range_1d(P, H, sh, ph, dh, r)
    qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
    return r, s, plo, phi, qlo, qhi, N * max(0, phi - plo + 1) * max(0, qhi - qlo + 1)


@njit(cache=True)
def straddle_share(L, dm, tile_m):
    """The share of an image's row pairs (m, m + dm), both in the image (L = P Q GEMM rows), that a tile
    boundary separates. Boundaries fall at multiples of tile_m, so in an image at offsets that are
    multiples of g = gcd(tile_m, L), each as often; a boundary at offset o separates min(o, dm, L - o,
    L - dm) pairs, none at the image's start (those pairs leave the image). Offsets dense in the image
    give dm / tile_m; tiles of whole images (L | tile_m) none (seed 2 #73: 256-row tiles of 16x16 images,
    a 7x1 filter: taken at dm / tile_m, a tap 3 rows of 16 on lost 19 % of its re-reads, and A's L1
    misses came out +31 %)."""
    if dm <= 0.0:
        return 0.0
    if dm >= L:
        return 1.0
    g = _gcd(tile_m, L)
    n = L // g
    D = min(dm, L - dm)
    k1 = int(D // g)                                  # offsets k g <= D: min is k g
    k3 = max(int(math.ceil((L - D) / g)), k1 + 1)     # offsets k g >= L - D: min is L - k g
    m3 = max(0, n - k3)
    middle = max(0, n - (k1 + 1) - m3)
    total = g * k1 * (k1 + 1) / 2.0 + g * m3 * (m3 + 1) / 2.0 + D * middle
    return min(1.0, (L / tile_m) * (total / n) / (L - dm))


@njit(cache=True)
def _pair_cover(N, P, Q, plo, phi, qlo, qhi, dp, dq, tile_m, tiles_m, M, edge):
    """Rows of a tap's box whose output shifted by (dp, dq) is in the box too, times the chance that the
    pair stays in one CTA (1 - edge |dm| / tile_m, dm the GEMM rows between them; 0 beyond a tile)."""
    dm = dp * Q + dq
    tf = 1.0
    if tiles_m > 1:
        tf = 1.0 - edge * straddle_share(P * Q, abs(dm), tile_m)
        if abs(dm) >= min(tile_m, M):
            tf = 0.0
    if tf <= 0.0:
        return 0.0
    return N * _overlap_1d(plo, phi, dp, P) * _overlap_1d(qlo, qhi, dq, Q) * tf


@njit(cache=True)
def tile_pixel_stamps(picks, stands, tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, reverse, gaps):
    """(the distinct in-image input pixels each tile of ``picks`` reads over every filter position; with
    ``gaps``, gap[g]: share of the (pixel, tile) pairs whose pixel's last read in a channel block and its
    first in the next lie g whole rounds apart ((R S - 1 - last position) + first position, in the sweep's
    order), each tile standing for ``stands`` tiles). Each tile is swept position by position, every pixel
    its rows read stamped (with its first and last position). A 7x1 filter on 32-row tiles reads a pixel
    at two consecutive positions, 5 rounds before the next block's first read; taken from the first and
    last touches as if independent, a third of them came out 0 or 1 rounds apart. A tile's rows are
    decoded once, not at every position (mobilenet_v2, resnext50_32x4d and efficientnet_b0: 265 -> 60 us
    a layer's 24 tiles)."""
    RS = R * S
    pq = P * Q
    most = (tm - 1) // pq + 2                     # images a tile's rows can span
    stamp = np.zeros(most * H * W, np.int64)
    first = np.zeros(most * H * W if gaps else 1, np.int64)
    last = np.zeros(most * H * W if gaps else 1, np.int64)
    touched = np.empty(min(tm * RS, most * H * W) if gaps else 1, np.int64)
    gap = np.zeros(2 * RS - 1, np.float64)
    counts = np.zeros(picks.shape[0], np.int64)
    y0 = np.empty(tm, np.int64)                   # a row's first tap's input row, column, image base
    x0 = np.empty(tm, np.int64)
    base = np.empty(tm, np.int64)
    for i in range(picks.shape[0]):
        m0 = picks[i] * tm
        rows = min(m0 + tm, M) - m0
        n0 = m0 // pq
        for j in range(rows):
            m = m0 + j
            n = m // pq
            p = (m - n * pq) // Q
            y0[j] = p * sh - ph
            x0[j] = (m - n * pq - p * Q) * sw - pw
            base[j] = (n - n0) * H
        mark = i + 1
        count = 0
        for t in range(RS):
            r, s = _tap(t, RS, S, reverse)
            for j in range(rows):
                y = y0[j] + r * dh
                x = x0[j] + s * dw
                if y < 0 or y >= H or x < 0 or x >= W:
                    continue
                k = (base[j] + y) * W + x
                if stamp[k] != mark:
                    stamp[k] = mark
                    if gaps:
                        first[k] = t
                        touched[count] = k
                    count += 1
                if gaps:
                    last[k] = t
        counts[i] = count
        if gaps:
            for j in range(count):
                k = touched[j]
                gap[RS - 1 - last[k] + first[k]] += stands[i]
    total = 0.0                                   # in order: numpy's pairwise sum (interpreted tier) is
    for g in range(gap.shape[0]):                 # not Numba's, and the tiers must agree to the last bit
        total += gap[g]
    if total > 0.0:
        gap /= total
    return counts, gap


@njit(cache=True)
def reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tile_m, tiles_m, frac_w, edge, reverse):
    """hist[t, d] (d = 1 .. R*S-1): valid A row accesses at filter position t (= r*S + s) of one
    channel block whose nearest earlier access to the same data (same CTA, same channel block) was
    d filter positions before; hist[t, 0]: first touches. Row pairs are matched by the shift (dp, dq) of filter positions; the pair stays in the
    CTA with probability 1 - edge*|dm|/tile_m (tile edges). ``frac_w[k]`` (length sw): the share of a
    row's data that a column shift leaving k = ddw mod sw != 0 still reaches (fractional dq): 1 where
    consecutive rows of an output row fall in the same or adjacent sectors; `line_share` for the
    lines of wider pixels (`a_window`'s line-level histogram); 0: no reuse off the stride grid.
    ``reverse``: the k-steps visit the filter positions in reverse order (position t is (r, s) of
    index R*S - 1 - t; dgrad)."""
    RS = R * S
    hist = np.zeros((RS, RS), np.float64)
    M = N * P * Q
    for t in range(RS):
        r, s, plo, phi, qlo, qhi, rows = _tap_box(t, RS, S, reverse, N, P, H, sh, ph, dh, Q, W, sw, pw, dw)
        if rows == 0:
            continue
        cum = 0.0
        for d in range(1, t + 1):
            r2, s2 = _tap(t - d, RS, S, reverse)
            ddh = (r - r2) * dh
            ddw = (s - s2) * dw
            if ddh % sh:
                continue
            wgt = 1.0
            if ddw % sw == 0:
                dq = float(ddw // sw)
            else:
                wgt = frac_w[ddw % sw]
                if wgt <= 0.0:
                    continue
                dq = ddw / sw
            cov = _pair_cover(N, P, Q, plo, phi, qlo, qhi, ddh // sh, dq, tile_m, tiles_m, M, edge) * wgt
            if cov > rows:
                cov = rows
            if cov > cum:
                hist[t, d] += cov - cum
                cum = cov
        hist[t, 0] += rows - cum
    return hist


def line_share(pitch, width, sw, LINE, SEC):
    """share[k] (k = 1 .. sw - 1): the fraction of a row access's sectors (``width`` bytes of one input
    pixel: its channel block, nhwc) whose line a tap k columns off the pixel's stride grid touches too.
    Rows of a tap read every sw-th column, so a tap whose column shift leaves k mod sw reads the
    columns k before and sw - k after each reused pixel, ``pitch`` bytes per column; where the pitch
    is not a whole number of lines, those neighbours' bytes share the access's end lines, and reading
    them renews the line's LRU age without a sector reuse. Averaged over the access's start offsets
    within a line (multiples of gcd(pitch, width, LINE)); all 0 where ``pitch`` is a multiple of
    ``LINE`` or narrower than a sector (there the histogram already counts fractional shifts)."""
    share = np.zeros(max(sw, 1), np.float64)
    if pitch % LINE == 0 or pitch < SEC or sw < 2:
        return share
    step = math.gcd(math.gcd(pitch, width), LINE)
    for k in range(1, sw):
        total = 0.0
        starts = range(0, LINE, step)
        for o in starts:
            first, last = o // SEC, (o + width - 1) // SEC
            lines = set()
            for off in (-k, sw - k):
                a = o + off * pitch
                lines.update(range(a // LINE, (a + width - 1) // LINE + 1))
            renewed = sum(1 for x in range(first, last + 1) if (x * SEC) // LINE in lines)
            total += renewed / (last - first + 1)
        share[k] = total / len(starts)
    return share


@njit(cache=True)
def refresh_matrix(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tile_m, tiles_m, edge, reverse, share):
    """ref[t, u] (u < t, k-step order): the fraction of position t's A row accesses whose lines position
    u touches *without* re-reading their sectors: taps in the same input row (ddh a multiple of sh)
    whose column shift is off the stride grid read the neighbouring pixels, which share the pixel's
    end lines with fraction ``share[ddw mod sw]`` (`line_share`). The rows overlap as in
    `reuse_histogram` (fractional dq, tile edges). Such a touch renews the line's LRU age, so a sector
    reuse further back survives if each stretch between touches is short (`miss_rows`)."""
    RS = R * S
    ref = np.zeros((RS, RS), np.float64)
    M = N * P * Q
    for t in range(RS):
        r, s, plo, phi, qlo, qhi, rows = _tap_box(t, RS, S, reverse, N, P, H, sh, ph, dh, Q, W, sw, pw, dw)
        if rows == 0:
            continue
        for u in range(t):
            r2, s2 = _tap(u, RS, S, reverse)
            ddh = (r - r2) * dh
            ddw = (s - s2) * dw
            if ddh % sh:
                continue
            k = ddw % sw
            if k == 0 or share[k] == 0.0:
                continue
            cov = _pair_cover(N, P, Q, plo, phi, qlo, qhi, ddh // sh, ddw / sw, tile_m, tiles_m, M, edge)
            ref[t, u] = min(1.0, cov / rows) * share[k]
    return ref


@njit(cache=True)
def window_rows(hist, phase, nphase):
    """win[t, d]: distinct A rows (in row-access units of one filter position) of the LRU window of
    a reuse at position t from t - d that fall in the reused line's L1 set class: rows(t - d) + the
    rows each later position u < t adds (those whose nearest predecessor is further back than
    u - (t - d)), counting only positions u whose lines share the set class of t (``phase[u] ==
    phase[t]``; a reuse's two positions always do). O(nphase (R*S)^2) via prefix sums along diagonals
    of the cumulative histogram."""
    RS = hist.shape[0]
    rows = np.zeros(RS, np.float64)
    cum = np.zeros((RS, RS), np.float64)
    for u in range(RS):
        acc = 0.0
        for j in range(RS):
            rows[u] += hist[u, j]
        for j in range(1, RS):
            acc += hist[u, j]
            cum[u, j] = acc
    win = np.zeros((RS, RS), np.float64)
    diag = np.zeros((RS, RS), np.float64)
    for c in range(nphase):
        for a in range(RS):
            acc = 0.0
            for j in range(1, RS - a):
                u = a + j
                if phase[u] == c:
                    acc += rows[u] - cum[u, j]
                diag[a, j] = acc
        for t in range(RS):
            if phase[t] != c:
                continue
            for d in range(1, t + 1):
                win[t, d] = (rows[t - d] if phase[t - d] == c else 0.0) + diag[t - d, d - 1]
    return win


@njit(cache=True)
def b_rounds(d, bfrac):
    """The filter lines of d consecutive filter positions of one channel block, in rounds (a round: one
    position's lines, ``bfrac`` = a position's filter bytes over a line, per line of a round): each position
    after the first adds bfrac of a round where its bytes continue the previous position's line, at most d.
    (d - 1) bfrac + 1 is the mean over the filter rows' alignments to the line, exactly
    (tests/test_b_rounds.py); d bfrac + 1 counted one position too many (seed 2 #88: C 48 fp16, the next
    channel block's re-read 25 positions on, 632 filter lines for 608, its hits judged on the ramp at 1.02)."""
    rounds = (d - 1.0) * bfrac + 1.0
    return d if rounds > d else rounds


@njit(cache=True)
def _window_x(a_lines, d, nsa, other, bfrac, extra, ways):
    """An L1 window's lines in the reused line's set, over the ways: ``a_lines`` distinct A lines over
    ``nsa`` sets, the B lines of `b_rounds` (d, bfrac) rounds (``other`` a round), ``extra`` lines."""
    return (a_lines / nsa + b_rounds(d, bfrac) * other + extra) / ways


@njit(cache=True)
def miss_rows(hist, win, lines_a_t, scale_a, other, nsa, ways, lo, hi, dscale, bfrac, extra,
              l2cls, a_scale, l2_ways, l2_cliff, ref, l2_tab, corr, own, rel, na, b_ratio, nb, a_rounds):
    """Rows of `hist` that miss: first touches, plus reuses whose LRU distance reaches the ways
    (linear ramp lo..hi).

    Distance of a reuse at filter position t from t - d, in lines of the reused line's set:
    A: the distinct A lines of the window, scale_a * win[t, d] (`window_rows`; scale_a = A lines
    per row access of the co-resident CTAs), over ``nsa`` sets (nhwc, dscale == 1; otherwise
    d * dscale * lines_a_t[t], or ``a_rounds[0, d]`` rounds' worth where it has d: nchw, whose taps of one input
    row share lines across k-steps, `_window.nchw_window_rounds`); B (``other``: B lines per round in the
    set; nchw: ``a_rounds[1, d]`` rounds' worth): `b_rounds` (d, bfrac) = min(d, (d - 1) bfrac + 1)
    rounds' worth (filter rows of consecutive filter positions share lines when C * elem < 128 B;
    bfrac = C * elem / 128 / lines per filter row and round), plus ``extra`` lines (a co-resident
    CTA with the same filters that steps before this one in the round brings round t's filter
    lines into the window).

    ``ref`` (`refresh_matrix`, nhwc): positions in between that touch the reused line without its
    sector renew its LRU age, in the L1 and in the L2; the reuse then hits if every stretch between the
    line's touches stays below the ways (`_chain_hit`).

    Also returns the rows whose reuse misses L1 *and* L2 (nhwc): in lockstep every CTA of the
    wave touches its own window's lines in the meantime, L2 distance / capacity =
    l2a * (A lines of the window) + l2b * d (B lines per round of the wave), in lines (L2 LRU is
    per line: an A access fills one sector of a line); miss probability `_l2.l2_miss_window` (the cliff
    of the window's own line pattern, ``l2_tab``, where its rows skip lines). One term per class of waves
    (``l2cls`` rows, `_schedule.l2_classes`: l2a = column 0 x ``a_scale``, the A lines at most column 1, l2b
    = column 2), summed with the weights in column 3.

    The reuse one position back (d = 1, nhwc, where ``corr`` has rows: `_issue_order`) is judged on its
    counted window with the LRU step instead, at every combination of the quantiles of ``corr`` (the
    CTA's own rows, shifted by the reads' places in their k-steps; ``own``: its lines per row of
    ``lines_a_t``), ``rel`` (the tile's valid rows over the layer's) and ``b_ratio`` (the filter lines in
    the reused line's set, for ``nb`` co-resident columns); ``na``: the co-resident A windows.

    Returns (missed rows, rows missed in L1 and L2, the missed rows that are reuses one position back)."""
    RS = hist.shape[0]
    total = 0.0
    total2 = 0.0
    one = 0.0                    # the part of ``total`` from reuses one position back
    union = dscale == 1.0
    chain = np.empty(RS, np.float64)
    for t in range(RS):
        total += hist[t, 0]
        for d in range(1, t + 1):
            hv = hist[t, d]
            if hv == 0.0:
                continue
            if union:
                ua = scale_a * win[t, d]
                x = _window_x(ua, d, nsa, other, bfrac, extra, ways)
                if d == 1 and corr.shape[0] > 1:
                    # the reads' places in their k-steps and the tile's own valid rows (`_issue_order`):
                    # the LRU step at each quantile (counted, not fitted)
                    nq = corr.shape[1]
                    nv = rel.shape[1]
                    own_t = lines_a_t[t - d] * own
                    ua_own = ua / na
                    nr = b_ratio.shape[1]
                    kb = min(b_ratio.shape[0], max(1, int(nb + 0.5))) - 1
                    # a miss iff the window's lines in the set pass the ways: A's own lines above a
                    # threshold per filter-line quantile (equal quantiles counted once, with their weight)
                    pq = 0.0
                    q = 0
                    while q < nq:
                        wq = 1
                        while q + wq < nq and corr[t, q + wq] == corr[t, q]:
                            wq += 1
                        own_q = max(0.0, ua_own + own_t * corr[t, q])
                        v = 0
                        while v < nv:
                            wv = 1
                            while v + wv < nv and rel[t - d, v + wv] == rel[t - d, v]:
                                wv += 1
                            uq = ua - ua_own + own_q * rel[t - d, v]
                            for j in range(nr):
                                if _window_x(uq, d, nsa, other * b_ratio[kb, j], bfrac, extra, ways) > 1.0:
                                    pq += wq * wv
                            v += wv
                        q += wq
                    if pq == 0.0:
                        continue
                    renewed = ref[t, t - d + 1:t].any()
                    if not renewed:
                        pm = hv * pq / (nq * nv * nr)
                        total += pm
                        one += pm
                        if l2cls[0, 0] > 0:
                            total2 += pm * _class_l2_miss(l2cls, ua, a_scale, d, l2_ways, l2_cliff, l2_tab)
                        continue
            else:
                ua = 0.0
                if d < a_rounds.shape[1]:
                    x = (a_rounds[0, d] * lines_a_t[t] / nsa + a_rounds[1, d] * other + extra) / ways
                else:
                    x = (d * dscale * (lines_a_t[t] / nsa + other) + extra) / ways
            if x <= lo:
                continue
            renewed = union and ref[t, t - d + 1:t].any()
            if renewed:
                pm = hv * (1.0 - _chain_hit(ref, t, d, win, scale_a, nsa, other, bfrac, extra, ways, lo, hi,
                                            0.0, 0.0, l2_ways, l2_cliff, l2_tab, False, chain, 0.0))
            elif x >= hi:
                pm = hv
            else:
                pm = hv * (x - lo) / (hi - lo)
            total += pm
            if d == 1:
                one += pm
            if union and l2cls[0, 0] > 0:
                if renewed:
                    for c in range(l2cls.shape[0]):
                        total2 += l2cls[c, 3] * pm * (1.0 - _chain_hit(
                            ref, t, d, win, scale_a, nsa, other, bfrac, extra, ways, lo, hi, l2cls[c, 0] * a_scale,
                            l2cls[c, 2], l2_ways, l2_cliff, l2_tab, True, chain, l2cls[c, 1]))
                else:
                    total2 += pm * _class_l2_miss(l2cls, ua, a_scale, d, l2_ways, l2_cliff, l2_tab)
    return total, total2, one


@njit(cache=True)
def halo_misses(x, rows, tile_lines, l2cls, l2_ways, l2_cliff, l2_tab):
    """The first touches of a CTA that an adjacent tile of its wave read d positions before (``x[t, d]``,
    `_window._halo_histogram`) and that miss the L2: in lockstep, each busy tile reads its window of
    those d positions (``rows[t, d]`` rows of ``tile_lines`` lines) in between, plus d rounds of the
    wave's B lines; per class of waves (``l2cls`` rows, `_schedule.l2_classes`: distinct tiles, the wave's
    distinct A lines and its B lines a round, each over the L2's lines, and the class's weight), as
    `l1_configs`'s within-CTA term judges the same window. The tiles' windows overlap where the filter
    reaches far (an 11x11 stem's rows are read by five tiles): their A lines are at most the wave's."""
    total = 0.0
    RS = x.shape[0]
    for t in range(RS):
        for d in range(1, t + 1):
            hv = x[t, d]
            if hv <= 0.0:
                continue
            total += hv * _class_l2_miss(l2cls, tile_lines * rows[t, d], 1.0, d, l2_ways, l2_cliff, l2_tab)
    return total


@njit(cache=True, inline="always")
def _class_l2_miss(l2cls, a_lines, a_scale, d, l2_ways, l2_cliff, l2_tab):
    """A window of ``a_lines`` A lines (x ``a_scale``) and d rounds against the L2, per class of waves of
    ``l2cls`` (`_schedule.l2_classes`): the classes' miss probabilities, summed with their weights; a
    class's A lines at most the wave's distinct ones. Optional columns 4 and 5: the share of tiles with
    same-round followers and the window's shift for them (`model._predict_gemm`); columns 6 on: the windows of
    1, 2, .. k-steps counted with their filter lines where they land (`_joint_l2.joint_columns`)."""
    total = 0.0
    # (columns 6 on: PATTERN_N a window of 1, 2, .. k-steps)
    joint = 1 <= d and 6 + d * PATTERN_N <= l2cls.shape[1]
    first = 6 + (d - 1) * PATTERN_N
    for c in range(l2cls.shape[0]):
        xa = min(a_lines * (l2cls[c, 0] * a_scale), l2cls[c, 1])
        # d k-steps back: A's lines at xa on the table of the rounds' filter lines where they land (`_joint_l2`),
        # within the table; past it, or without one, the pattern's cliff at A's and the filter's lines together
        if joint and xa < PATTERN_X_MAX:
            x, tab = xa, l2cls[c, first:first + PATTERN_N]
        else:
            x, tab = xa + d * l2cls[c, 2], l2_tab
        miss = l2_miss_window(x, l2_ways, l2_cliff, tab)
        if l2cls.shape[1] > 5 and l2cls[c, 4] > 0.0:
            # a shared tile (share column 4): its last same-round follower read the line after this CTA, so
            # the window is short by the round's lines between its copies (column 5, `_followers`)
            miss = ((1.0 - l2cls[c, 4]) * miss
                    + l2cls[c, 4] * l2_miss_window(max(0.0, x - l2cls[c, 5]), l2_ways, l2_cliff, tab))
        total += l2cls[c, 3] * miss
    return total


@njit(cache=True)
def _chain_hit(ref, t, d, win, scale_a, nsa, other, bfrac, extra, ways, lo, hi, l2a, l2b, l2_ways, l2_cliff,
               l2_tab, l2, alive, l2u):
    """Hit probability of a sector reuse at position t from t - d whose line positions u in between
    touch with probability ref[t, u] (independently): the line survives each stretch v -> u between
    touches with the hit probability of that stretch's own window, as `miss_rows` judges a whole
    window: in the L1 (``l2`` False) its distinct A lines win[u, u - v] over ``nsa`` sets and the B lines
    of u - v rounds; in the L2 (``l2`` True; the neighbours' sectors are new to the L1, so their
    accesses reach the L2 and renew the line there too) the wave's A lines and u - v rounds of its B
    lines. alive[v]: probability that the line's last touch so far was at v and it is still held
    (scratch, length >= R*S)."""
    for v in range(t - d, t + 1):
        alive[v] = 0.0
    alive[t - d] = 1.0
    for u in range(t - d + 1, t + 1):
        rho = 1.0 if u == t else ref[t, u]
        if rho <= 0.0:
            continue
        reach = 0.0
        for v in range(t - d, u):
            if alive[v] == 0.0:
                continue
            g = u - v
            if l2:
                keep = 1.0 - l2_miss_window(min(scale_a * win[u, g] * l2a, l2u) + g * l2b, l2_ways, l2_cliff,
                                            l2_tab)
            else:
                keep = _ramp(_window_x(scale_a * win[u, g], g, nsa, other, bfrac, extra, ways), lo, hi)
            reach += alive[v] * keep
            alive[v] *= 1.0 - rho
        alive[u] = reach * rho
    return alive[t]


@njit(cache=True)
def window_span(fwd, back):
    """span[t] = (first touches of the positions before round t in ``fwd``'s order + those after it,
    from ``back``, the same histogram swept the other way) / the window's distinct rows."""
    n = fwd.shape[0]
    cum_f = np.zeros(n + 1, np.float64)
    cum_b = np.zeros(n + 1, np.float64)
    for t in range(n):
        cum_f[t + 1] = cum_f[t] + fwd[t, 0]
        cum_b[t + 1] = cum_b[t] + back[t, 0]
    span = np.ones(n, np.float64)
    if cum_f[n] <= 0.0:
        return span
    for t in range(n):
        # before t: fwd steps 0 .. t-1; after t: back steps 0 .. n-2-t (positions t+1 .. n-1)
        span[t] = (cum_f[t] + cum_b[n - 1 - t]) / cum_f[n]
    return span


@njit(cache=True)
def _life_hit(a_life, b_life, a_prev, b_prev, span, cap, lo, hi, fb=1.0):
    """Mean over rounds t of the hit probability of a reuse one CTA lifetime back, over ``cap`` (sets x
    ways): the lines in between are the previous occupant's after round t, read beside its own wave's
    co-residents (A lines a_prev, B lines b_prev a lifetime), and this CTA's before t, beside its wave's
    (a_life, b_life); A x span[t]. The two differ in a partial last wave: seed 2 #52 (5 CTAs an SM, then
    one) counted the last wave's lone CTA's lifetime and found the previous wave's two filter slices,
    which overflow the L1, still there. ``fb``: B's lines weigh that much more where the judged line is a filter line
    whose lifetime sets are fewer than the lifetime's (`l1_configs`' ``fb_set``)."""
    total = 0.0
    n = span.shape[0]
    for t in range(n):
        before = (t + 0.5) / n
        a = a_life * before + a_prev * (1.0 - before)
        b = b_life * before + b_prev * (1.0 - before)
        total += _ramp((a * span[t] + fb * b) / cap, lo, hi)
    return total / n


@njit(cache=True, inline="always")
def _in_class_rounds(d, p, rpl):
    """The d rounds after a line's last read, as rounds spread over every set: where consecutive k-steps walk
    ``p`` classes of sets, ``rpl`` k-steps a line, only the rounds of the line's own class meet it, their lines in
    1 / p of the sets (p of them per such round). d itself where p is 1."""
    if p <= 1.0:
        return d
    period = p * rpl
    full = math.floor(d / period)
    rest = d - full * period
    return p * (full * rpl + min(rpl, max(0.0, rest - (p - 1.0) * rpl)))


@njit(cache=True)
def l1_configs(hist, phase, nphase, rows_t, cfg, mcls, ncls, M, R, S, tm, tn, ksteps, lpr_a, lpw_a, lpr_b,
               nsa, nsb, nmax, ways, lo, hi, dscale, share_blk, share_b_blk, reuse_b1, lpm_a, b_lines_avg,
               b_slice_avg, ns_life, bfrac, l2cls, l2_ways, l2_cliff, span, ref, hist_line, l2_tab, gap_p, corr, rel,
               b_ratio, a_rounds, b_gaps, l2_scale=1.0, b_hold=0.0, b_gap=1.0, nmax_b=0.0, b_visits=False,
               phase_p=1.0, phase_rpl=1.0, step_b=False, q_set=1.0, fb_set=1.0):
    """L1 model over the co-residency configurations of `_schedule.sm_configs` (aggregated rows:
    weight, k CTAs on the SM, na / nb distinct tile_m / tile_n among them, AREP / BREP: an earlier
    slot holds this CTA's tile_m / tile_n, ASHARE: another sub-problem's tile at this place (strided dgrad),
    BACK_A / BACK_B: a CTA of this tile_m / tile_n ran on the SM 2 .. 4 waves back, PREV: the SM ran CTAs in the
    previous wave, PREV_A / PREV_B: one of them had this CTA's tile_m / tile_n; COVER_A: the share of the tile's
    window the CTAs of PREV_A / BACK_A read; strided dgrad: COVER_S, the share its earlier slots read, and
    COVER_MORE, the share waves BACK_MORE back read, `_schedule._strided_covers`) and tile classes: ``mcls``
    (rows, weight) along GEMM-M, ``ncls`` (B lines per round, weight, B slice lines) along GEMM-N;
    ``b_lines_avg`` / ``b_slice_avg`` are their averages.

    Returns (fraction of A row accesses that miss L1, fraction of B lookups that hit, fraction of A
    row accesses whose within-CTA reuse misses L1 and L2, summed over the classes of waves of ``l2cls``
    with their weights: `_schedule.l2_classes`; the share of the filter slices that first holders, CTAs
    no earlier slot shares filters with, read from L2: all of them but where the SM's previous wave
    left the slice in the L1, `_life_hit`). ``l2_scale``: the GPU's A lines a row in the L2 window
    over ``lpr_a`` (a channel block's own lines in the L1's: `model._block_classes`). A BREP row's share of
    filter sectors its earlier slot read at the same round is its CFG_BREP_SHARE (column 20; strided dgrad,
    `_geometry.dgrad_step_overlap` of its pair; else 1), the rest as a CTA without one. ``b_hold``: the share
    of a lifetime over
    which a filter line keeps being read, ``b_gap`` k-steps at most between two reads
    (`_geometry.b_line_hold`); where the line outlives those gaps, the previous wave's CTA left it that
    much less than a lifetime before. ``nmax_b``: the sets A's lines of a round spread over in B's windows
    (``nmax`` where 0; `_set_phase`: none of them where the two operands' sets are apart). ``b_visits``:
    ``b_hold`` counts the line's set's visits exactly (`_geometry.b_hold_in_set`), so the round between the
    slice's last sharer and this CTA is added to the window. ``a_rounds``: per distance d in filter positions,
    the rounds' worth of A lines (row 0) and B lines (row 1) a window of d positions holds, where not d rounds'
    share (`miss_rows`; no columns: none). ``phase_p`` / ``phase_rpl``: the classes of sets consecutive k-steps
    walk and the k-steps a line (`_set_phase.fprop_block_phases`; 1 / 1: none), so that of the rounds a filter line
    is away only those of its class count (`_in_class_rounds`). ``step_b``: x's pixels and w's filter rows are whole
    lines (nhwc), the previous wave's filter window is counted in lines and judged at the LRU step, not the ramp.
``fb_set``: the sets a lifetime's lines reach over those its filter lines reach (`model._predict_gemm`: dgrad's
column of a filter position is a line or two, positions C e bytes apart, so with C e a multiple of the sets' span
the whole slice sits in one set): a filter line's set holds that many times its even share of the slice, so the
reuses a lifetime back weigh B's lines by it (6 #177: 576 slice lines on 224 ways, B's hits 97.7 % predicted, none
simulated).

    ``span[t]``: the A lines between the previous occupant's round t and this CTA's, in CTA windows
    (the previous occupant's positions after t and this CTA's before it: with taps that overlap, each
    partial sweep holds more than its share of the window); the cross-wave reuses are judged at every
    round (`_life_hit`).

    A CTA whose tile an earlier slot of its SM holds reads, in every round, what that slot has just
    read: its accesses hit. A first holder misses on first touches and on reuses whose LRU window
    (the SM's na A windows and nb filter tiles, plus round t's filter lines when an earlier slot
    shares its filters) reaches the ways; the previous wave's CTA on the SM may have left the tile."""
    rows_total = rows_t.sum()
    RS = R * S
    if nmax_b <= 0.0:
        nmax_b = nmax
    tiles_m = math.ceil(M / tm)
    rows_distinct = 0.0                      # distinct A rows of a CTA over all filter positions
    for t in range(hist.shape[0]):
        rows_distinct += hist[t, 0]
    # rounds between a k-step and the next channel block's re-read of a shared sector
    blk_rounds = float(RS) if dscale == 1.0 else 1.0
    tm_valid = 0.0
    for mi in range(mcls.shape[0]):
        tm_valid += mcls[mi, 0] * mcls[mi, 1]
    wsum = 0.0
    miss_frac_a = 0.0
    miss2_frac_a = 0.0
    one_frac_a = 0.0                         # the part of miss_frac_a from reuses one position back
    hit_b = 0.0
    first_miss = 0.0                         # first holders' slice reads that miss the L1 (PREV_B or none)
    first_w = 0.0
    lat = np.empty(rows_t.shape[0], np.float64)
    win = window_rows(hist_line, phase, nphase)
    # the next channel block's re-read of a sector (nhwc, blocks narrower than a sector) is a reuse
    # gap + 1 positions after the pixel's last read in this block: judged like those inside a block,
    # on the window of a sweep's d positions (mean over where it ends)
    blk_gap = share_blk > 0.0 and dscale == 1.0 and RS > 1
    avg_win = np.zeros(RS, np.float64)
    if blk_gap:
        for d in range(1, RS):
            for t in range(d, RS):
                avg_win[d] += win[t, d] / (RS - d)
    for ci in range(cfg.shape[0]):
        wgt = cfg[ci, 0]
        k = cfg[ci, 1]
        na = cfg[ci, 2] + cfg[ci, 15]          # out-of-step tiles of a shared window add their lines (NA_EXTRA)
        nb = cfg[ci, 3]
        arep = cfg[ci, 4] > 0.5
        brep = cfg[ci, 5] > 0.5
        prev_a = cfg[ci, 7] > 0.5
        prev_b = cfg[ci, 8] > 0.5
        gap_a = cfg[ci, 9]
        gap_b = cfg[ci, 10]
        pna = cfg[ci, 11]
        pnb = cfg[ci, 12]
        back_a = cfg[ci, 14]
        back_b = cfg[ci, 22]
        # the share of a BREP CTA's filter sectors its earlier slot reads at the same round (strided dgrad,
        # CFG_BREP_SHARE; else 1)
        bshare = cfg[ci, 20]
        wsum += wgt
        ma = 0.0
        ma2 = 0.0
        mo = 0.0
        hb_acc = 0.0
        fm_acc = 0.0
        fm_w = 0.0
        blk_hit = 0.0
        blk_w = 0.0
        for mi in range(mcls.shape[0]):
            T = mcls[mi, 0]
            wm = mcls[mi, 1]
            for ni in range(ncls.shape[0]):
                lines_b = ncls[ni, 0]
                wn = ncls[ni, 1]
                slice_b = ncls[ni, 2]
                other = nb * lines_b / nmax
                ma_t = 0.0
                lines_a_rnd = rows_total / RS * (T / M) * lpr_a      # one CTA's A lines per round
                if arep and rows_total > 0:
                    # the earlier slot (gap_a slots before) read these sectors this round; in between:
                    # its other A lines and its B lines, and each slot between them (A and B)
                    if dscale == 1.0:
                        # nhwc: per filter position, its rows' lines exactly, the LRU step (B above)
                        miss = 0.0
                        for t in range(rows_t.shape[0]):
                            x_t = gap_a * (rows_t[t] * (T / M) * lpr_a / nsa + lines_b / nmax) / ways
                            miss += rows_t[t] * (0.0 if x_t <= 1.0 else 1.0)
                        ma += wm * wn * miss / rows_total
                    else:
                        ma += wm * wn * (1.0 - _ramp(gap_a * (lines_a_rnd / nsa + lines_b / nmax) / ways, lo, hi))
                if not arep and rows_total > 0:
                    for t in range(rows_t.shape[0]):
                        lat[t] = rows_t[t] * (T / M) * lpr_a * na
                    sa = (T / M) * lpr_a * na
                    # an earlier slot sharing the filters brings round t's filter lines into the
                    # window: new lines only where a position's filter bytes leave the previous line
                    extra = lines_b / nmax * min(1.0, bfrac) if brep else 0.0
                    m1, m2, o1 = miss_rows(hist, win, lat, sa, other, nsa, ways, lo, hi, dscale, bfrac,
                                           extra, l2cls, l2_scale / na, l2_ways, l2_cliff, ref, l2_tab, corr,
                                           1.0 / (na * T), rel, na, b_ratio, nb, a_rounds)
                    if q_set < 1.0 and na > 1.0:
                        # the other CTAs' A lines of a round in this one's class of sets with chance q_set
                        # (strided dgrad: k-loops of other lengths walk the classes at other paces); else
                        # the window holds this CTA's own
                        for t in range(rows_t.shape[0]):
                            lat[t] = rows_t[t] * (T / M) * lpr_a
                        s1, s2, s3 = miss_rows(hist, win, lat, (T / M) * lpr_a, other, nsa, ways, lo, hi, dscale,
                                               bfrac, extra, l2cls, l2_scale, l2_ways, l2_cliff, ref, l2_tab, corr,
                                               1.0 / T, rel, 1.0, b_ratio, nb, a_rounds)
                        m1 = q_set * m1 + (1.0 - q_set) * s1
                        m2 = q_set * m2 + (1.0 - q_set) * s2
                        o1 = q_set * o1 + (1.0 - q_set) * s3
                    ma_t = m1 / rows_total
                    ma += wm * wn * ma_t
                    ma2 += wm * wn * m2 / rows_total
                    mo += wm * wn * o1 / rows_total
                    if blk_gap:
                        for g in range(gap_p.shape[0]):
                            if gap_p[g] > 0.0:
                                d = g + 1
                                a_l = sa * (avg_win[d] if d < RS else rows_distinct)
                                blk_hit += wm * wn * gap_p[g] * _ramp(
                                    _window_x(a_l, d, nsa, other, bfrac, extra, ways), lo, hi)
                        blk_w += wm * wn
                hb_rep = 0.0
                if brep:
                    # the earlier slot (gap_b slots before) read these filter lines this round; since
                    # then: its other B lines, each slot between (A and B), this CTA's A lines
                    if dscale == 1.0:
                        # nhwc: each filter position's A lines exactly (its rows that leave the
                        # padding), so the LRU step itself: a hit iff the set holds them all
                        for t in range(rows_t.shape[0]):
                            x_t = gap_b * (lines_b / nsb + rows_t[t] * (T / M) * lpr_a / nmax_b) / ways
                            hb_rep += 1.0 if x_t <= 1.0 else 0.0
                        hb_rep /= rows_t.shape[0]
                    else:
                        # the round's filter lines are counted exactly: where those alone fill the line's set, any A
                        # line between evicts it (68 #64, nchw fp16 1x7: 256 filter lines a round on 4 x 64 ways, 7 %
                        # of the in-step re-reads hit simulated, 55 % on the ramp)
                        if gap_b * lines_b / nsb >= ways and lines_a_rnd > 0.0:
                            hb_rep = 0.0
                        else:
                            hb_rep = _ramp(gap_b * (lines_b / nsb + lines_a_rnd / nmax_b) / ways, lo, hi)
                hb = hb_rep
                if not brep or bshare < 1.0:
                    # the filter sectors no earlier slot read at this round (strided dgrad: the slot's
                    # sub-problem reads other taps, CFG_BREP_SHARE)
                    lines_a = rows_total / RS * (T / M) * lpr_a
                    # a round back: the lines read since the last CTA sharing the slice (k / nb of the k
                    # CTAs, in slot order) read it, the other CTAs' and this one's own before the line
                    # (resnext50_32x4d layer1.0.conv3 on the a100: 2 CTAs of one slice, 128 A lines and
                    # 128 filter lines each in one set a round; the two CTAs' 384 lines overflow its 320
                    # ways, yet only 256 lie between the second CTA's read and the first's next one)
                    own = lines_b / nsb + lines_a / nmax_b
                    d_b = ((1.0 - 1.0 / nb) * (nb * lines_b / nsb + na * lines_a / nmax_b) + own) / ways
                    hb = reuse_b1 * _ramp(d_b, lo, hi)
                    if share_b_blk > 0:
                        # distinct lines of the rounds in between: the CTAs' whole A windows (nhwc) and
                        # their filter lines of those rounds
                        b_win = nb * lines_b * b_rounds(blk_rounds, bfrac)
                        a_win = na * rows_distinct * (T / M) * lpw_a if dscale == 1.0 else na * lines_a
                        hb += (1.0 - hb) * share_b_blk * _ramp((b_win / nsb + a_win / nmax_b) / ways, lo, hi)
                    h_prev = 0.0
                    if prev_b:
                        # the previous wave's CTA on this SM used the same filters: per class of filter lines
                        # (``b_gaps``, `_filter_gaps`), the d rounds of the longest absence of reads of the
                        # line, and the round between the last sharer's read and this CTA's, never more than
                        # one CTA lifetime of the SM's lines (its A windows, its filter slices; the old count:
                        # tests/test_filter_hold_sets.py). 62 #79, one k-step, 3 CTAs of a column an SM: a
                        # lifetime's 120 lines over the L1's 96 counted every PREV_B read a miss, yet only this
                        # CTA's own round lies between
                        a_one = rows_distinct * (T / M) * lpm_a
                        b_one = min(ksteps * lines_b, slice_b)
                        # a round's A lines: where rounds read disjoint lines (1x1: channel blocks of the same
                        # pixels; nchw: its channel planes in turn) a lifetime's k-th, and d rounds d of them;
                        # nhwc taps overlap, and a few rounds read most of the window (seed 9 #17,
                        # `_geometry.b_line_hold`): all of it (a filter position's lines for the round itself)
                        disjoint = RS == 1 or dscale != 1.0
                        a_round = a_one / ksteps if disjoint else min(a_one, lines_a)
                        rnd_a = (1.0 - 1.0 / nb) * na * a_round + a_round
                        rnd_b = (1.0 - 1.0 / nb) * nb * lines_b + lines_b
                        # where the round's lines crowd a few sets (d_b, in the line's set), the excess over
                        # their even spread (resnet50 layer2.0.conv3 on the h100: every row's k-step chunk in
                        # one set, two CTAs' 512 lines a round over its 448 ways)
                        crowd = max(0.0, d_b * ways * ns_life - rnd_a - fb_set * rnd_b) / fb_set
                        life, plife = na * a_one + nb * b_one, pna * a_one + pnb * b_one
                        for g in range(b_gaps.shape[1]):
                            # of the d rounds, those of the line's class of sets, each counted over that class
                            # (``phase_p``, ``phase_rpl``: `_set_phase.fprop_block_phases`; 1 elsewhere)
                            d = _in_class_rounds(b_gaps[0, g], phase_p, phase_rpl)
                            a_d = d * a_round if disjoint else (a_one if d > 0.0 else 0.0)
                            b_d = min(b_one, d * lines_b)
                            wa = min(na * a_one, na * a_d + rnd_a)
                            pwa = min(pna * a_one, pna * a_d + rnd_a)
                            h_prev += b_gaps[1, g] * _life_hit(
                                wa, min(life - wa, min(nb * b_one, nb * b_d + rnd_b) + crowd),
                                pwa, min(plife - pwa, min(pnb * b_one, pnb * b_d + rnd_b) + crowd),
                                span, ns_life * ways, 1.0 if step_b else lo, 1.0 if step_b else hi, fb_set)
                        if b_hold > 0.0:
                            # a line read over a share of the lifetime: that much less lies between, the same
                            # for every line of the SMs' walk in step, so the LRU step; with ``b_visits``, the
                            # share of its set's visits, and the round back from the last sharer's read (its
                            # lines all in the line's sets: d_b of the ways)
                            held = 1.0 - b_hold * _ramp(b_gap * d_b, lo, hi)
                            rnd = d_b * ways * ns_life / fb_set if b_visits else 0.0
                            h_prev = max(h_prev, _life_hit(na * a_one * held, nb * b_one * held + rnd,
                                                           pna * a_one * held, pnb * b_one * held + rnd, span,
                                                           ns_life * ways, 1.0, 1.0, fb_set))
                    elif back_b > 0.5:
                        # the SM ran a CTA of this tile_n 2 .. 4 waves ago (BACK_B), not one ago: its slice is found
                        # where that many lifetimes of the SM's lines fit the L1, as BACK_A's tiles (67 #52: 198
                        # SMs, one CTA each, four columns a band: an SM's column alternates wave by wave; its slice
                        # two waves back hits 96 % simulated)
                        a_one = rows_distinct * (T / M) * lpm_a
                        b_one = min(ksteps * lines_b, slice_b)
                        h_prev = _life_hit(na * a_one * back_b, nb * b_one * back_b, pna * a_one * back_b,
                                           pnb * b_one * back_b, span, ns_life * ways, lo, hi, fb_set)
                    hb += (1.0 - hb) * h_prev
                    if not brep:
                        fm_acc += wm * wn * (1.0 - h_prev)
                        fm_w += wm * wn
                    if brep:
                        hb = bshare * hb_rep + (1.0 - bshare) * hb
                # every CTA reads the same B whatever its rows: its M class weighs by CTAs, not rows
                hb_acc += wm * M / (T * tiles_m) * wn * hb
        if not arep:
            ma_raw = ma
            keep = 1.0                       # the adjustments' share of every missed row (the first touches' aside)
            if blk_gap and blk_w > 0.0:
                keep = 1.0 - share_blk * blk_hit / blk_w
                ma *= keep
            elif share_blk > 0:
                a_win = na * rows_distinct * (tm_valid / M) * lpw_a
                b_win = nb * b_lines_avg * b_rounds(blk_rounds, bfrac)
                keep = 1.0 - share_blk * _ramp((a_win / nsa + b_win / nmax) / ways, lo, hi)
                ma *= keep
            # one CTA lifetime's lines on the SM (its A window, its filter slice)
            a_one = rows_distinct * (tm_valid / M) * lpm_a
            b_one = min(ksteps * b_lines_avg, b_slice_avg)
            cover_s = cfg[ci, 17]
            if cover_s > 0.0 and rows_total > 0:
                # earlier slots of other sub-problems (strided dgrad) read a share ``cover_s`` of this tile's dy
                # pixels (`_schedule`, CFG_COVER_S), in other rounds, at most a CTA lifetime of the SM's lines
                # before, so this CTA's first touches of them hit where that lifetime fits the L1 (seed 9 #65: 5x5
                # stride 4, four sub-problems' CTAs an SM on 824 ways: A hits 83 % simulated, 32 % without)
                first = rows_distinct / rows_total
                ma -= min(ma, first) * cover_s * _ramp((na * a_one + nb * b_one) / (ns_life * ways), lo, hi)
            # the SM ran a CTA of this tile_m one wave ago (PREV_A), or 2 .. 4 (BACK_A): found where that
            # many lifetimes of the SM's lines fit the L1 (seed 5 #29, 1x1 tensor-op, swizzle 3, one CTA an SM
            # on an h200: a tile back three waves later, 24 KB of A a lifetime in 94 KB: A hits 33 %)
            back = 1.0 if prev_a else back_a
            if back > 0.5:
                # the share of this tile's window the earlier CTAs read (strided dgrad: tiles of other places
                # and sub-problems, of what the earlier slots left, and that the waves behind them read too,
                # `_schedule._strided_covers`; else 1)
                kept = 1.0 - cfg[ci, 16] * _life_hit(na * a_one * back, nb * b_one * back, pna * a_one * back,
                                                     pnb * b_one * back, span, ns_life * ways, lo, hi)
                back2 = cfg[ci, 19]
                if cfg[ci, 18] > 0.0:
                    kept -= cfg[ci, 18] * _life_hit(na * a_one * back2, nb * b_one * back2, pna * a_one * back2,
                                                    pnb * b_one * back2, span, ns_life * ways, lo, hi)
                kept = max(0.0, kept)
                ma *= kept
                keep *= kept
            if ma_raw > 0:
                ma2 *= ma / ma_raw
            mo = min(mo * keep, ma)
        miss_frac_a += wgt * ma
        miss2_frac_a += wgt * ma2
        one_frac_a += wgt * mo
        hit_b += wgt * hb_acc
        if fm_w > 0.0:
            first_miss += wgt * fm_acc / fm_w
            first_w += wgt
    if wsum > 0:
        miss_frac_a /= wsum
        miss2_frac_a /= wsum
        one_frac_a /= wsum
        hit_b /= wsum
    return miss_frac_a, hit_b, miss2_frac_a, first_miss / first_w if first_w > 0.0 else 1.0, one_frac_a


@njit(cache=True)
def touched_1d(out_size, in_size, stride, pad, dil, filt):
    """Distinct input positions read along one axis (union over filter taps), by residue class."""
    total = 0
    los = np.empty(filt, np.int64)
    his = np.empty(filt, np.int64)
    for rho in range(min(stride, in_size)):
        n = 0
        for f in range(filt):
            off = f * dil - pad
            if (rho - off) % stride:
                continue
            lo = max(off, 0)
            hi = min(off + stride * (out_size - 1), in_size - 1)
            first = lo + ((rho - lo) % stride)
            if first > hi:
                continue
            los[n] = first
            his[n] = hi
            n += 1
        if n == 0:
            continue
        order = np.argsort(los[:n])
        cur_lo = los[order[0]]
        cur_hi = his[order[0]]
        for i in range(1, n):
            lo = los[order[i]]
            hi = his[order[i]]
            if lo <= cur_hi + stride:
                cur_hi = max(cur_hi, hi)
            else:
                total += (cur_hi - cur_lo) // stride + 1
                cur_lo = lo
                cur_hi = hi
        total += (cur_hi - cur_lo) // stride + 1
    return total


@njit(cache=True)
def touched_mask_1d(out_size, in_size, stride, pad, dil, filt):
    """Boolean mask of the input positions read along one axis (union over filter taps)."""
    hit = np.zeros(in_size, np.bool_)
    for f in range(filt):
        off = f * dil - pad
        for o in range(out_size):
            x = o * stride + off
            if x >= in_size:
                break
            if x >= 0:
                hit[x] = True
    return hit


@njit(cache=True)
def touched_runs_1d(out_size, in_size, stride, pad, dil, filt):
    """(distinct input positions read along one axis, maximal runs of consecutive ones)."""
    hit = touched_mask_1d(out_size, in_size, stride, pad, dil, filt)
    count = 0
    runs = 0
    for x in range(in_size):
        if hit[x]:
            count += 1
            if x == 0 or not hit[x - 1]:
                runs += 1
    return count, runs


@njit(cache=True)
def touched_axes(P, H, sh, ph, dh, R, Q, W, sw, pw, dw, S):
    """(touched rows, their maximal runs, touched columns, the columns' mask) of an input image:
    `touched_runs_1d` along h and `touched_mask_1d` along w in one call (the model's compulsory
    traffic asks for both, once per prediction)."""
    ht, hruns = touched_runs_1d(P, H, sh, ph, dh, R)
    hit_w = touched_mask_1d(Q, W, sw, pw, dw, S)
    wt = 0
    for x in range(W):
        if hit_w[x]:
            wt += 1
    return ht, hruns, wt, hit_w


@njit(cache=True)
def row_units(hit, pix, row_bytes, unit):
    """Units of ``unit`` bytes (sectors or lines) covered by the touched positions ``hit`` of one input
    row (position x spans bytes [x pix, (x + 1) pix) from the row start), averaged over the row start
    alignments i row_bytes mod unit (at most 8 of them sampled evenly)."""
    g = unit
    r = row_bytes % unit
    while r:
        g, r = r, g % r
    period = unit // g
    take = min(period, 8)
    total = 0
    for k in range(take):
        i = (k * period) // take
        a = (i * row_bytes) % unit
        last = -1
        for x in range(hit.shape[0]):
            if not hit[x]:
                continue
            lo = (a + x * pix) // unit
            hi = (a + (x + 1) * pix - 1) // unit
            if lo <= last:
                lo = last + 1
            if hi >= lo:
                total += hi - lo + 1
                last = hi
    return total / take


@njit(cache=True)
def halo_spread(hist, whole):
    """`_window._halo_histogram`'s x[t, d]: position t's first touches beyond the single tile's (``whole``),
    spread over the distances d > 0 as ``whole``'s reuses there exceed ``hist``'s. Compiled (its numpy form
    cost 3 % of a pass over the fprop networks, `benchmarks/bench_analytic.py`)."""
    n, nd = hist.shape
    x = np.zeros((n, nd), np.float64)
    for t in range(n):
        cross = max(0.0, hist[t, 0] - whole[t, 0])
        norm = 0.0
        for d in range(1, nd):
            norm += max(0.0, whole[t, d] - hist[t, d])
        if norm > 0.0:
            scale = cross / norm
            for d in range(1, nd):
                x[t, d] = max(0.0, whole[t, d] - hist[t, d]) * scale
    return x
