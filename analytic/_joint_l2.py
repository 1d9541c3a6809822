"""The L2 window of an A reuse one to four k-steps back, counted with the filter lines where they land, at the
places where the waves' windows start (MODEL.md sections 3 and 9, tenth session). Numpy, memoized.

`_reuse.miss_rows` judges a within-CTA A reuse that misses the L1 against the L2 on the wave's window: A lines
(``l2cls`` column 0 x the CTA's window) plus d rounds of the wave's filter lines (column 2). Where A's rows skip
lines (a channel block narrower than a pixel of several lines, nhwc), `_l2.pattern_cliff` counts A's own lines
set by set through the GPU's slice and set functions, from line 0, and the filter lines were added to its x as
though they filled the sets as evenly as A's. Neither holds.

* The filter lines land in sets of their own addresses. Where A's lines fill every set to just under the ways,
  the few sets that also get a filter line overflow, and A's lines there miss; where A's lines fill only some
  sets to the brim, the filter lines may land in the others. Seed 67 #51 (C 1024 fp16, lines 16 apart, a v100
  with a quarter of its L2): the wave's A lines at one channel block are 0.94 of the L2 and the filter lines
  0.02; counted with the filter rows' own lines (`tensor_bases`: w after x), 9.1 % of A's lines sit in sets
  over the ways, at every channel block (replayed, `validation.l2_replay`: 13 % of the reuses one k-step back
  miss the L2; the pattern table: none). Seed 36 #91 (C 256 fp32, lines 8 apart, a p100 with a quarter of its
  L2): at x = 0.51 every A line sits in a set holding the ways and the filter lines land in none of them;
  replayed, none of those reuses miss. Spreading the filter lines evenly but apart from A's (a probe) gave
  67 #51 -42.7 -> -13.7 % but 36 #91 0.0 -> +46.2 %: only their addresses decide.
* The xor hash folds a line's bits 14 and up into its slice: a pattern that spreads evenly from line 0 may put
  every line of a window further on in overfull sets. Seed 64 #47 (lines 4 apart, a p100 with a quarter of its
  L2): a window of 0.44 L2s has none of its lines in overfull sets from line 0, all of them from line 26,364.
  A's window is therefore counted from the rows where the grid's waves start (`wave_places`: at most
  `JOINT_PLACES` waves), where it fits in x (row 0 always: a window that spans the whole tensor has one place,
  67 #51's and 36 #91's). Places spread evenly over x instead (a probe) moved vgg16 on a v100 with half its L2
  by up to 8 points where no wave's window starts.

Counted for fprop (A = x from byte 0, B = w's filter rows, `traces.stream.tensor_bases`): the filter lines of
the first wave's distinct tile columns for d = 1 .. `JOINT_ROUNDS` consecutive k-steps, from each of the first
`JOINT_STEPS` k-steps (taps, then channel blocks: CUTLASS's order, DESIGN section 3), averaged. Only where a
class's window one k-step back reaches `JOINT_X_MIN` of the L2: the tables cost 17-23 ms a layer shape on the
random cases' small L2s.
"""
from __future__ import annotations

import math

import numpy as np

from traces.stream import tensor_bases

from ._l2 import PATTERN_X, _block_residues, _set_ids, pattern_lines
from ._memo import memo

__all__ = ["JOINT_X_MIN", "JOINT_STEPS", "JOINT_ROUNDS", "JOINT_PLACES", "joint_tables", "joint_columns", "wave_places"]

#: a window one k-step back below this share of the L2 (A and filter lines) is left to the pattern table: no set
#: fills (the fprop networks of the benchmark on the stock GPUs have none above it; 36 #91 sits at 0.51)
JOINT_X_MIN = 0.5
#: the k-steps whose filter offsets are averaged
JOINT_STEPS = 4
#: A's window from the first rows of at most this many waves (spread over the grid's), averaged where it fits (the
#: seventh session found the xor hash's spread depends on the place: 64 #47's rounds of lines 4 apart fill their
#: sets evenly from line 0, and put every line in a set of 7 over 4 ways from line 57,344; MODEL.md section 8)
JOINT_PLACES = 8
#: windows of 1 .. JOINT_ROUNDS k-steps are tabulated (further back, the pattern's cliff with the filter lines in
#: its x, as before)
JOINT_ROUNDS = 4


