"""The readers of a pixel inside one group step (grouped fprop, `_grouped_model._l2_rereads`).

Every busy tile reads its pixels once per group step, and the tiles of a wave step in lockstep. A pixel in a
tile's halo is also its neighbour tile's: both read it in the group step, each at its own first tap. Only the
first of them meets, at the L2, the window back to the previous group step; the next reads it again some taps
later, behind the wave's L1 misses of the taps between. Counted here on sampled tiles, each against the tiles
within the filter's reach of it (those run beside it: consecutive CTAs of one column).

Found on seed 3 #111 (a 7x1 depthwise layer, 64-row tiles of 33-pixel image rows: a tile's 243 pixels are read
by four tiles). Replayed (scratch `l2ws`, `l2sdz`), each group step sends 7,779 distinct lines to the L2 (15,558
where the channel window straddles a line), each some twelve times; the reads of lines another tile read
earlier in the step come 1-2 taps behind it and hit 98-100 %. Judged each on the group step's window, as
before, the model said 5.7 % of the re-reads miss, and DRAM reads +197 % (now +114 %: analytic/MODEL.md
section 9).
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._reuse import _tap

# Numba's on-disk cache checks only this file's own time stamp; the kernels here call `_reuse._tap`:
# tests/test_jit_deps.py keeps this digest of the modules they import current, so no stale kernel survives.
_JIT_DEPS_SHA256 = "83d73a1d0029e3ac"


@njit(cache=True)
def _walk(jn, tm, M, pq, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, n_lo, out):
    """Tile jn's in-image reads in tap order: out[i] = (pixel index counted from image n_lo, tap). Returns
    the count written."""
    RS = R * S
    m0 = jn * tm
    rows = min(m0 + tm, M) - m0
    c = 0
    for t in range(RS):
        r, s = _tap(t, RS, S, False)
        for q_ in range(rows):
            m = m0 + q_
            n = m // pq
            p = (m - n * pq) // Q
            y = p * sh - ph + r * dh
            x = (m - n * pq - p * Q) * sw - pw + s * dw
            if y < 0 or y >= H or x < 0 or x >= W:
                continue
            out[c, 0] = ((n - n_lo) * H + y) * W + x
            out[c, 1] = t
            c += 1
    return c


@njit(cache=True)
def reader_windows(picks, stands, tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw):
    """(share of the sampled tiles' (pixel, tile) pairs whose tile reads the pixel first in the group step;
    weights of the other pairs by (tap a of the other tiles' last read of it before, their own first tap b),
    an R S x R S table flattened; the same by the latest of the other tiles' first reads before; the mean
    tile's first reads at each tap). Ties in one tap go to the lower tile (its SM steps first in the round).
    ``picks`` (sampled tiles along M) each stand for ``stands`` tiles; the tiles compared are those whose rows
    are within the filter's reach of the sampled tile's (all the tiles that read its pixels)."""
    RS = R * S
    pq = P * Q
    tiles = (M + tm - 1) // tm
    kk = (((R - 1) * dh) // sh + 2) * Q // tm + 1        # tiles either side that can share a pixel
    imgs = ((2 * kk + 1) * tm - 1) // pq + 2
    size = imgs * H * W
    # zeroed stamps (calloc'd, cheap); the rest set where the sampled tile first reads the pixel
    local = np.zeros(size, np.int64)                     # i + 1: a pixel of sampled tile i
    best = np.empty(size, np.int64)                      # the other tiles' last read before, 2 tap + (1 | 2)
    best1 = np.empty(size, np.int64)                     # the latest of their first reads before, alike
    own = np.empty(size, np.int64)                       # the sampled tile's first read
    seen = np.zeros(size, np.int64)                      # stamp: this tile's first read of the pixel done
    mine = np.empty((tm * RS, 2), np.int64)              # the sampled tile's reads
    reads = np.empty((tm * RS, 2), np.int64)             # a neighbour's
    later = np.zeros(RS * RS)
    later1 = np.zeros(RS * RS)
    newpx = np.zeros(RS)
    first_w = 0.0
    total_w = 0.0
    mark = 0
    for i in range(picks.shape[0]):
        j = picks[i]
        lo = max(0, j - kk)
        hi = min(tiles - 1, j + kk)
        n_lo = (lo * tm) // pq
        own_cnt = _walk(j, tm, M, pq, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, n_lo, mine)
        mark += 1
        for c in range(own_cnt):
            k = mine[c, 0]
            if seen[k] != mark:
                seen[k] = mark
                local[k] = i + 1
                own[k] = mine[c, 1]
                best[k] = -1
                best1[k] = -1
        for jn in range(lo, hi + 1):
            if jn == j:
                continue
            cnt = _walk(jn, tm, M, pq, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, n_lo, reads)
            mark += 1
            for c in range(cnt):
                k = reads[c, 0]
                if local[k] != i + 1:
                    continue
                # the other tiles' last read before this tile's first (in its tap, the lower tile's), and the
                # latest of their first reads before it
                key = 2 * reads[c, 1] + (1 if jn < j else 2)
                if best[k] < key <= 2 * own[k] + 1:
                    best[k] = key
                if seen[k] != mark:
                    seen[k] = mark
                    if best1[k] < key <= 2 * own[k] + 1:
                        best1[k] = key
        # each pixel of the tile, once: its tile the first reader, or a later one behind the others' reads
        mark += 1
        for c in range(own_cnt):
            k = mine[c, 0]
            if seen[k] == mark:
                continue
            seen[k] = mark
            t = own[k]
            total_w += stands[i]
            newpx[t] += stands[i]
            if best[k] >= 0:
                later[((best[k] - 1) // 2) * RS + t] += stands[i]
                later1[((best1[k] - 1) // 2) * RS + t] += stands[i]
            else:
                first_w += stands[i]
    weight = 0.0
    for i in range(picks.shape[0]):
        weight += stands[i]
    if total_w > 0.0:
        later /= total_w
        later1 /= total_w
        first_w /= total_w
    else:
        first_w = 1.0
    if weight > 0.0:
        newpx /= weight
    return first_w, later, later1, newpx


def later_windows(first, later, later1, newpx) -> tuple:
    """(share of first readers; weights of the later pairs and their windows, in pixels of each busy tile,
    back to the other tiles' last read before; the same back to the latest of their first reads): a later
    reader at tap b behind another tile's read at tap a meets the wave's L1 misses of taps a + 1 .. b,
    every busy tile reading its own in step, each its first reads of those taps (``newpx``: the mean tile's
    first reads at each tap). Which of the other tile's reads the L2 saw last depends on whether its
    re-reads miss its L1 (`_grouped_model._window_misses` weighs the two)."""
    RS = newpx.shape[0]
    cum = np.concatenate(([0.0], np.cumsum(newpx)))
    out = [float(first)]
    for table in (later, later1):
        idx = np.nonzero(table)[0]
        a, b = idx // RS, idx % RS
        out += [table[idx].copy(), cum[b + 1] - cum[a + 1]]
    return tuple(out)
