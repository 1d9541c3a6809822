"""A grouped layer's filter lines between two reads of a pixel (MODEL.md section 6a, "the filter lines between"):
how many lines a round of filter rows reads, at the rows' own alignments to a line (`round_lines`), and how many
of them land in the L1 set of the re-read pixel line (`in_set_ratio`): where the filter rows are whole lines
apart, a round's rows reach a few sets only, and where the pixels are whole lines too, those sets keep a fixed
place beside the pixel lines' (both move with the channel block), so the filter lines of a round may all fall in
the re-read's set, or none.
"""
from __future__ import annotations

import collections
import functools
import math

import numpy as np

from traces import tensor_bases
from traces.grouped import group_mode

from ._common import even_picks
from ._memo import memo

_GROUP_SAMPLES = 16         # groups of the layer whose rounds are counted (evenly spaced)
_BLOCK_SAMPLES = 8          # channel blocks of a group


def filter_rows(layer, kernel) -> int:
    """Filter rows a CTA reads in a round: its group's K_g (kMultipleGroup), else its T_n filters."""
    return layer.k_per_group if group_mode(layer, kernel) == "multiple" else min(kernel.tile_n, layer.k)


def _blocks(layer, kernel) -> range:
    return range(0, layer.c_per_group, kernel.tile_k)


@memo()
def round_lines(layer, kernel, line) -> float:
    """Distinct filter lines a CTA reads in one round: each of its K rows (`filter_rows`, R S C_g e = P bytes
    apart) reads its k-step's channels, w = min(T_k, C_g - c0) e bytes at offset (t C_g + c0) e, the rows of a
    round starting K P bytes past the previous CTA column's or group's (so at the multiples of gcd(K P, 128)
    past the tap's and block's offset). Where the gap between two rows, P - w, is 127 bytes or more no line
    holds bytes of two rows, and each row's lines are counted at its own alignments (`_row_lines`); where it is
    126 or less no line fits between two rows, and the round touches every line from its first byte to its
    last. The mean over the rounds' taps and channel blocks. Seed 7 #47 (C_g 32 fp32, 1x7: 896-byte rows, taps
    128 bytes apart) reads one line a filter and round (64 a k-step in the stream), where the mean over every
    alignment said 1.99; 16 filters of 8 fp32 channels, 1x1, are 512 contiguous bytes: 4 lines, not 16."""
    eb = kernel.elem_bytes
    rows = filter_rows(layer, kernel)
    pitch = layer.r * layer.s * layer.c_per_group * eb
    start = rows * pitch
    step = math.gcd(start, line)
    period = line // math.gcd(pitch, line)          # rows before their alignments repeat
    taps = collections.Counter(t * layer.c_per_group * eb % step for t in range(layer.r * layer.s))
    blocks = collections.Counter((min(kernel.tile_k, layer.c_per_group - c0) * eb, c0 * eb % step)
                                 for c0 in _blocks(layer, kernel))
    total = 0.0
    for (width, block_off), n_block in blocks.items():
        for tap_off, n_tap in taps.items():
            off = (block_off + tap_off) % step
            if pitch - width <= line - 2:            # every line of the round's span
                lines = _row_lines((rows - 1) * pitch + width, start, 0, off, line)
            elif rows >= period:                     # the rows run over their alignments' period
                lines = rows * _row_lines(width, pitch, 0, off, line)
            else:
                lines = sum(_row_lines(width, start, 0, off + k * pitch, line) for k in range(rows))
            total += n_block * n_tap * lines
    return total / (sum(blocks.values()) * layer.r * layer.s)


