"""A's compulsory L1 misses: the distinct sectors each CTA reads (Numba). MODEL.md section 2.

Every CTA misses each A sector it reads at least once, unless another CTA of its SM has just read it
(a co-resident or the previous wave's CTA with the same tile_m: the L1 configurations' AREP / PREV_A).
The reuse histogram's first touches count rows and their sectors one filter position at a time, which
under-counts where a row's taps shift its run across a sector boundary: seed 1 #22 (nchw fp32, 32-row
tiles, 3x3 on 102-wide images) simulates 960,576 A misses at every L1 size from 0.5x to 4x, exactly the
distinct sectors of its CTAs counted here, where the model predicted 836,160.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit

from ._common import cdiv, tile_samples
from ._memo import memo

# M tiles whose distinct sectors `tile_sectors` counts one by one (evenly spaced along M)
_SECTOR_SAMPLES = 32


@njit(cache=True)
def _run_sectors(lin, k, base, width, sec):
    """Distinct ``sec``-byte sectors of the byte ranges [base + lin[i] width, + width), lin sorted."""
    count = 0
    last = -1
    for i in range(k):
        lo = (base + lin[i] * width) // sec
        hi = (base + lin[i] * width + width - 1) // sec
        if lo <= last:
            lo = last + 1
        if hi >= lo:
            count += hi - lo + 1
            last = hi
    return count


@njit(cache=True)
def tile_sectors(picks, tm, M, P, Q, C, H, W, R, S, sh, sw, ph, pw, dh, dw, eb, sec, nchw):
    """Distinct A sectors that the output rows of each tile in ``picks`` read over every filter position
    and every channel: nhwc, each pixel's C e bytes; nchw, each channel plane's pixels, the planes
    ((n C + c) H W e bytes on) gathered by their offset modulo the sector, less the sectors that a plane's
    last element shares with the next plane's first."""
    out = np.zeros(picks.shape[0], np.float64)
    buf = np.empty(tm * R * S, np.int64)
    hw_buf = np.empty(tm * R * S, np.int64)
    for i in range(picks.shape[0]):
        k = 0
        for m in range(picks[i] * tm, min((picks[i] + 1) * tm, M)):
            n = m // (P * Q)
            p = (m // Q) % P
            q = m % Q
            for r in range(R):
                h = p * sh - ph + r * dh
                if h < 0 or h >= H:
                    continue
                for s in range(S):
                    w = q * sw - pw + s * dw
                    if 0 <= w < W:
                        buf[k] = (n * H + h) * W + w
                        k += 1
        lin = np.unique(buf[:k])
        if not nchw:
            out[i] = _run_sectors(lin, lin.shape[0], 0, C * eb, sec)
            continue
        total = 0
        j = 0
        prev_n = -1
        prev_last = 0
        plane = H * W * eb
        while j < lin.shape[0]:                     # one image n at a time: its planes' pixel offsets
            n = lin[j] // (H * W)
            e = j
            while e < lin.shape[0] and lin[e] // (H * W) == n:
                hw_buf[e - j] = lin[e] - n * H * W
                e += 1
            lo, hi = hw_buf[0] * eb, hw_buf[e - j - 1] * eb + eb - 1
            for c in range(min(C, sec)):            # plane offsets modulo the sector repeat every sec planes
                base = ((n * C + c) * plane) % sec
                total += (C - c + sec - 1) // sec * _run_sectors(hw_buf, e - j, base, eb, sec)
                # a sector that plane c's last element shares with plane c + 1's first: counted once
                if c < C - 1 and (base + hi) // sec == (base + plane + lo) // sec:
                    total -= (C - 1 - c + sec - 1) // sec
            # and the last plane of image n - 1 with the first of image n, when the tile reads both
            if prev_n == n - 1:
                base = ((n * C - 1) * plane) % sec
                if (base + prev_last) // sec == (base + plane + lo) // sec:
                    total -= 1
            prev_n, prev_last = n, hi
            j = e
        out[i] = total
    return out


@memo()
def cta_sectors(layer, kernel, sec) -> float:
    """Distinct A sectors over the grid's CTAs of one CTA column (each tile's, summed; exact on up to
    `_SECTOR_SAMPLES` tiles evenly spaced along M, which stand for the others: a cost independent of the
    batch). fprop."""
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    M, tm = layer.gemm_m, min(kernel.tile_m, layer.gemm_m)
    picks, stands = tile_samples(M, tm, _SECTOR_SAMPLES)
    counts = tile_sectors(picks, tm, M, layer.p, layer.q, layer.c, layer.h, layer.w, layer.r, layer.s, sh, sw,
                          ph, pw, dh, dw, kernel.elem_bytes, sec, kernel.layout == "nchw")
    return float(np.dot(stands, counts))
