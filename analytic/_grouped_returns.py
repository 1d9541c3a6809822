"""A grouped layer's tiles back on their SM: first reads that find their sectors in the L1 (MODEL.md section 6a).

The grouped model counts each CTA's first reads of its input sectors as L1 misses (`_grouped_model.a_misses`).
But the dispatcher hands SM s the blocks s, s + sms, s + 2 sms, ... (DESIGN section 3: refill passes over the
SMs in order; a grid of equal CTAs runs in lockstep), so tile_m comes back to an SM every tiles_m / gcd(sms,
tiles_m) of its CTAs (swizzle 0), each time with another CTA column. Where that column reads sectors an earlier
CTA of the SM read for the same tile (its group, or a group sharing the sector) and the L1 still holds them, its
first reads hit. Seed 68 #79 (grouped 1x1, C 16 fp32 in 4 groups, K 2048, 256-row tiles: 110 tiles_m on 132
SMs, 2 CTAs an SM; one k-step a CTA): an SM sees 5 tile_m's, each back every 5 of its CTAs, 640 lines in all
against a 736-line L1, and every one of the 75 % of A's reads that are not the SM's first hits
(`validation.l1_replay --random-case 68:79 --sm 0`); the model had none.

`returning_share` follows `SM_SAMPLES` SMs (evenly spread) through their first `SEQ_CTAS` CTAs each, sector by
sector of a pixel: a CTA's first read of sector k of its tile's pixels hits where the SM's last CTA of that tile
whose column covers k is followed, tile touch by tile touch, by windows that fit the L1 (the lines of the other
tiles' CTAs between, each tile once at the widest of its columns, and every CTA's filter lines: the L1 ramp of
`_counts._ramp`, the same ``l1_hit_lo`` / ``l1_hit_hi`` as the dense engine's). The lines of a tile are its
pixels (`_grouped_model._tile_pixels`, the mean) times the lines a pixel's covered channels touch.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit

from ._common import cdiv, even_picks
from ._counts import _ramp
from ._memo import memo
from ._schedule import tile_of

__all__ = ["returning_share", "SM_SAMPLES", "SEQ_CTAS"]

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel modules it calls
# into (`_counts._ramp`, `_schedule.tile_of`; tests/test_jit_deps.py) changes this file with them
_JIT_DEPS_SHA256 = "9b03d123341b55eb"

#: SMs whose CTA sequences `returning_share` follows (evenly spread)
SM_SAMPLES = 4
#: CTAs of each followed SM (the first; later ones repeat the pattern)
SEQ_CTAS = 48


@njit(cache=True)
def _window_lines(seq_tm, seq_tn, first, last, skip_tm, tile_lines, b_lines):
    """Distinct lines the SM touches after CTA ``first``'s A reads and before CTA ``last``'s: the filter lines of
    CTAs first .. last - 1 (a k-step reads A, then B: DESIGN section 3), the A lines of CTAs first + 1 .. last - 1
    but tile ``skip_tm``'s, each other tile once, at the widest of its columns there."""
    lines = b_lines * (last - first)
    for u in range(first + 1, last):
        if seq_tm[u] == skip_tm:
            continue
        seen = False
        for v in range(first + 1, u):
            if seq_tm[v] == seq_tm[u]:
                seen = True
                break
        if seen:
            continue
        widest = 0.0
        for v in range(u, last):
            if seq_tm[v] == seq_tm[u]:
                widest = max(widest, tile_lines[seq_tn[v]])
        lines += widest
    return lines


