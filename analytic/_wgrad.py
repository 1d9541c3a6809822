"""The wgrad model (MODEL.md section 10): dw = dy^T x as a GEMM over M = K, N = R S C, K = N P Q.

Every CTA (a block of filters k x a block of columns rsc) streams all N P Q rows npq, tile_k per
k-step, in lockstep with the others. dy row npq is read by every CTA of its k block in the same round
(and never again); x pixel (n, h, w) is read by row npq at filter position (r, s) and again by row
npq + dp Q + dq at position (r - dp sh / dh, s - dq sw / dw): reuse along the npq axis, at a distance
in rows that the positions a column block holds decide. `pixel_reuse` turns that into, per position,
the share of row accesses whose nearest earlier access to the same pixel (same channel) is dnpq rows
back, by the same box-overlap rule as fprop's `reuse_histogram`.
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._common import assemble, cdiv, dirty_at_end, layer_time, tile_samples, uniq_inputs
from ._counts_grouped import tile_pixel_counts
from ._memo import memo
from ._counts import _gcd, _ramp, _range_1d, lines_per_row
from ._l2 import NO_EXCESS, NO_TABLE, cliff_params, l2_miss_prob, refetch_misses
from ._schedule import GAP_MAX, WAVE_SAMPLES, sample_index, tile_of, wave_stats
from ._timeline import sorted_union

# Numba's on-disk cache checks only this file's own time stamp, but its kernels compile in code from
# _counts.py, _l2.py, _schedule.py and _timeline.py (and _wgrad calls _counts_grouped). tests/test_jit_deps.py checks this digest of them: updating the
# digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "71a73b5c5b5d5fb7"

__all__ = ["pixel_reuse"]


@njit(cache=True)
def _pieces(C, lo, hi):
    """The (position j, channel interval [c0, c1)) pieces of the column ranges [lo[i], hi[i])."""
    npieces = 0
    for i in range(lo.shape[0]):
        npieces += (hi[i] - 1) // C - lo[i] // C + 1
    pj = np.empty(npieces, np.int64)
    pc0 = np.empty(npieces, np.int64)
    pc1 = np.empty(npieces, np.int64)
    k = 0
    for i in range(lo.shape[0]):
        j = lo[i] // C
        while j * C < hi[i]:
            pj[k] = j
            pc0[k] = max(lo[i], j * C) - j * C
            pc1[k] = min(hi[i], j * C + C) - j * C
            k += 1
            j += 1
    return pj, pc0, pc1


@njit(cache=True)
def pixel_reuse_ranges(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, lo, hi):
    """Reuse of x along npq for the columns of the ranges [lo[i], hi[i]) (read in lockstep: row npq of
    every range in the same round). Each position j = rsc // C of a range holds a channel interval.
    Returns (accesses, first, dist, weight): element-row accesses (rows x channels), those with no
    earlier access to the same pixel and channel, and the others by the distance in rows dnpq to
    their nearest earlier access (dist ascending, distinct). Columns past R S C (r >= R) read where
    their (h, w) is in range; a pair of intervals of one position counts its channel overlap once."""
    pj, pc0, pc1 = _pieces(C, lo, hi)
    npieces = pj.shape[0]
    cap = npieces * (2 * npieces + 2) + 1
    dists = np.empty(cap, np.int64)
    wts = np.empty(cap, np.float64)
    nd = 0
    total = 0.0
    first = 0.0
    dn = np.empty(npieces, np.int64)
    sp = np.empty(npieces, np.float64)          # a predecessor's pixels (spatial overlap)
    q0 = np.empty(npieces, np.int64)            # and its channels in b's interval
    q1 = np.empty(npieces, np.int64)
    cuts = np.empty(2 * npieces + 2, np.int64)
    for b in range(npieces):
        jb = pj[b]
        rb = jb // S
        sb = jb % S
        width = pc1[b] - pc0[b]
        plo, phi = _range_1d(P, H, sh, ph, dh, rb)
        qlo, qhi = _range_1d(Q, W, sw, pw, dw, sb)
        rows = N * max(0, phi - plo + 1) * max(0, qhi - qlo + 1)
        if rows == 0 or width <= 0:
            continue
        acc = float(rows) * width
        total += acc
        # earlier accesses to the same pixel: piece a with (r_b - r_a) dh = dp sh, (s_b - s_a) dw = dq sw;
        # row npq + dp Q + dq at a reads what row npq reads at b; earlier iff dp Q + dq < 0
        m = 0
        for a in range(npieces):
            ja = pj[a]
            if ja == jb:
                continue
            ra = ja // S
            sa = ja % S
            ddh = (rb - ra) * dh
            ddw = (sb - sa) * dw
            if ddh % sh or ddw % sw:
                continue
            dp = ddh // sh
            dq = ddw // sw
            d = dp * Q + dq
            if d >= 0:
                continue
            c0 = max(pc0[b], pc0[a])
            c1 = min(pc1[b], pc1[a])
            if c1 <= c0:
                continue
            alo, ahi = _range_1d(P, H, sh, ph, dh, ra)
            blo, bhi = _range_1d(Q, W, sw, pw, dw, sa)
            pr = max(0, min(phi, ahi - dp) - max(plo, alo - dp) + 1)
            qr = max(0, min(qhi, bhi - dq) - max(qlo, blo - dq) + 1)
            dn[m] = -d
            sp[m] = float(N * pr * qr)
            q0[m] = c0
            q1[m] = c1
            m += 1
        # per stretch of channels between the predecessors' channel bounds (predecessors of disjoint
        # channels cover different elements), nearest predecessor first: the pixels covered grow with
        # the distance (the largest overlap so far)
        order = np.argsort(dn[:m])
        nc = 0
        cuts[nc] = pc0[b]
        nc += 1
        for i in range(m):                      # the stretches' bounds (none inside: one stretch)
            if q0[i] > pc0[b]:
                cuts[nc] = q0[i]
                nc += 1
            if q1[i] < pc1[b]:
                cuts[nc] = q1[i]
                nc += 1
        cuts[nc] = pc1[b]
        nc += 1
        if nc > 2:
            cuts[:nc].sort()
        for e in range(nc - 1):
            u = cuts[e]
            v = cuts[e + 1]
            if v <= u:
                continue
            got = 0.0
            for i in range(m):
                k = order[i]
                if q0[k] > u or q1[k] < v:
                    continue
                c = min(sp[k], float(rows))
                if c > got:
                    dists[nd] = dn[k]
                    wts[nd] = (c - got) * (v - u)
                    nd += 1
                    got = c
            first += (rows - got) * (v - u)
    order = np.argsort(dists[:nd])
    out_d = np.empty(nd, np.int64)
    out_w = np.empty(nd, np.float64)
    m = 0
    for i in range(nd):
        d = dists[order[i]]
        if m > 0 and out_d[m - 1] == d:
            out_w[m - 1] += wts[order[i]]
        else:
            out_d[m] = d
            out_w[m] = wts[order[i]]
            m += 1
    return total, first, out_d[:m], out_w[:m]


@njit(cache=True)
def pixel_reuse(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, rsc0, rsc1):
    """`pixel_reuse_ranges` of the one range [rsc0, rsc1)."""
    return pixel_reuse_ranges(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, np.array([rsc0]), np.array([rsc1]))


@njit(cache=True)
def far_misses(dist, wt, xlines, a_row, a_frac, span, cap, lo, hi):
    """Element accesses among (dist, wt) whose reuse the L1 loses: between the two reads of the line
    the SM reads xlines[i] distinct lines of x and a_row x (dist - span) lines of dy (`line_span`: the
    line was last touched ``span`` rows before its element), these in a share ``a_frac`` of the sets
    (dy rows K e bytes apart: 1 KB rows of a 4-set L1 all map to one set), so a reuse in those sets
    meets them all and one elsewhere none."""
    m = 0.0
    for i in range(dist.shape[0]):
        rows = max(dist[i] - span, 1.0)
        x = xlines[i] / cap
        x_a = x + a_row * rows / (cap * a_frac)
        m += wt[i] * (a_frac * (1.0 - _ramp(x_a, lo, hi)) + (1.0 - a_frac) * (1.0 - _ramp(x, lo, hi)))
    return m


@njit(cache=True)
def slices_union_lines(extent, tile, eb, line, n):
    """Distinct ``line``-byte lines per row of ``n`` adjacent tile slices (``tile`` elements each, of a
    row of ``extent`` elements, rows ``extent x eb`` bytes apart): the lines their union covers, averaged
    over the first slice's place (a multiple of ``tile``, at most 64 sampled evenly) and the row's
    alignment in the line (at most 8 rows); ``n`` fractional: between floor and ceil. dy's rows in wgrad:
    the wave's tile_m slices of K lie side by side in each row, so slices narrower than a line share them
    (seed 2 #268, 64-byte slices of 512-byte rows: 8 tile_m counted 2,304 lines a slice, 9,216 in all)."""
    tiles = (extent + tile - 1) // tile
    n = min(max(n, 1.0), float(tiles))
    lo_n = int(n)
    frac = n - lo_n
    pitch = extent * eb
    nrows = line // _gcd(pitch % line, line) if pitch % line else 1
    rows = min(nrows, 8)
    total = 0.0
    for k in range(2):
        cnt = lo_n + k
        w = (1.0 - frac) if k == 0 else frac
        if w <= 0.0 or cnt > tiles:
            continue
        starts = tiles - cnt + 1
        take = min(starts, 64)
        acc = 0.0
        for ij in range(take):
            j = (ij * starts) // take
            lo_b = j * tile * eb
            hi_b = min(extent, (j + cnt) * tile) * eb
            for ir in range(rows):
                o = (((ir * nrows) // rows) * pitch) % line
                acc += (o + hi_b - 1) // line - (o + lo_b) // line + 1
        total += w * acc / (take * rows)
    return total


@njit(cache=True)
def _mark_wave(mask, w, per_wave, tiles_m, tiles_n, swz, tn, C, RSC, seen):
    """Mark in ``mask`` the channels that wave ``w``'s column tiles read (``seen``: scratch, tiles_n)."""
    mask[:] = False
    seen[:] = False
    if w < 0:
        return
    marked = 0
    for v in range(w * per_wave, min((w + 1) * per_wave, tiles_m * tiles_n)):
        t = tile_of(v, tiles_m, tiles_n, swz)[1]
        if seen[t]:
            continue
        seen[t] = True
        for rsc in range(t * tn, min((t + 1) * tn, RSC, t * tn + C)):
            if not mask[rsc % C]:
                mask[rsc % C] = True
                marked += 1
        if marked == C:
            return


@njit(cache=True)
def _mask_lines(cur, prev, C, eb, pitch, line, period, nal):
    """Lines per pixel of the channels in ``cur`` and not in ``prev`` (averaged over ``nal`` alignments)."""
    acc = 0.0
    for ia in range(nal):
        o = (((ia * period) // nal) * pitch) % line
        last = -1
        for c in range(C):
            if cur[c] and not prev[c]:
                ln = (o + c * eb) // line
                if ln != last:
                    acc += 1.0
                    last = ln
    return acc / nal


@njit(cache=True)
def x_wave_lines(tiles_m, tiles_n, swz, per_wave, tn, C, RSC, eb, line, samples):
    """(phi_1, phi_new, lines a pixel): the share of x's lines one wave reads, and of those the wave before
    did not read, and a whole pixel's lines (averaged over its alignments).
    A column tile reads its rsc range's channels (rsc mod C) of every pixel its positions reach (each
    CTA streams all N P Q rows, so nearly every pixel), so a wave's x lines are the lines of the union of
    its columns' channel ranges in every pixel: a mask over the channels, its lines counted per pixel
    over the pixel's alignment in the line (at most 8 alignments), at most ``samples`` waves spread over
    the grid. Seed 1 #71 (54 columns of 32 fp16 channels over 9 positions, 40 a wave): a wave reads
    every line of x, where its columns' first touches counted about half of them."""
    ctas = tiles_m * tiles_n
    waves = (ctas + per_wave - 1) // per_wave
    pitch = C * eb
    period = line // _gcd(pitch % line, line) if pitch % line else 1
    nal = min(period, 8)
    none = np.zeros(C, np.bool_)
    full = np.ones(C, np.bool_)
    lines_px = _mask_lines(full, none, C, eb, pitch, line, period, nal)
    take = min(waves, samples)
    cur = np.zeros(C, np.bool_)
    prev = np.zeros(C, np.bool_)
    seen = np.zeros(tiles_n, np.bool_)
    phi1 = 0.0
    phin = 0.0
    nnew = 0
    for iw in range(take):
        w = (iw * waves) // take
        _mark_wave(cur, w, per_wave, tiles_m, tiles_n, swz, tn, C, RSC, seen)
        phi1 += _mask_lines(cur, none, C, eb, pitch, line, period, nal)
        if w > 0:                               # a further wave: against the wave before it
            _mark_wave(prev, w - 1, per_wave, tiles_m, tiles_n, swz, tn, C, RSC, seen)
            phin += _mask_lines(cur, prev, C, eb, pitch, line, period, nal)
            nnew += 1
    phi1 /= take * lines_px
    return phi1, (phin / (nnew * lines_px) if nnew else phi1), lines_px


@memo(4096)
def _rows_pixels(layer, rows) -> float:
    """The distinct in-image pixels that ``rows`` consecutive GEMM-K rows npq read over every filter
    position (a tile of that many rows, `tile_pixel_counts`, on at most 4 places along N P Q)."""
    NPQ = layer.n * layer.p * layer.q
    rows = max(1, min(rows, NPQ))
    picks, stands = tile_samples(NPQ, rows, 4)
    counts = tile_pixel_counts(picks, rows, NPQ, layer.p, layer.q, layer.h, layer.w, layer.r, layer.s,
                               *layer.stride, *layer.pad, *layer.dilation)
    return float(np.dot(stands, counts) / stands.sum())


def line_span(step, line) -> float:
    """Rows a row-stream stays in one line when consecutive rows read ``step`` bytes apart: the rows
    that read a pixel's line before and after it. A pixel reused ``d`` rows later lies in a line that
    the first stream left at most (line / step - 1) rows after reading the pixel and that the second
    stream entered as many rows before: the line's LRU distance, which decides hit or miss for all of
    its sectors, is about d - (line / step - 1) rows (0 when a row's step spans a line)."""
    return line / step - 1.0 if step < line else 0.0


_TILE_SAMPLES = 8


@njit(cache=True)
def _sampled_sms(tiles_m, tiles_n, swz, sms, cps, samples):
    """At most ``samples`` (wave, SM) pairs spread over the dispatch (golden-ratio positions): (weight
    of each, first slot of each, tile_m and tile_n of each slot), weights summing to the CTAs."""
    ctas = tiles_m * tiles_n
    per_wave = sms * cps
    full = ctas // per_wave
    last = ctas % per_wave
    pairs = full * sms + min(sms, last)                      # the (wave, SM) pairs that hold CTAs
    take = min(pairs, samples)
    start = np.zeros(take + 1, np.int64)
    slot_m = np.empty(take * cps, np.int64)
    slot_n = np.empty(take * cps, np.int64)
    n = 0
    k = 0
    for i in range(take):
        j = sample_index(i, take, pairs)
        w = j // sms
        sm = j % sms
        first = k
        for v in range(w * per_wave + sm, min(ctas, (w + 1) * per_wave), sms):
            slot_m[k], slot_n[k] = tile_of(v, tiles_m, tiles_n, swz)
            k += 1
        if k > first:
            n += 1
            start[n] = k
    scale = ctas / max(1, k)
    weight = np.empty(n, np.float64)
    for i in range(n):
        weight[i] = (start[i + 1] - start[i]) * scale
    return weight, start[:n + 1], slot_m[:k], slot_n[:k]


@njit(cache=True)
def _distinct_sorted(x):
    """The distinct values of a short array, ascending."""
    out = np.sort(x)
    m = 0
    for i in range(out.shape[0]):
        if m == 0 or out[m - 1] != out[i]:
            out[m] = out[i]
            m += 1
    return out[:m]


@njit(cache=True)
def window_keys(C, S, W, sw, dh, dw, eb, lo_r, hi_r, line):
    """The lines of one npq row's reads of the columns [lo_r[i], hi_r[i]) as sorted distinct keys
    (l mod s) 2^40 + l div s, s = sw C e / line (a whole number) the lines a row's pixel step moves on
    (`union_window`)."""
    s_l = sw * C * eb // line
    pj, pc0, pc1 = _pieces(C, lo_r, hi_r)
    first = np.empty(pj.shape[0], np.int64)                 # each piece's first and last line of a row
    last = np.empty(pj.shape[0], np.int64)
    n = 0
    for k in range(pj.shape[0]):
        j = pj[k]
        b = ((j // S) * dh * W + (j % S) * dw) * C * eb + pc0[k] * eb
        first[k] = b // line
        last[k] = (b + (pc1[k] - pc0[k]) * eb - 1) // line
        n += last[k] - first[k] + 1
    keys = np.empty(n, np.int64)
    n = 0
    for k in range(pj.shape[0]):
        for ln in range(first[k], last[k] + 1):
            keys[n] = (ln % s_l) * (1 << 40) + ln // s_l
            n += 1
    return np.unique(keys)


@njit(cache=True)
def union_window(keys, rows):
    """Distinct lines that ``rows`` consecutive npq rows read, from one row's `window_keys`, when a
    row's pixel step is a whole number s of lines: each (position, channel interval) piece reads the
    same lines, s further, each row, so a line l of the first row is read again as l + k s; the lines
    of one residue l mod s form runs [l div s, + rows) and the window is their union, counted per
    residue (pieces a filter row apart read the same pixels W / sw rows apart, a run of them shared).
    Within one output row (wraps not counted)."""
    total = 0.0
    for i in range(keys.shape[0]):
        if i + 1 < keys.shape[0] and keys[i + 1] >> 40 == keys[i] >> 40:
            total += min(rows, float(keys[i + 1] - keys[i]))
        else:
            total += rows
    return total


@njit(cache=True)
def swept_lines(C, S, W, sw, dh, dw, eb, lo_r, hi_r, line, rows):
    """Distinct lines that ``rows`` consecutive npq rows read of the columns [lo_r[i], hi_r[i]), any pixel
    pitch: each (position, channel interval) piece reads its bytes, the next row ``sw C e`` further; a piece
    narrower than that step reads ``rows`` separate copies, else one run. The union of every piece's bytes,
    counted in lines (two runs in one line count it once). Within one output row (wraps not counted), as
    `union_window`. Pieces of one filter row read the same input row a few pixels apart (dil_w 2: pixels q - 2,
    q and q + 2): 64 #32's window of 78 rows holds about 1.3 of its columns' sweeps, where a sum over the
    pieces counted 3 (its re-reads 5 k-steps on, all L1 hits simulated, predicted to miss). Used where dil_w > 1
    (`window_lines` merges consecutive positions' runs where dil_w is 1; everywhere, this count moved 3 cached
    undilated cases by under a point and cost a fifth of the wgrad benchmark: 19.8k -> 16.0k predictions / s)."""
    pj, pc0, pc1 = _pieces(C, lo_r, hi_r)
    step = sw * C * eb
    n = 0
    for k in range(pj.shape[0]):
        n += 1 if step <= (pc1[k] - pc0[k]) * eb else rows
    starts = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    n = 0
    for k in range(pj.shape[0]):
        j = pj[k]
        b = ((j // S) * dh * W + (j % S) * dw) * C * eb + pc0[k] * eb
        width = (pc1[k] - pc0[k]) * eb
        if step <= width:
            starts[n] = b
            ends[n] = b + (rows - 1) * step + width
            n += 1
        else:
            for i in range(rows):
                starts[n] = b + i * step
                ends[n] = b + i * step + width
                n += 1
    order = np.argsort(starts)
    # the pieces' lines, [first, last + 1), in rising order of their starts: their union's length
    return float(sorted_union(starts[order] // line, (ends[order] - 1) // line + 1, n))


# channels of x at which `x_wave_rereads` follows the waves that read them
_X_CHANNELS = 16


@njit(cache=True)
def x_wave_rereads(tiles_m, tiles_n, swz, per_wave, tn, C, RS, samples):
    """Re-reads of x by later waves, per channel: hist[g] = the mean number of waves (sampled channels)
    that read a channel of x g waves after the last wave that read it. Channel c is read by the column
    tiles of the R S positions (rsc = j C + c), each column's CTAs by every wave they run in (each CTA
    streams all N P Q rows), so the waves of a channel are the union of its columns' wave intervals
    (the grid walks bands of 2^swz columns, tile_m after tile_m). A column's own later waves and the
    other positions' columns alike: both re-read the channel's sectors of the whole image."""
    width = 1 << swz
    hist = np.zeros(GAP_MAX + 1, np.float64)
    first = np.empty(RS, np.int64)                  # a position's column: its first CTA, and the CTAs
    lanes = np.empty(RS, np.int64)                  # between two of its tiles (the band's columns)
    lo = np.empty(RS, np.int64)
    hi = np.empty(RS, np.int64)
    for i in range(samples):
        c = int((i + 0.5) * C / samples)
        for j in range(RS):
            t = min((j * C + c) // tn, tiles_n - 1)
            b = t // width
            lanes[j] = min(width, tiles_n - b * width)
            first[j] = b * width * tiles_m + (t - b * width)
            lo[j] = first[j] // per_wave
            hi[j] = (first[j] + (tiles_m - 1) * lanes[j]) // per_wave
        if per_wave < width:                        # a band's columns interleave more sparsely than
            # the waves: list each wave (rare: fewer CTAs a wave than columns a band)
            waves = np.empty(RS * tiles_m, np.int64)
            for j in range(RS):
                for k in range(tiles_m):
                    waves[j * tiles_m + k] = (first[j] + k * lanes[j]) // per_wave
            waves = np.unique(waves)
            for k in range(1, waves.shape[0]):
                hist[min(waves[k] - waves[k - 1], GAP_MAX)] += 1.0 / samples
            continue
        order = np.argsort(lo)
        prev = -1                                   # the last wave counted so far
        for k in range(RS):
            a = lo[order[k]]
            z = hi[order[k]]
            if z <= prev:
                continue
            start = max(a, prev + 1)
            if prev >= 0:
                hist[min(start - prev, GAP_MAX)] += 1.0 / samples
            hist[1] += (z - start) / samples         # the column's own later waves, one apart
            prev = z
    return hist


@njit(cache=True)
def a_set_share(tms, tm, eb, pitch, sets, line):
    """The share of an L1's sets (linear index) that the dy rows of the tile_m ``tms`` reach: rows
    ``pitch`` bytes apart step the set by pitch / line, so they reach a class of sets modulo g =
    gcd(that step, sets); the tiles' lines in a row reach some of the g classes."""
    if pitch % line:
        return 1.0
    step = (pitch // line) % sets
    g = sets if step == 0 else _gcd(step, sets)
    reached = 0
    for c in range(g):                           # classes reached by some tile's lines
        for i in range(tms.shape[0]):
            first = tms[i] * tm * eb
            lo = first // line
            if (c - lo) % g <= (first + tm * eb - 1) // line - lo:
                reached += 1
                break
    return reached / g


@njit(cache=True)
def sampled_l1_misses(tiles_m, tiles_n, swz, sms, cps, samples, N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q,
                      tn, eb, sec, line, dense, span, a_round, b_round, a_lines_row, cap, lo, hi, a_lookups,
                      a_distinct, b_lookups, sets, tm, K):
    """(sum of weight x A misses per CTA, the same for B, sum of weights) over the sampled (wave, SM)
    pairs of `_sampled_sms` (MODEL.md section 10): per pair, B misses are its column tiles' first
    accesses (`pixel_reuse_ranges` of the distinct tiles) and the reuses the L1 loses (`far_misses`:
    between the two reads, the pair's A rows and the lines of its own column tiles, `window_lines`), each
    element a sector lookup but where x is narrower than a sector (``dense``): there a lost element costs its
    bytes' sectors, as a first touch does (a k-step's accesses that share a missed sector find it refilled:
    seed 5 #289, C 7 fp16, L2 reads +25.4 -> -6.8 %; MODEL.md section 9),
    then every slot whose tile an earlier slot of the SM holds re-reads what that slot just read, a
    hit unless the slots between evict it (`_ramp` of their rounds over the capacity)."""
    weight, start, slot_m, slot_n = _sampled_sms(tiles_m, tiles_n, swz, sms, cps, samples)
    keys = []                                               # distinct column tiles seen, and their reuse
    totals = np.empty(weight.shape[0], np.float64)
    firsts = np.empty(weight.shape[0], np.float64)
    fetched = np.ones(weight.shape[0], np.float64)        # sector bytes fetched per byte read (dense x)
    dists = []
    wts = []
    xlines = []                                             # x lines in the window of each distance
    wsum = 0.0
    miss_a = 0.0
    miss_b = 0.0
    for i in range(weight.shape[0]):
        s0 = start[i]
        k = start[i + 1] - s0
        tms = slot_m[s0:s0 + k]
        tns = slot_n[s0:s0 + k]
        tms_d = _distinct_sorted(tms)
        na = tms_d.shape[0]
        distinct = _distinct_sorted(tns)
        nb = distinct.shape[0]
        got = -1                                            # samples often hold the same column tiles
        for j in range(len(keys)):
            if keys[j].shape[0] == nb and np.all(keys[j] == distinct):
                got = j
                break
        if got < 0:
            lo_r = distinct * tn
            total, first, dist, wt = pixel_reuse_ranges(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, lo_r,
                                                        lo_r + tn)
            got = len(keys)
            keys.append(distinct)
            totals[got] = total
            firsts[got] = first
            if dense:
                fetched[got] = dense_fetch_ratio(C, S, sh, sw, dw, eb, sec, distinct * tn, distinct * tn + tn)
            xl = np.empty(dist.shape[0], np.float64)
            if (sw * C * eb) % line == 0:           # the window's lines counted as a union
                wkeys = window_keys(C, S, W, sw, dh, dw, eb, lo_r, lo_r + tn, line)
                for t in range(dist.shape[0]):
                    xl[t] = union_window(wkeys, max(dist[t] - span, 1.0))
            elif dw > 1:
                # dilated: one filter row's positions read pixels dw apart, their sweeps interleave (`swept_lines`)
                for t in range(dist.shape[0]):
                    xl[t] = swept_lines(C, S, W, sw, dh, dw, eb, lo_r, lo_r + tn,
                                        line, max(1, int(round(max(dist[t] - span, 1.0)))))
            else:                                   # else the tiles' runs: alpha + beta rows
                alpha = 0.0
                beta = 0.0
                for t in range(nb):
                    al, be = window_lines(C, S, sw, dw, eb, distinct[t] * tn, distinct[t] * tn + tn, line)
                    alpha += al
                    beta += be
                for t in range(dist.shape[0]):
                    xl[t] = alpha + beta * max(dist[t] - span, 1.0)
            dists.append(dist)
            wts.append(wt)
            xlines.append(xl)
        total = totals[got]
        first = firsts[got]
        sec_elem = nb * b_lookups / total if total else 0.0
        # sectors a missed element costs: its bytes' sectors where x is narrower than a sector, else a lookup
        per_elem = eb / sec * fetched[got] if dense else sec_elem
        first_sec = first * per_elem
        a_frac = a_set_share(tms_d, tm, eb, K * eb, sets, line)
        far = far_misses(dists[got].astype(np.float64), wts[got], xlines[got], na * a_lines_row, a_frac, span, cap,
                         lo, hi) * per_elem
        mb = min(nb * b_lookups, first_sec + far)           # the first holders' misses
        # repeats (an earlier slot holds the tile) read what that slot just read
        ma = 0.0
        for s_ in range(k):
            prev_m = -1
            prev_n = -1
            for t in range(s_ - 1, -1, -1):
                if prev_m < 0 and tms[t] == tms[s_]:
                    prev_m = t
                if prev_n < 0 and tns[t] == tns[s_]:
                    prev_n = t
            if prev_m >= 0:
                ma += a_lookups * (1.0 - _ramp((s_ - prev_m) * (a_round + b_round) / cap, lo, hi))
            else:
                ma += a_lookups * a_distinct
            if prev_n >= 0:
                mb += b_lookups * (1.0 - _ramp((s_ - prev_n) * (a_round + b_round) / cap, lo, hi))
        wsum += weight[i]
        miss_a += weight[i] * ma / k
        miss_b += weight[i] * mb / k
    return miss_a, miss_b, wsum


@njit(cache=True)
def _add_run(alpha, beta, b, step, line, g):
    """(alpha, beta) plus one run of ``b`` bytes whose copy in the next row lies ``step`` bytes on."""
    if step <= b:                                # one growing span: b - step + rows step bytes
        return alpha + (b - step + line - g) / line, beta + step / line
    if step < line:                              # copies with gaps, several to a line
        return alpha + (b + line - g) / line, beta + step / line
    return alpha, beta + (b + line - g) / line   # a separate copy per row


@njit(cache=True)
def dense_fetch_ratio(C, S, sh, sw, dw, eb, sec, lo_r, hi_r):
    """x narrower than a sector (wgrad's B): the sectors the column tiles [lo_r, hi_r) fetch over the
    bytes they read, in a long run of output columns. Filter rows r alike modulo the stride read the same
    input rows, so their taps' channels are one pattern of bytes at each output column q, sw C e bytes on
    from the last; a pattern that leaves part of a pixel (a tile's last tap, 2 of 6 channels) still
    fetches its sectors (seed 13 #30, C = 6 fp16: x's L1 misses counted element by element, -33 %),
    what a row of the same class reads of that pixel not. Each class over one period of q's alignments;
    the last column tile's columns past R S C count as rows r >= R, which CUTLASS loads (DESIGN 3a)."""
    span = ((S - 1) * dw + 1) * C * eb
    step = sw * C * eb
    period = sec // _gcd(step, sec)
    covered = np.zeros(span, np.bool_)
    # the run's start: a whole number of periods, past the columns whose bytes or sectors a later column can
    # still share (span + sec bytes back); then one period counted. (One period of start, when the pattern
    # spans several steps, counted a column's overlap with the columns before it as new: C = 4 fp32, S = 6,
    # unit stride, one column tile's last taps 84 bytes past its first: 2.0 sectors a byte, 1.0 in a long run)
    reach = (span + sec + step - 1) // step
    warm = period * ((reach + period - 1) // period)
    n = warm + period
    seen_b = np.zeros(n * step + span, np.bool_)
    seen_s = np.zeros((n * step + span) // sec + 2, np.bool_)
    sectors = 0.0
    nbytes = 0.0
    for kappa in range(sh):
        covered[:] = False
        anyc = False
        for t in range(lo_r.shape[0]):
            for col in range(lo_r[t], hi_r[t]):
                j = col // C
                r = j // S
                if r % sh != kappa:
                    continue
                o = ((j % S) * dw * C + col % C) * eb
                for b in range(eb):
                    covered[o + b] = True
                anyc = True
        if not anyc:
            continue
        seen_b[:] = False
        seen_s[:] = False
        nb_ = 0                                   # distinct bytes and sectors so far
        ns_ = 0
        nb_half = 0                               # ... at the end of the run's start (``warm`` columns)
        ns_half = 0
        for q in range(n):
            for o in range(span):
                if covered[o]:
                    a = q * step + o
                    if not seen_b[a]:
                        seen_b[a] = True
                        nb_ += 1
                    if not seen_s[a // sec]:
                        seen_s[a // sec] = True
                        ns_ += 1
            if q == warm - 1:
                nb_half = nb_
                ns_half = ns_
        nbytes += nb_ - nb_half
        sectors += ns_ - ns_half
    if nbytes <= 0.0:
        return 1.0
    return max(1.0, sectors * sec / nbytes)


@njit(cache=True)
def window_lines(C, S, sw, dw, eb, rsc0, rsc1, line):
    """(alpha, beta): the distinct lines that ``rows`` consecutive npq rows read of the columns
    [rsc0, rsc1) are alpha + beta rows. Each position's channels form a run of bytes, merged with the
    next position's when that is the next pixel of the same input row (dil_w 1, same r); the next row
    reads every run sw C e bytes further, so the round's copies of a run overlap or abut when that step
    is at most the run's length, and share lines when it is under a line."""
    g = _gcd(C * eb, line)
    step = sw * C * eb
    alpha = 0.0
    beta = 0.0
    run = 0                                      # bytes of the open run (0: none open)
    full = False                                 # the open run ends at its position's last channel
    j = rsc0 // C
    while j * C < rsc1:
        lo = max(rsc0, j * C) - j * C
        hi = min(rsc1, j * C + C) - j * C
        width = (hi - lo) * eb
        if run and dw == 1 and lo == 0 and j % S != 0 and full:
            run += width
        else:
            if run:
                alpha, beta = _add_run(alpha, beta, run, step, line, g)
            run = width
        full = hi == C
        j += 1
    if run:
        alpha, beta = _add_run(alpha, beta, run, step, line, g)
    return alpha, beta


@memo()
def _all_pixel_reuse(layer) -> tuple:
    """`pixel_reuse` of every column (0 .. R S C), memoized by the layer's shape (GPU-independent), read-only."""
    total, first, dist, wt = pixel_reuse(layer.n, layer.c, layer.h, layer.w, layer.r, layer.s, *layer.stride,
                                         *layer.pad, *layer.dilation, layer.p, layer.q, 0, layer.r * layer.s * layer.c)
    dist.setflags(write=False)
    wt.setflags(write=False)
    return total, first, dist, wt


@memo()
def _x_units(layer, eb, sec, line) -> tuple:
    """x's distinct sectors and lines (`_common.uniq_inputs`, nhwc), memoized by the layer's shape."""
    out = uniq_inputs(layer.n, layer.c, layer.h, layer.w, layer.p, layer.q, layer.r, layer.s, *layer.stride,
                      *layer.pad, *layer.dilation, eb, True, (sec, line))
    return float(out[0]), float(out[1])


@njit(cache=True)
def _far_windows(dist, span, tk, per_round, cap_lines, ways, cliff):
    """Per reuse distance of x (rows): the rows between the two reads (at least 1 past the line's ``span``),
    the L2 window of their rounds (``per_round`` lines each) and its miss chance (`_l2.l2_miss_prob`); one
    compiled loop (a dispatch per distance from Python cost 5 % of a pass over the wgrad networks)."""
    n = dist.shape[0]
    rows = np.empty(n, np.float64)
    window = np.empty(n, np.float64)
    prob = np.empty(n, np.float64)
    for i in range(n):
        rows[i] = max(dist[i] - span, 1.0)
        window[i] = rows[i] / tk * per_round
        prob[i] = l2_miss_prob(window[i] / cap_lines, ways, cliff)
    return rows, window, prob


def predict_wgrad(layer, gpu, kernel, f, machine, ex):
    """Every metric of `simcore.metrics` and the timing keys for ``kernel.op == "wgrad"``."""
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    P, Q = layer.p, layer.q
    NPQ, RSC = N * P * Q, R * S * C
    eb = kernel.elem_bytes
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    SEC, LINE = gpu.sector_bytes, gpu.line_bytes
    tiles_m, tiles_n = cdiv(K, tm), cdiv(RSC, tn)
    ctas = tiles_m * tiles_n
    cps, ways, sets = machine
    per_wave = cps * gpu.sms
    ksteps = cdiv(NPQ, tk)
    sec_a, sec_b, sec_c = ex["sec_A"], ex["sec_B"], ex["sec_C"]
    swz = kernel.swizzle_log
    hist_ra, hist_rb, _hist_rh, wsum, _per_wave = wave_stats(tiles_m, tiles_n, swz, per_wave, WAVE_SAMPLES)
    wsum = wsum.tolist()                       # Python floats for the scalar glue below
    n_waves = wsum[3]
    na_wave, nb_wave, ctas_wave = wsum[0] / n_waves, wsum[1] / n_waves, wsum[2] / n_waves

    # A = dy: row npq reads the CTA's k block, rows K e bytes apart
    a_lines_row = lines_per_row(K, tm, eb, K * eb, LINE, LINE)
    a_sec_row = lines_per_row(K, tm, eb, K * eb, SEC, SEC)
    a_round = tk * a_lines_row
    a_lookups = sec_a / ctas if ctas else 0.0                 # per CTA
    a_distinct = min(1.0, NPQ * a_sec_row / a_lookups) if a_lookups else 1.0
    # B = x: per sampled SM, the union of its distinct column tiles (read in lockstep)
    lo, hi = f.l1_hit_lo, f.l1_hit_hi
    cap = sets * ways
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    b_lookups = sec_b / ctas if ctas else 0.0
    b_al, b_be = window_lines(C, S, sw, dw, eb, 0, tn, LINE)
    if tiles_n > 1:
        al2, be2 = window_lines(C, S, sw, dw, eb, (tiles_n - 1) * tn, tiles_n * tn, LINE)
        b_al = (b_al * (tiles_n - 1) + al2) / tiles_n
        b_be = (b_be * (tiles_n - 1) + be2) / tiles_n
    b_round = b_al + b_be * tk
    dense = C * eb < SEC
    span = line_span(sw * C * eb, LINE)
    miss_a, miss_b, wsum = sampled_l1_misses(tiles_m, tiles_n, swz, gpu.sms, cps, _TILE_SAMPLES * 2, N, C, H, W, R, S,
                                             sh, sw, ph, pw, dh, dw, P, Q, tn, eb, SEC, LINE, dense, span, a_round, b_round,
                                             a_lines_row, cap, lo, hi, a_lookups, a_distinct, b_lookups, sets, tm, K)
    miss_a = min(float(sec_a), miss_a / wsum * ctas if wsum else 0.0)
    miss_b = min(float(sec_b), miss_b / wsum * ctas if wsum else 0.0)
    b_round_avg = b_round
    all_total, all_first, all_dist, all_wt = _all_pixel_reuse(layer)
    b_first_frac = all_first / all_total if all_total else 1.0

    # L2: compulsory dy and x; x pixels re-read across the wave's columns beyond the L2; tiles of
    # later waves re-read
    cap_lines = gpu.l2_bytes / LINE * f.l2_capacity
    l2_ways, cliff = float(gpu.l2_ways), cliff_params(gpu, f)
    uniq_dy = float(cdiv(NPQ * K * eb, SEC))
    uniq_x, x_lines = _x_units(layer, eb, SEC, LINE)
    # the wave's tile_m slices lie side by side in each dy row: their lines once (`slices_union_lines`)
    a_row_wave = min(na_wave * a_lines_row, slices_union_lines(K, tm, eb, LINE, na_wave))
    a_row_eff = a_row_wave / na_wave if na_wave > 0 else a_lines_row
    per_round = na_wave * tk * a_row_eff + nb_wave * b_round_avg
    # x's lines a wave reads: the union of its columns' channel ranges in every touched pixel
    phi1, phin, x_px_lines = x_wave_lines(tiles_m, tiles_n, swz, per_wave, tn, C, RSC, eb, LINE, _TILE_SAMPLES)
    sec_per_access = (sec_b / tiles_m) / all_total if all_total else 0.0
    far_b = 0.0
    far_rows, far_windows, far_probs = _far_windows(all_dist, span, tk, per_round, cap_lines, l2_ways, cliff)
    for rows, window, prob, w in zip(far_rows.tolist(), far_windows.tolist(), far_probs.tolist(), all_wt.tolist()):
        if phi1 > 0.0 and prob > 1e-4:
            # the columns run in lockstep over the same rows: between the two reads they read the pixels of
            # those rows over their positions once, not once a column (seed 4 #170, 3x3 over 98-wide rows,
            # 18 columns: a re-read one image row on meets some 300 pixels, where 18 columns' rounds summed
            # put it past the L2); counted only where the sum misses more than 1e-4 (the union is smaller, and its
            # count costs some 40 us a distance)
            window = min(window, _rows_pixels(layer, int(round(rows))) * x_px_lines * phi1
                         + na_wave * rows * a_row_eff)
            prob = l2_miss_prob(window / cap_lines, l2_ways, cliff)
        far_b += w * prob
    far_b *= sec_per_access
    a_slice = NPQ * a_sec_row
    b_slice = (sec_b / ctas) * b_first_frac if ctas else 0.0
    c_lines = cdiv(K * RSC * eb, LINE) / ctas
    f1 = na_wave * NPQ * a_row_eff + phi1 * x_lines + ctas_wave * c_lines
    fnew = max(0.0, f1 - NPQ * a_row_eff * hist_ra[1] / n_waves - (phi1 - phin) * x_lines)
    reread_a = refetch_misses(hist_ra, a_slice, f1, fnew, cap_lines, l2_ways, cliff, NO_EXCESS, NO_TABLE)
    # x re-read by later waves: the column's own, and the other positions' columns of the same channels
    hist_x = x_wave_rereads(tiles_m, tiles_n, swz, per_wave, tn, C, R * S, _X_CHANNELS)
    reread_b = refetch_misses(hist_x, uniq_x, f1, fnew, cap_lines, l2_ways, cliff, NO_EXCESS, NO_TABLE)
    dram_a = min(miss_a, uniq_dy + reread_a)
    dram_b = min(miss_b, uniq_x + far_b + reread_b)

    # stores: dw, once per CTA at its end
    uniq_c = float(cdiv(K * RSC * eb, SEC))
    r_full = na_wave * a_slice + nb_wave * b_slice
    # a partial last wave: each CTA streams all N P Q rows of its dy K-slice and its x channels, so tiles_m x the
    # column tiles that span C consecutive CTAs read what a full wave does (1 #71: 56 CTAs of 4 K-slices and 14
    # columns of 32 of 192 channels read all of dy and x, 207k sectors; scaled by their CTAs, 108k, the walk kept
    # the wave before's dw dirty, the simulator none of it)
    dirty, dram_w = dirty_at_end(gpu, f, uniq_c, uniq_c / ctas, r_full, ctas, per_wave, ctas_wave,
                                 uniq_dy + uniq_x, tiles_m * cdiv(C, tn))
    out = assemble(ex, sec_a, sec_b, sec_c, sec_a - miss_a, sec_b - miss_b, miss_a, miss_b, dram_a, dram_b,
                   dram_w, dirty, uniq_c)
    out.update(layer_time(layer, gpu, kernel, out, machine, (ctas, ksteps, float(layer.flops))))
    return out
