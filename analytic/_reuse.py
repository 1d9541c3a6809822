"""Within-CTA input reuse across filter positions (Numba; loops over R*S k-step pairs only)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._counts import _range_1d

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py. tests/test_jit_deps.py checks this digest of it: updating the digest
# after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "5c5be9b8aa2a44d4"


@njit(cache=True)
def _overlap_1d(lo, hi, shift, size):
    """|{x in [lo, hi]: 0 <= x + shift <= size - 1}| (shift may be fractional)."""
    a = max(float(lo), -shift)
    b = min(float(hi), size - 1 - shift)
    if b < a:
        return 0.0
    return b - a + 1.0


@njit(cache=True)
def reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tile_m, tiles_m, frac_w, edge):
    """hist[t, d] (d = 1 .. R*S-1): valid A row accesses at filter position t (= r*S + s) of one
    channel block whose nearest earlier access to the same data (same CTA, same channel block) was
    d filter positions before; hist[t, 0]: first touches. Row pairs are matched by the shift (dp, dq) of filter positions; the pair stays in the
    CTA with probability 1 - edge*|dm|/tile_m (tile edges). ``frac_w``: consecutive rows of an output
    row fall in the same or adjacent sectors, so a column shift that is not a multiple of the stride
    still reuses data (fractional dq)."""
    RS = R * S
    hist = np.zeros((RS, RS), np.float64)
    M = N * P * Q
    for t in range(RS):
        r = t // S
        s = t % S
        plo, phi = _range_1d(P, H, sh, ph, dh, r)
        qlo, qhi = _range_1d(Q, W, sw, pw, dw, s)
        rows = N * max(0, phi - plo + 1) * max(0, qhi - qlo + 1)
        if rows == 0:
            continue
        cum = 0.0
        for d in range(1, t + 1):
            t2 = t - d
            r2 = t2 // S
            s2 = t2 % S
            ddh = (r - r2) * dh
            ddw = (s - s2) * dw
            if ddh % sh:
                continue
            dp = ddh // sh
            if ddw % sw == 0:
                dq = float(ddw // sw)
            elif frac_w:
                dq = ddw / sw
            else:
                continue
            dm = dp * Q + dq
            if tiles_m > 1:
                tf = 1.0 - edge * abs(dm) / tile_m
                if abs(dm) >= min(tile_m, M):
                    tf = 0.0
            else:
                tf = 1.0
            if tf <= 0.0:
                continue
            cov = N * _overlap_1d(plo, phi, dp, P) * _overlap_1d(qlo, qhi, dq, Q) * tf
            if cov > rows:
                cov = rows
            if cov > cum:
                hist[t, d] += cov - cum
                cum = cov
        hist[t, 0] += rows - cum
    return hist


@njit(cache=True)
def window_rows(hist):
    """win[t, d]: distinct A rows (in row-access units of one filter position) of the LRU window of
    a reuse at position t from t - d: rows(t - d) + the rows each later position u < t adds
    (those whose nearest predecessor is further back than u - (t - d)). O((R*S)^2) via prefix sums
    along diagonals of the cumulative histogram."""
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
    diag = np.zeros((RS, RS), np.float64)
    for a in range(RS):
        acc = 0.0
        for j in range(1, RS - a):
            u = a + j
            acc += rows[u] - cum[u, j]
            diag[a, j] = acc
    win = np.zeros((RS, RS), np.float64)
    for t in range(RS):
        for d in range(1, t + 1):
            win[t, d] = rows[t - d] + diag[t - d, d - 1]
    return win


@njit(cache=True)
def miss_rows(hist, win, lines_a_t, scale_a, other, nsa, ways, lo, hi, dscale, bfrac, extra,
              l2a, l2b, l2w):
    """Rows of `hist` that miss: first touches, plus reuses whose LRU distance reaches the ways
    (linear ramp lo..hi).

    Distance of a reuse at filter position t from t - d, in lines of the reused line's set:
    A: the distinct A lines of the window, scale_a * win[t, d] (`window_rows`; scale_a = A lines
    per row access of the co-resident CTAs), over ``nsa`` sets (nhwc, dscale == 1; otherwise
    d * dscale * lines_a_t[t]); B (``other``: B lines per round in the set): min(d, d * bfrac + 1)
    rounds' worth (filter rows of consecutive filter positions share lines when C * elem < 128 B;
    bfrac = C * elem / 128 / lines per filter row and round), plus ``extra`` lines (a co-resident
    CTA with the same filters that steps before this one in the round brings round t's filter
    lines into the window).

    Also returns the rows whose reuse misses L1 *and* L2 (nhwc): in lockstep every CTA of the
    wave touches its own window's lines in the meantime, L2 distance / capacity =
    l2a * (A lines of the window) + l2b * d (B lines per round of the wave), in lines (L2 LRU is
    per line: an A access fills one sector of a line); miss probability logistic of width l2w."""
    RS = hist.shape[0]
    total = 0.0
    total2 = 0.0
    union = dscale == 1.0
    for t in range(RS):
        total += hist[t, 0]
        for d in range(1, t + 1):
            hv = hist[t, d]
            if hv == 0.0:
                continue
            bd = d * bfrac + 1.0
            if bd > d:
                bd = d
            if union:
                ua = scale_a * win[t, d]
                x = (ua / nsa + bd * other + extra) / ways
            else:
                ua = 0.0
                x = (d * dscale * (lines_a_t[t] / nsa + other) + extra) / ways
            if x <= lo:
                continue
            if x >= hi:
                pm = hv
            else:
                pm = hv * (x - lo) / (hi - lo)
            total += pm
            if union and l2a > 0:
                z = (ua * l2a + d * l2b - 1.0) / l2w
                if z > 40:
                    total2 += pm
                elif z > -40:
                    total2 += pm / (1.0 + np.exp(-z))
    return total, total2


@njit(cache=True)
def _ramp(x, lo, hi):
    if x <= lo:
        return 1.0
    if x >= hi:
        return 0.0
    return (hi - x) / (hi - lo)


@njit(cache=True)
def _binom_w(n, j, p):
    """P[X = j], X ~ Binomial(n, p) (n small)."""
    c = 1.0
    for i in range(j):
        c = c * (n - i) / (i + 1)
    return c * p ** j * (1.0 - p) ** (n - j)


@njit(cache=True)
def l1_classes(hist, rows_t, classes, mcls, ncls, ctas, M, R, S, tm, tn, ksteps, lpr_a, lpr_b,
               nsa, nsb, nmax, ways, lo, hi, dscale, p_m, p_n, p_mw, p_nw, f_wave, share_blk,
               reuse_b1, lpm_a, b_row_lines, ns_life, bfrac, l2a_w, l2b, l2w):
    """L1 model over co-residency classes (k CTAs per SM, weight) and tile classes (rows, weight):
    returns (fraction of A row accesses that miss, fraction of B lookups that hit, fraction of A row
    accesses whose within-CTA reuse misses L1 and L2).

    The number of distinct A (B) tiles among the k co-resident CTAs is 1 + X with X binomial
    (k - 1, 1 - p_m) (resp. 1 - p_n): the LRU cliff is evaluated for each outcome and the results
    mixed (a cliff of the mean distance is not the mean of the cliffs)."""
    rows_total = rows_t.sum()
    RS = R * S
    miss_frac_a = 0.0
    miss2_frac_a = 0.0
    hit_b = 0.0
    lat = np.empty(rows_t.shape[0], np.float64)
    win = window_rows(hist)
    for ci in range(classes.shape[0]):
        k = classes[ci, 0]
        kk = int(k + 0.5) - 1
        wgt = classes[ci, 1] / ctas
        f_wave = classes[ci, 2]      # CTAs of the class whose slot ran a CTA in the previous wave
        p_n = classes[ci, 3]         # co-resident partners of the class sharing the filters
        ma_cls = 0.0
        ma2_cls = 0.0
        hb_cls = 0.0
        for ja in range(kk + 1):
            if p_m >= 1.0:
                if ja > 0:
                    break
                wa = 1.0
            elif p_m <= 0.0:
                if ja < kk:
                    continue
                wa = 1.0
            else:
                wa = _binom_w(kk, ja, 1.0 - p_m)
            na = 1.0 + ja
            for jb in range(kk + 1):
                if p_n >= 1.0:
                    if jb > 0:
                        break
                    wb = 1.0
                elif p_n <= 0.0:
                    if jb < kk:
                        continue
                    wb = 1.0
                else:
                    wb = _binom_w(kk, jb, 1.0 - p_n)
                nb = 1.0 + jb
                # co-resident partners sharing this CTA's filters (tile) and rows (tile)
                q_n = (kk - jb) / kk if kk > 0 else 0.0
                q_m = (kk - ja) / kk if kk > 0 else 0.0
                ma = 0.0
                ma2 = 0.0
                hb_acc = 0.0
                for mi in range(mcls.shape[0]):
                    T = mcls[mi, 0]
                    wm = mcls[mi, 1]
                    for ni in range(ncls.shape[0]):
                        Kt = ncls[ni, 0]
                        wn = ncls[ni, 1]
                        lines_b = Kt * lpr_b
                        other = nb * lines_b / nmax
                        for t in range(rows_t.shape[0]):
                            lat[t] = rows_t[t] * (T / M) * lpr_a * na
                        ma_t = 0.0
                        if rows_total > 0:
                            # sharers of this CTA's filters: one of them steps before it in the
                            # round with probability s / (s + 1)
                            s_n = kk - jb
                            ps = s_n / (s_n + 1.0)
                            sa = (T / M) * lpr_a * na
                            m1, m2 = miss_rows(hist, win, lat, sa, other, nsa, ways, lo, hi, dscale, bfrac,
                                               0.0, l2a_w / na, l2b, l2w)
                            ma_t = (1.0 - ps) * m1
                            ma2_t = (1.0 - ps) * m2
                            if ps > 0:
                                m1, m2 = miss_rows(hist, win, lat, sa, other, nsa, ways, lo, hi, dscale,
                                                   bfrac, lines_b / nmax, l2a_w / na, l2b, l2w)
                                ma_t += ps * m1
                                ma2_t += ps * m2
                            ma_t /= rows_total
                            ma2_t /= rows_total
                            ma += wm * wn * ma_t
                            ma2 += wm * wn * ma2_t
                        lines_a = rows_total / RS * (T / M) * lpr_a
                        d_b = (nb * lines_b / nsb + na * lines_a / nmax) / ways
                        hb = reuse_b1 * _ramp(d_b, lo, hi)
                        if share_blk > 0:
                            hb += (1.0 - hb) * share_blk * _ramp(RS * d_b, lo, hi)
                        if k > 1:
                            d_cta_b = (lines_b / nsb + lines_a / nmax) / ways
                            hb += (1.0 - hb) * (k - 1) / k * q_n * _ramp(d_cta_b, lo, hi)
                        # the previous wave's CTA on this SM used the same filters: distance one
                        # CTA lifetime (distinct lines: A misses, the CTA's whole filter slice)
                        a_life = k * ma_t * rows_total * (T / M) * lpm_a
                        b_life = nb * min(ksteps * lines_b, Kt * b_row_lines)
                        life = (a_life + b_life) / ns_life / ways
                        hb += (1.0 - hb) * f_wave * p_nw * _ramp(life, lo, hi)
                        hb_acc += wm * wn * hb
                lines_a = rows_total / RS * (tm / M) * lpr_a
                ma_raw = ma
                if share_blk > 0:
                    ma *= 1.0 - share_blk * _ramp(RS * (lines_a * na / nsa + nb * tn * lpr_b / nmax) / ways,
                                                  lo, hi)
                if k > 1:
                    d_cta_a = (lines_a / nsa + tn * lpr_b / nmax) / ways
                    ma *= 1.0 - (k - 1) / k * q_m * _ramp(d_cta_a, lo, hi)
                if p_mw > 0:
                    a_life = k * ma * rows_total * (tm / M) * lpm_a
                    b_life = nb * min(ksteps * tn * lpr_b, tn * b_row_lines)
                    life = (a_life + b_life) / ns_life / ways
                    ma *= 1.0 - f_wave * p_mw * _ramp(life, lo, hi)
                if ma_raw > 0:
                    ma2 *= ma / ma_raw
                ma_cls += wa * wb * ma
                ma2_cls += wa * wb * ma2
                hb_cls += wa * wb * hb_acc
        miss_frac_a += wgt * ma_cls
        miss2_frac_a += wgt * ma2_cls
        hit_b += wgt * hb_cls
    return miss_frac_a, hit_b, miss2_frac_a


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
