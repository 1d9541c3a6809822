"""A's window: the figures of the GEMM's A operand that depend on the layer, the kernel and the cache
geometry's line and sector sizes but on neither the GPU's L1 nor its L2 (the reuse histogram, the lines
of a row access, of a window and of a CTA lifetime, the compulsory units, nchw's run-end sectors).
Memoized per window and kernel (`_memo`): a study of one layer on several GPUs computes them once.
MODEL.md sections 2 and 3."""
from __future__ import annotations

import math

import numpy as np

from ._common import cdiv as _cdiv, row_period, tile_samples, uniq_inputs as _uniq_inputs
from ._counts import block_sharing, lines_per_row, nchw_lines_per_row, nchw_window_lines
from ._memo import memo
from ._reuse import (halo_spread, line_share, refresh_matrix, reuse_histogram, tile_pixel_stamps, window_rows,
                     window_span)

__all__ = ["a_window", "nchw_window_rounds", "row_run_sectors"]

_ONE_SPAN = np.ones(1, np.float64)      # cross-wave reuses judged at one window per slot
# M tiles whose nchw runs `_nchw_run_sectors` counts one by one
_RUN_SAMPLES = 16
# M tiles whose pixels' first and last reads `_reuse.tile_pixel_stamps` stamps one by one
_GAP_SAMPLES = 16