def joint_tables(gpu, capacity: float, pitch: int, width: int, places: tuple, span: int, b_lines: tuple) -> np.ndarray:
    """P(miss) of A's pattern window at each PATTERN_X (A's lines only, in useful L2s) with filter lines in the
    same sets: the share of A's lines in sets holding more than the ways of A's and the filter's together. One
    row per entry of ``b_lines`` (a window's rounds: a tuple of line arrays, one per k-step it may start at,
    averaged). A's window is ``width`` bytes every ``pitch`` from pixel p0 on, for each p0 of ``places``
    (multiples of the pattern's period, 0 first), averaged over the places where it fits in the tensor's
    ``span`` pixels (p0 = 0 always: there the pattern runs on, as `_l2.pattern_cliff`'s)."""
    slices, sets, ways, index, line = gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index, gpu.line_bytes
    nsets = slices * sets
    cap = nsets * ways * capacity
    step, residues = _block_residues(pitch, ((0, width),), line)
    period = line // math.gcd(pitch, line)             # pixels a period of the pattern: ``step`` lines on
    per = len(residues)
    need = int(PATTERN_X[-1] * cap) + 1
    f = np.maximum(1, (PATTERN_X * cap).astype(np.int64))
    # the filter lines' sets: per round count and start, their lines in each set of the union
    sids = [[_set_ids(np.asarray(x, np.int64), slices, sets, index) for x in steps] for steps in b_lines]
    union = np.unique(np.concatenate([x for steps in sids for x in steps] + [np.zeros(0, np.int64)]))
    # one row a (round, start) and the rounds' weights over them (their starts averaged): one product a prefix
    cb = np.zeros((sum(len(steps) for steps in sids), union.shape[0]), np.int64)
    avg = np.zeros((len(sids), cb.shape[0]), np.float64)
    row = 0
    for d, steps in enumerate(sids):
        for x in steps:
            cb[row] = np.bincount(np.searchsorted(union, x), minlength=union.shape[0])
            avg[d, row] = 1.0 / len(steps)
            row += 1
    total = np.zeros((len(b_lines), f.shape[0]), np.float64)
    weight = np.zeros(f.shape[0], np.float64)
    for p0 in places:
        avail = need if p0 == 0 else (span - p0) // period * per        # the tensor's lines from p0 on
        count = min(need, avail)
        if count < 1:
            continue
        lines = pattern_lines(step, residues, count, p0 // period * step)
        sid = _set_ids(lines, slices, sets, index)
        counts = np.zeros(nsets, np.int64)
        done = 0
        for j in range(1, f.shape[0]):
            if f[j] > count:
                break                                   # the window runs past the tensor's end: not this place
            counts += np.bincount(sid[done:f[j]], minlength=nsets)
            done = f[j]
            over = float((counts * (counts > ways)).sum())
            ca = counts[union]
            # A's lines that each round's filter lines push over the ways (those already over: ``over``)
            pushed = avg @ (ca * ((ca + cb > ways) & (ca <= ways))).sum(axis=1)
            total[:, j] += (over + pushed) / f[j]
            weight[j] += 1.0
    return total / np.maximum(weight, 1.0)


def _filter_lines(layer, kernel, line, columns, rounds=1):
    """The filter lines of ``columns`` tile columns from the first that ``rounds`` consecutive k-steps read,
    from each of the first `JOINT_STEPS` k-steps (fprop: the taps of a channel block, then the next block;
    their offsets in a filter row)."""
    eb = kernel.elem_bytes
    _x, w_base, _y = tensor_bases(layer, kernel)
    frow = layer.r * layer.s * layer.c * eb
    rows = np.arange(min(layer.k, columns * kernel.tile_n), dtype=np.int64)
    width = min(layer.c, kernel.tile_k) * eb
    taps = layer.r * layer.s
    ksteps = taps * -(-layer.c // kernel.tile_k)
    out = []
    for q in range(min(JOINT_STEPS, max(1, ksteps - rounds + 1))):
        parts = []
        for u in range(q, min(q + rounds, ksteps)):
            off = (u % taps) * layer.c * eb + (u // taps) * kernel.tile_k * eb
            parts.append((w_base + rows * frow + off) // line)
            parts.append((w_base + rows * frow + off + width - 1) // line)
        out.append(np.unique(np.concatenate(parts)))
    return tuple(out)


def wave_places(tiles_m, tiles_n, swz, per_wave, tile_m, period):
    """The GEMM rows where waves' tiles start, in block order (CUTLASS's identity swizzle, DESIGN section 3: block
    b is tile_m (b mod (tiles_m << swz)) >> swz), rounded down to the pattern's ``period``: at most `JOINT_PLACES`
    waves, spread over the grid's, wave 0 (row 0) first."""
    waves = -(-tiles_m * tiles_n // per_wave)
    n = min(waves, JOINT_PLACES)
    picks = {i * (waves - 1) // (n - 1) for i in range(n)} if n > 1 else {0}
    return tuple(sorted({(((w * per_wave) % (tiles_m << swz)) >> swz) * tile_m // period * period for w in picks}))


@memo(256)
def _joint_rows(layer, kernel, gpu, capacity, pitch, width, columns, places):
    """`joint_tables` of the windows of 1 .. `JOINT_ROUNDS` k-steps with ``columns`` tile columns' filter lines,
    at ``places`` (`wave_places`), one row (memoized by layer shape: a class's window and its halo's share it)."""
    span = layer.n * layer.h * layer.w * layer.c * kernel.elem_bytes // pitch
    out = joint_tables(gpu, capacity, pitch, width, places, span,
                       tuple(_filter_lines(layer, kernel, gpu.line_bytes, columns, d)
                             for d in range(1, JOINT_ROUNDS + 1))).ravel()
    out.setflags(write=False)
    return out


def joint_columns(layer, kernel, gpu, f, l2cls, tile_lines, b_lines_round, cap_lines, pitch, width, grid=None):
    """``l2cls`` (`_schedule.l2_classes`' rows, with the followers' columns 4 and 5 or zeros there) and, per row,
    `joint_tables` of its windows d = 1 .. `JOINT_ROUNDS` k-steps back, ``PATTERN_N`` columns each: the wave's
    distinct tile columns (column 2 over one CTA's ``b_lines_round``) of filter lines for d k-steps, A's window from
    the waves' first rows (``grid`` = (tiles_m, tiles_n, swizzle_log, CTAs a wave, tile_m): `wave_places`; row 0
    alone where None). None where no class's window one k-step back (A: ``tile_lines`` a CTA, at most column 1; a
    round's filter lines) reaches `JOINT_X_MIN` of the L2: there no set fills, and the tables (some milliseconds)
    are not needed."""
    if l2cls.shape[0] == 0 or l2cls[0, 0] <= 0.0 or b_lines_round <= 0.0:
        return None
    near = False
    for c in range(l2cls.shape[0]):
        if min(l2cls[c, 0] * tile_lines, l2cls[c, 1]) + l2cls[c, 2] >= JOINT_X_MIN:
            near = True
    if not near:
        return None
    # the rows where the waves start (``grid``: tiles_m, tiles_n, swizzle, CTAs a wave, tile_m); row 0 alone without
    places = (0,) if grid is None else wave_places(*grid, gpu.line_bytes // math.gcd(pitch, gpu.line_bytes))
    rows = [_joint_rows(layer, kernel, gpu, float(f.l2_capacity), pitch, width,
                        max(1, int(round(l2cls[c, 2] * cap_lines / b_lines_round))), places)
            for c in range(l2cls.shape[0])]
    head = np.zeros((l2cls.shape[0], 6), np.float64)
    head[:, :min(6, l2cls.shape[1])] = l2cls[:, :6]
    return np.ascontiguousarray(np.hstack([head, np.array(rows)]))