@functools.lru_cache(maxsize=1024)
def _row_lines(width, pitch, tap, offset, line) -> float:
    """Mean lines of ``width`` bytes read at ``offset`` + t ``tap`` bytes into rows ``pitch`` bytes apart, over
    the alignments to a line that the rows and taps t give: their offsets modulo the line are the multiples
    of gcd(pitch, tap, line) past offset's residue, each as often over whole periods (``tap`` 0: the rows
    alone)."""
    step = math.gcd(math.gcd(pitch, tap), line)
    starts = range(offset % step, line, step)
    return sum((o + width - 1) // line + 1 for o in starts) / len(starts)


@memo()
def in_set_ratio(layer, kernel, sets, line) -> float:
    """A round's filter lines in the L1 set of a re-read pixel line, over their mean a set (round_lines / sets):
    1 unless both the pixel pitch (C e) and the filter row (R S C_g e) are whole lines. Then pixel p's line j of
    the k-step's channel block lies in set (p C e / 128 + (g C_g + c0) e / 128 + j) mod sets, and filter row f's
    line j' in (w_base / 128 + f R S C_g e / 128 + (t C_g + c0) e / 128 + j') mod sets (x at byte 0, w at
    w_base: DESIGN "Tensor placement"), both moving with the channel block c0. Counted over the rounds (taps t,
    channel blocks c0, groups g, sampled) and the pixels' classes: the mean of the filter lines in each pixel
    line's set, over round_lines / sets. Seed 5 #317 (C 512 fp32: 2,048-byte pixels, 9,216-byte filter rows):
    every filter line of a round lands in the re-read's set, 4 times the mean (replayed: A's re-reads one tap
    on at 2.0 of the ways)."""
    eb = kernel.elem_bytes
    unit = layer.c * eb
    pitch = layer.r * layer.s * layer.c_per_group * eb
    if unit % line or pitch % line:
        return 1.0
    rows = filter_rows(layer, kernel)
    multiple = group_mode(layer, kernel) == "multiple"
    w_line = tensor_bases(layer, kernel)[1] // line
    # filter rows' first lines a round, by set, relative to the round's first row; pixels' first lines by set
    rows_in_set = np.bincount(np.arange(rows) * (pitch // line) % sets, minlength=sets).astype(np.float64)
    period = sets // math.gcd(unit // line, sets)
    pixels_in_set = np.bincount(np.arange(period) * (unit // line) % sets, minlength=sets) / period
    # corr[delta]: filter rows in the set of a pixel line delta sets past the rows' first line
    corr = np.array([pixels_in_set @ np.roll(rows_in_set, delta) for delta in range(sets)])
    # the CTAs' rounds: kMultipleGroup, group g's (its K_g filters); kSingleGroup, CTA column j's (T_n filters
    # from j T_n, in group j T_n / K_g)
    units = layer.groups if multiple else -(-layer.k // kernel.tile_n)
    unit_ids = even_picks(units, min(units, _GROUP_SAMPLES))
    blocks = np.array(list(_blocks(layer, kernel)), np.int64)
    blocks = blocks[even_picks(blocks.size, min(blocks.size, _BLOCK_SAMPLES))]
    u, c0, t = np.meshgrid(unit_ids, blocks, np.arange(layer.r * layer.s), indexing="ij")
    u, c0, t = u.ravel(), c0.ravel(), t.ravel()
    first_filter = u * layer.k_per_group if multiple else u * kernel.tile_n
    g = first_filter // layer.k_per_group
    # A: the block's bytes in the pixel, clipped to C; B: the block's bytes in the filter row, clipped to C_g
    a_start = (g * layer.c_per_group + c0) * eb
    a_end = np.minimum(a_start + kernel.tile_k * eb, unit)
    b_start = w_line * line + first_filter * pitch + (t * layer.c_per_group + c0) * eb
    b_end = b_start + np.minimum(kernel.tile_k, layer.c_per_group - c0) * eb
    a_first, a_lines = a_start // line, (a_end - 1) // line - a_start // line + 1
    b_first, b_lines = b_start // line, (b_end - 1) // line - b_start // line + 1
    total = np.zeros(g.shape)
    for j in range(int(a_lines.max())):
        for jb in range(int(b_lines.max())):
            delta = (a_first + j - b_first - jb) % sets
            total += np.where((j < a_lines) & (jb < b_lines), corr[delta], 0.0)
    in_set = float((total / a_lines).mean())
    mean = float((rows * b_lines).mean()) / sets
    return in_set / mean if mean > 0.0 else 1.0
