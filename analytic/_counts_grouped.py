"""Exact L1 load counts of grouped fprop (nhwc; traces/KERNELS.md, "Grouped and depthwise fprop"), in closed
form: the dense method of `_counts_fprop._l1_nhwc` with the channel blocks of every CTA column.

A: CTA column tn walks its groups g = tn TN / K_g + gi (gi < GPC), each in channel blocks [g C_g + c0,
+ TK) clipped to C; a block's requests and sectors over the rows of a filter position's box depend on its
first byte only modulo 32 and on its width, so the blocks of all columns are gathered into classes
(first byte mod 32, width) with their multiplicity (`grouped_a_blocks`) -- a loop over the columns' blocks,
not over N, P or Q. B: in k-step (gi, c0, r, s) of column tn the tile rows gi K_g .. gi K_g + K_g - 1 (every
row under kSingleGroup) read local channels [c0, c0 + TK) below C_g of filters C_g R S elements apart; the
columns are the "images" of one `_box_operand` call per class of groups (`_l1_grouped`).

Also the grouped model's count of the distinct input pixels of sampled M tiles (`tile_pixel_counts`).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from simcore._jit import njit

from ._counts import SEC, _blocks
from ._counts_fprop import _a_nhwc
from ._groups import _box_operand
from ._memo import memo
from ._reuse import tile_pixel_stamps

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py, _counts_fprop.py and _groups.py. tests/test_jit_deps.py checks this digest of
# them: updating the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "145c4e288e6cf927"


@functools.lru_cache(maxsize=256)
def grouped_a_blocks(layer, kernel, gpc: int) -> np.ndarray:
    """A's channel blocks over every CTA column: rows (first channel, width, multiplicity), one per class
    of (first byte mod 32, width); read-only (cached)."""
    cg, kg, tk, eb = layer.c_per_group, layer.k_per_group, kernel.tile_k, kernel.elem_bytes
    tiles_n = -(-layer.k // kernel.tile_n)
    groups = (np.arange(tiles_n)[:, None] * kernel.tile_n // kg + np.arange(gpc)[None, :]).ravel()
    starts = (groups[:, None] * cg + np.arange(0, cg, tk)[None, :]).ravel()
    starts = starts[starts < layer.c]
    widths = np.minimum(tk, layer.c - starts)
    keys = (starts * eb % SEC) * (tk + 1) + widths
    _, first, mult = np.unique(keys, return_index=True, return_counts=True)
    out = np.stack([starts[first], widths[first], mult], axis=1).astype(np.int64)
    out.setflags(write=False)
    return out


@njit(cache=True)
def _l1_grouped(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, tile_m, tile_n, tile_k, CG, KG, gpc, period,
                blocks_a, tpl_a, tpl_b):
    """[reqA, secA, reqB, secB, valid A (row, r, s, block) over all columns, valid (m, r, s) count].

    B: the gi-th group's box of tile rows [gi K_g, gi K_g + K_g) counts alike for gi ``period`` apart (its
    first row then moves by a multiple of every template's group of rows and of 32 bytes); the partial last
    column holds whole groups (its K - full_n T_n rows are a multiple of K_g), so a group's box is in it
    or not, and counts as one more "image" where it is."""
    res = np.zeros(6, np.int64)
    tiles_m = (N * P * Q + tile_m - 1) // tile_m
    full_n = K // tile_n                      # CTA columns with every tile row below K
    in_last = (K - full_n * tile_n) // KG     # groups of the partial last column
    blocks_b = _blocks(CG, tile_k, eb)
    # A: each column's blocks are in blocks_a's multiplicities
    _a_nhwc(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, eb, blocks_a, 1, tpl_a, res)
    pitch = R * S * CG * eb                   # bytes between filters
    split = min(in_last, gpc)
    for rs in range(R * S):
        for part in range(2):
            g0, g1, images = (0, split, full_n + 1) if part == 0 else (split, gpc, full_n)
            for gi in range(g0, min(g1, g0 + period)):
                mult = (g1 - 1 - gi) // period + 1
                lo = gi * KG
                hi = min(lo + KG, tile_n) - 1
                for bi in range(blocks_b.shape[0]):
                    rq, sc = _box_operand(images, 1, tile_n, 0, 0, lo, hi, tile_n * pitch, 0, pitch,
                                          rs * CG * eb + blocks_b[bi, 0] * eb, blocks_b[bi, 1], eb, tpl_b)
                    res[2] += mult * blocks_b[bi, 2] * rq * tiles_m
                    res[3] += mult * blocks_b[bi, 2] * sc * tiles_m
    return res


def grouped_counts(layer, kernel) -> dict:
    """`_counts.l1_counts` of a grouped fprop layer (arguments already validated)."""
    from traces.grouped import groups_per_cta
    from ._counts_fprop import _stores
    from ._groups import T_FIRST, T_G, kernel_templates
    gpc = groups_per_cta(layer, kernel)
    (sh, sw), (ph, pw), (dh, dw) = layer.stride, layer.pad, layer.dilation
    eb = kernel.elem_bytes
    tpl_a, tpl_b = kernel_templates(kernel)
    rows = math.lcm(SEC, *(int(tpl_b[t, T_G]) for t in range(int(tpl_b[0, T_FIRST]))))
    period = rows // math.gcd(layer.k_per_group, rows)    # groups after which B's boxes count alike
    res = _l1_grouped(layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, sh, sw, ph, pw, dh, dw,
                      layer.p, layer.q, eb, kernel.tile_m, kernel.tile_n, kernel.tile_k, layer.c_per_group,
                      layer.k_per_group, gpc, period, grouped_a_blocks(layer, kernel, gpc), tpl_a, tpl_b)
    st = _stores(layer.n, layer.k, layer.p, layer.q, eb, kernel.tile_m, kernel.tile_n, False, 1, 32)
    return {"req_A": int(res[0]), "sec_A": int(res[1]), "req_B": int(res[2]), "sec_B": int(res[3]),
            "valid_a_elems": int(res[4]), "valid_mrs": int(res[5]),
            "req_C": int(st[0]), "sec_C": int(st[1])}


def tile_pixel_counts(picks, tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw):
    """The distinct in-image input pixels (n, h, w) that the output rows m of each tile in ``picks``
    (rows tile tm .. min((tile + 1) tm, M) - 1, m = (n P + p) Q + q) read over every filter position
    (`_reuse.tile_pixel_stamps`, compiled: measured on the 63 grouped cases of random seeds 1-3, numpy's
    unique over each tile's taps took 2.6 of a prediction's 4.2 ms; compiled, 236 -> 1,030 predictions/s)."""
    return tile_pixel_stamps(picks, np.ones(picks.shape[0]), tm, M, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw,
                             False, False)[0]


@memo()
def block_lines(layer, kernel, line) -> tuple:
    """(each channel block's lines a pixel, mean over the pixels' alignments to the line, at most the pixel's;
    the index of its first line and of its last, per block and alignment): `_grouped_model._window_lines`'
    blocks, in order (group, block). Memoized, read-only (`_grouped_model._class_lines` reads them once for each
    CTA distance: 50 us a call, a tenth of a grouped pass, measured)."""
    return _block_lines(layer.c, layer.c_per_group, kernel.tile_k, kernel.elem_bytes, line)


@functools.lru_cache(maxsize=1024)
def _block_lines(c, cg, tk, eb, line) -> tuple:
    """`block_lines` of C channels in groups of ``cg``."""
    starts = (np.arange(c // cg)[:, None] * cg + np.arange(0, cg, tk)[None, :]).ravel()
    widths = np.minimum(tk, c - starts)
    pitch = c * eb
    period = line // math.gcd(pitch, line)
    aligns = (np.arange(period) * pitch) % line
    begin = aligns[None, :] + (starts * eb)[:, None]
    first, last = begin // line, (begin + (widths * eb)[:, None] - 1) // line
    lines = np.minimum((last - first + 1).mean(axis=1), max(pitch / line, 1e-9))
    for a in (lines, first, last):
        a.setflags(write=False)
    return lines, first, last


def block_classes(layer, kernel, line) -> tuple:
    """(The classes' lines a pixel, ascending; each channel block's class, group by group): `block_lines`' blocks
    by their mean lines a pixel (rounded to 1e-6), `_grouped_model._window_lines`' classes and the bins of
    `_l1_rounds.sweep_miss_shares`."""
    return block_class_index(layer.c, layer.c_per_group, kernel.tile_k, kernel.elem_bytes, line)


@functools.lru_cache(maxsize=1024)
def block_class_index(c, cg, tk, eb, line) -> tuple:
    """`block_classes` of C channels in groups of ``cg`` (the index read-only)."""
    values, index = np.unique(np.round(_block_lines(c, cg, tk, eb, line)[0], 6), return_inverse=True)
    index = index.astype(np.int64)
    index.setflags(write=False)
    return tuple(values.tolist()), index