@memo()
def a_window(win, tm, tk, eb, nhwc, SEC, LINE, tile_edge) -> tuple:
    """The figures of A's window that depend on neither the GPU's L1 nor its L2 (memoized, read-only):
    (reuse histogram, valid rows per filter position and in all, the cross-wave window spans, lines per
    row access of a k-step and of a window over all filter positions, distinct lines per missed row over
    a CTA lifetime, sectors the next channel block re-reads, A's distinct sectors and lines, nchw's run
    sectors, the line refreshes of `_reuse.refresh_matrix`, the line-level reuse histogram and the
    distribution of the rounds between a pixel's last read in a channel block and its first in the
    next)."""
    N, C, H, W, R, S = win.n, win.c, win.h, win.w, win.r, win.s
    sh, sw, ph, pw, dh, dw = win.sh, win.sw, win.ph, win.pw, win.dh, win.dw
    P, Q = win.p, win.q
    tiles_m = _cdiv(N * P * Q, tm)
    unit = C * eb if nhwc else eb                  # bytes per input column w
    dense = unit < SEC
    frac = np.full(max(sw, 1), 1.0 if dense else 0.0)
    hist = reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tm, tiles_m, frac, tile_edge,
                           win.reverse)
    rows_t = hist.sum(axis=1)                  # valid rows (all tiles) per filter position
    # positions that touch a reused pixel's end lines through its neighbours (nhwc, pixels that are
    # not whole lines, taps off the stride grid): they renew the line's LRU age, and a window's
    # distinct lines count those neighbours' rows once (the line-level histogram)
    share = line_share(unit, min(C, tk) * eb, sw, LINE, SEC) if nhwc else np.zeros(1, np.float64)
    if share.any():
        ref = refresh_matrix(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tm, tiles_m, tile_edge, win.reverse,
                             share)
        hist_line = reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tm, tiles_m, share, tile_edge,
                                    win.reverse)
    else:
        ref = np.zeros((R * S, R * S), np.float64)
        hist_line = hist
    rows_total = float(rows_t.sum())
    # the A lines between a previous occupant's round t and this CTA's, in windows: its first touches
    # up to t and, sweeping back, from t on (one sweep over the positions: nhwc with one channel block)
    span = _ONE_SPAN
    if nhwc and _cdiv(C, tk) == 1 and R * S > 1:
        back = reuse_histogram(N, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, tm, tiles_m, frac, tile_edge,
                               not win.reverse)
        span = window_span(hist, back)
    # lines a k-step reads per row access (rows at their byte stride, blocks and filter positions at
    # their offsets; unaligned blocks straddle lines, narrow rows share them)
    if nhwc:
        lpr_a = lines_per_row(C, tk, eb, sw * C * eb, math.gcd(dw * C * eb, dh * W * C * eb), LINE)
        # the same for a window over all filter positions, which reads every column when the taps
        # cover the stride (rows one pixel apart)
        lpw_a = lpr_a if S * dw < sw else lines_per_row(C, tk, eb, C * eb, C * eb, LINE)
    else:
        lpr_a = nchw_lines_per_row(tm, tk, C, R, S, Q, sw, dw, eb, LINE)
        lpw_a = lpr_a
    # sectors the next channel block re-reads (nhwc A: R S rounds later, the same filter position)
    share_blk = block_sharing(C, tk, eb, sw * C * eb) if nhwc else 0.0
    # the rounds between a pixel's last read in one channel block and its first in the next (none for a
    # pixel that the first tap and the last read), counted on sampled tiles
    gap_p = _ONE_SPAN
    if share_blk > 0 and R * S > 1:
        picks, stands = tile_samples(N * P * Q, tm, _GAP_SAMPLES)
        gap_p = tile_pixel_stamps(picks, stands, tm, N * P * Q, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw,
                                  win.reverse, True)[1]
        gap_p.setflags(write=False)
    # distinct lines per missed row over a CTA lifetime
    if not nhwc:
        lpm_a = C * sw * eb / LINE        # a row access reads one element of each of C planes
    elif S * dw >= sw:
        lpm_a = unit / LINE                  # a lifetime reads every column of its window
        if dense:
            # rows narrower than a sector: the histogram counts a shift by a fraction of the stride as a
            # reuse (`reuse_histogram`'s frac_w), so a first touch stands for every input column one
            # stride period holds (alexnet conv1 fprop: B L1 misses -73 % with one column a touch)
            cols = len({(s * dw) % sw for s in range(S)})
            lpm_a *= cols
            lpw_a *= cols
    else:
        lpm_a = unit / LINE if unit >= LINE else min(1.0, sw * unit / LINE)
    uniq_a, uniq_a_lines = _uniq_inputs(N, C, H, W, P, Q, R, S, sh, sw, ph, pw, dh, dw, eb, nhwc, (SEC, LINE))
    # nchw, one filter position, elements narrower than a sector: a tile reads, in each plane, one run of
    # its rows' elements, and the sectors that run shares with the next tile's (another CTA) are read by
    # both, with no other tap to re-read them inside the CTA: the sectors of the runs, not the layer's
    # dense count (seed 1 #255, 1x1: A L1 misses -38 % with the dense count)
    run_sectors = _nchw_run_sectors(win, tm, eb, SEC) if not nhwc and dense and R * S == 1 else None
    if not nhwc and dense and R * S > 1:
        # several taps: the run's end sectors count once per filter row (a row's taps shift the run by
        # less than a sector and re-read each other's), on top of the dense count
        per_row = C * sw * eb / SEC                   # the dense count's sectors per row
        ends = _nchw_run_sectors(win._replace(r=1, s=1), tm, eb, SEC) - rows_total / (R * S) * per_row
        run_sectors = rows_total * per_row + R * max(0.0, ends)
    halo = _halo_histogram(win, tm, tiles_m, frac, hist, hist_line) if nhwc else None
    return (hist, rows_t, rows_total, span, lpr_a, lpw_a, lpm_a, share_blk, uniq_a, uniq_a_lines, run_sectors,
            ref, hist_line, gap_p, halo)


@memo()
def nchw_window_rounds(win, tm, tk, eb, LINE):
    """nchw fprop, several filter positions: for each distance d < R S in filter positions (the GEMM's k index
    runs over them in steps of one within a channel), the lines a window of d consecutive positions holds, in
    units of one round's (a k-step's T_k positions), at most d / T_k: row 0 A's, row 1 B's. Read-only.

    A: the taps of one input row (a channel and filter row: S consecutive positions) read overlapping columns, so
    a window of several k-steps holds their lines once, not once a k-step (``lpr_a`` a round). B: a k-step
    reads T_k consecutive elements of each filter row (KCRS), so d positions span (d - 1) e + 128 bytes of it on
    average, against (T_k - 1) e + 128 a round. Seed 4 #172 (11x11 stride 4, 4-byte elements 16 bytes apart):
    re-reads 44 positions back, 5.5 rounds, hit at half the L1 in the simulation; d / T_k rounds' lines put
    them past the ways."""
    d = np.arange(win.r * win.s, dtype=np.float64)
    own = nchw_window_lines(tm, tk, win.c, win.r, win.s, win.q, win.sw, win.dw, eb, LINE)
    out = np.minimum(d / tk, np.vstack((own, ((d - 1.0) * eb + LINE) / ((tk - 1) * eb + LINE))))
    out.setflags(write=False)
    return out