@njit(cache=True)
def _returning_hits(sm_list, sms, ctas, tiles_m, tiles_n, swz, sec_lo, sec_hi, tile_lines, b_lines, cap, lo, hi,
                    most):
    """(first-read sector units that hit, first-read sector units) over the CTAs of the SMs ``sm_list``, one unit a
    sector of a pixel: CTA column c reads sectors [sec_lo[c], sec_hi[c]) of each pixel (none where equal)."""
    seq_tm = np.empty(most, np.int64)
    seq_tn = np.empty(most, np.int64)
    hits = 0.0
    total = 0.0
    for si in range(sm_list.shape[0]):
        n = 0
        b = sm_list[si]
        while b < ctas and n < most:
            tm, tn = tile_of(b, tiles_m, tiles_n, swz)
            seq_tm[n] = tm
            seq_tn[n] = tn
            n += 1
            b += sms
        for j in range(n):
            tm, tn = seq_tm[j], seq_tn[j]
            for k in range(sec_lo[tn], sec_hi[tn]):
                total += 1.0
                back = -1
                for i in range(j - 1, -1, -1):
                    if seq_tm[i] == tm and sec_lo[seq_tn[i]] <= k < sec_hi[seq_tn[i]]:
                        back = i
                        break
                if back < 0:
                    continue
                # the tile's lines survive each window between its touches since then
                keep = 1.0
                prev = back
                for i in range(back + 1, j + 1):
                    if i == j or (seq_tm[i] == tm and tile_lines[seq_tn[i]] > 0.0):
                        window = _window_lines(seq_tm, seq_tn, prev, i, tm, tile_lines, b_lines) + tile_lines[tn]
                        keep = min(keep, _ramp(window / cap, lo, hi))
                        prev = i
                hits += keep
    return hits, total


@memo()
def _columns(layer, kernel, sec, line, tile_pixels, column_channels) -> tuple:
    """Per CTA column: the sectors [lo, hi) of a pixel it reads, its tile's lines (``tile_pixels`` pixels), and the
    filter lines of a CTA. Memoized (`_memo`; read-only arrays): GPU-independent."""
    tn_tiles = cdiv(layer.k, kernel.tile_n)
    eb = kernel.elem_bytes
    pixel = layer.c * eb
    sec_lo = np.zeros(tn_tiles, np.int64)
    sec_hi = np.zeros(tn_tiles, np.int64)
    tile_lines = np.zeros(tn_tiles, np.float64)
    for col in range(tn_tiles):
        channels = column_channels(layer, kernel, col)
        if channels is None:
            continue
        lo_b, hi_b = channels[0] * eb, channels[1] * eb
        sec_lo[col], sec_hi[col] = lo_b // sec, (hi_b - 1) // sec + 1
        # a pixel of a line or more: its channels' bytes over whole lines, a line more for where they start;
        # narrower pixels, read side by side, share their lines
        tile_lines[col] = tile_pixels * ((min(hi_b - lo_b, pixel) + line - 1) / line if pixel >= line else
                                         pixel / line)
    for arr in (sec_lo, sec_hi, tile_lines):
        arr.setflags(write=False)
    b_lines = min(kernel.tile_n, layer.k) * layer.r * layer.s * layer.c_per_group * eb / line
    return sec_lo, sec_hi, tile_lines, float(b_lines)


def returning_share(layer, kernel, gpu, f, machine, tile_pixels, column_channels) -> float:
    """The share of a grouped layer's first A reads (sector units of a pixel, over its CTAs) that find their
    sectors in the L1, left there by an earlier CTA of the same tile on the SM (module docstring).
    ``tile_pixels``: a tile's distinct input pixels (the mean); ``column_channels(layer, kernel, col)``: the
    channels [lo, hi) column ``col`` reads in each pixel, or None."""
    _cps, ways, sets = machine
    tm_tiles = cdiv(layer.gemm_m, kernel.tile_m)
    tn_tiles = cdiv(layer.k, kernel.tile_n)
    ctas = tm_tiles * tn_tiles
    sms = gpu.sms
    if ctas <= sms:
        return 0.0                               # one CTA an SM: nothing comes back
    sec_lo, sec_hi, tile_lines, b_lines = _columns(layer, kernel, gpu.sector_bytes, gpu.line_bytes, tile_pixels,
                                                   column_channels)
    hits, total = _returning_hits(even_picks(sms, min(SM_SAMPLES, sms)), sms, ctas, tm_tiles, tn_tiles,
                                  kernel.swizzle_log, sec_lo, sec_hi, tile_lines, b_lines, float(ways * sets),
                                  float(f.l1_hit_lo), float(f.l1_hit_hi), SEQ_CTAS)
    return hits / total if total > 0.0 else 0.0