@memo(256)
def row_run_sectors(pitch, C, tk, eb, SEC) -> float:
    """nhwc A: distinct sectors a row adds to a run of consecutive rows ``pitch`` bytes apart, summed
    over the channel blocks (each block alone: what two blocks share is `block_sharing`'s), counted over
    one period of pixel alignments. Where a pixel is not whole sectors, a row's block shares its first
    or last sector with its neighbour's, and only one of the two reads misses (a 1x1 layer of 48-byte
    pixels, one row a request: 2 sectors a row read, 1.5 fetched; simulated A L1 misses 1,728, 2,304
    counted row by row)."""
    step = tk * eb
    cycle = SEC // math.gcd(step, SEC)            # the full blocks' offsets in a sector repeat this often
    full = C // tk
    total = 0.0
    for j in range(min(cycle, full)):
        times = full // cycle + (1 if j < full % cycle else 0)
        total += times * _run_distinct(pitch, (j * step) % SEC, step, SEC)
    if C % tk:
        total += _run_distinct(pitch, (full * step) % SEC, (C % tk) * eb, SEC)
    return total


def _run_distinct(pitch, start, width, SEC) -> float:
    """Distinct sectors a row adds to a long run: a period's sectors less those shared with the next row."""
    spans, shared = row_period(pitch, start, start + width, SEC)
    return float((spans.sum() - shared.sum()) / spans.shape[0])


def _halo_histogram(win, tm, tiles_m, frac, hist, hist_line) -> tuple:
    """(x[t, d], the L2 window rows w[t, d]): a CTA's first touches at position t that an adjacent tile
    read d positions before (its halo, shared with the tiles beside it), and the rows of a CTA window
    over d positions (`window_rows`, every set). The first touches that one tile of all M rows would not
    have (`reuse_histogram` of a single tile) are spread over d as that histogram's reuses exceed the
    tiled one's (rows of the reuse_histogram's units)."""
    N, H, W, R, S = win.n, win.h, win.w, win.r, win.s
    whole = reuse_histogram(N, H, W, R, S, win.sh, win.sw, win.ph, win.pw, win.dh, win.dw, win.p, win.q,
                            N * win.p * win.q, 1, frac, 0.0, win.reverse)
    x = halo_spread(hist, whole)
    rows = window_rows(hist_line, np.zeros(R * S, np.int64), 1)
    x.setflags(write=False)
    rows.setflags(write=False)
    return x, rows


def _nchw_run_sectors(win, tm, eb, SEC) -> float:
    """Sectors the runs of every M tile's rows cover in all C planes (nchw, one filter position),
    counted on up to `_RUN_SAMPLES` tiles spaced along M, over every alignment of a plane to the sector."""
    N, C, H, W, P, Q = win.n, win.c, win.h, win.w, win.p, win.q
    M = N * P * Q
    step = math.gcd(H * W * eb, SEC)               # plane starts: multiples of step modulo the sector
    aligns = np.arange(0, SEC, step)[:, None]
    picks, stands = tile_samples(M, tm, _RUN_SAMPLES)
    # every sampled tile at once (rows past M and padded taps masked out): elements ascend within each
    # image's run, so a new sector starts wherever the run steps to the next sector or to the next image
    m = picks[:, None] * tm + np.arange(tm)[None, :]
    n, pq = np.divmod(m, P * Q)
    p, q = np.divmod(pq, Q)
    y, x = p * win.sh - win.ph, q * win.sw - win.pw
    ok = (m < M) & (y >= 0) & (y < H) & (x >= 0) & (x < W)
    sec = (aligns[:, :, None] + ((y * W + x) * eb)[None, :, :]) // SEC          # (aligns, tiles, rows)
    key = np.where(ok[None], sec + (n * (H * W * eb // SEC + 2))[None], -1)     # images far apart
    # a masked row repeats the last valid one before it (a leading one stays -1 and is not counted)
    last_ok = np.maximum.accumulate(np.where(ok, np.arange(tm)[None, :], 0), axis=1)
    filled = np.take_along_axis(key, np.broadcast_to(last_ok[None], key.shape), axis=2)
    counts = (np.diff(filled, axis=2) != 0).sum(axis=2) + 1 - (~ok[:, 0])[None, :]
    return float(np.dot(stands, counts.mean(axis=0)) * C)
