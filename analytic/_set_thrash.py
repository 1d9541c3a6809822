"""Filter lines that overfill an L2 set within one CTA's k-step (MODEL.md section 3, "Overfull sets").

A CTA column's CTAs read the same filter lines at each k-step, in the same order, one CTA after the other
in a round (DESIGN section 3). Where more than ``ways`` of one k-step's lines fall in one L2 set (the
slice hash and the set index of the GPU, DESIGN section 4), each CTA's reads of them evict one another in
turn (LRU, read cyclically): every read of those lines misses, by every CTA, whatever the L2's size. With
16 or more ways no realistic k-step gets there; a hypothetical L2 of few ways does. Seed 2 #121 (nchw fp16
5x5, 256 filters a CTA, rows 50 lines apart, p100 with a quarter of its L2 in 64 slices of 64 sets x 2 ways):
28-31 sets take two of a k-step's 256 lines and one k-step in five has sets of three; those lines' reads
miss, 4.16 sectors a CTA k-step over the layer, 163,072 in all, where the simulation misses 163,160 of those
reads (`validation.l2_replay`: the filter's reads by another CTA at the same k-step).

The k-step's lines are counted exactly, through the GPU's own functions (`_l2._set_ids`), at up to
`STEP_SAMPLES` k-steps spread over the CTA's walk; the A lines of the k-step are left out (in that case
they would move the count by 0.4 sectors a k-step, the simulation agrees without them). The count runs
where it can find something: more of a k-step's lines than ways, and (the xor index) a screen that lines
dropped at random would overfill some set (`OVERFULL_SCREEN`); the linear index, whose sets a row pitch of
a power of two can put every row in one of, is always counted.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from traces.stream import tensor_bases

from ._l2 import _set_ids

__all__ = ["b_overfull_share", "STEP_SAMPLES"]

# k-steps whose filter lines are counted (evenly spread over the walk; 2 #121's 50 line offsets: 4.16
# sectors a k-step from all of them)
STEP_SAMPLES = 16

_XOR, _LINEAR = "xor", "linear"


def overfull_sectors(rows, offsets, widths, base, slices, sets, ways, index, line, sector):
    """(Sectors of the k-steps' lines that lie in an L2 set holding more than ``ways`` of that k-step's
    lines, every sector read), summed over the k-steps: k-step i reads ``widths[i]`` bytes at ``base +
    rows[j] + offsets[i]`` for every row j. The sets are the GPU's own (`_l2._set_ids`, ``index`` "xor" or
    "linear"); rows closer than a line share its sectors, counted once. Numpy: it runs only past the screen
    (`_screen_floor`), on few-way L2s."""
    over = total = 0
    for off, width in zip(offsets.tolist(), widths.tolist()):
        first = (base + rows + off) // sector
        count = (base + rows + off + width - 1) // sector - first + 1
        # every sector each row reads, then the distinct ones and their lines
        step = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        secs = np.unique(np.repeat(first, count) + step)
        lines, per_line = np.unique(secs // (line // sector), return_counts=True)
        sid = _set_ids(lines, slices, sets, index)
        occ = np.bincount(sid, minlength=slices * sets)
        over += int(per_line[occ[sid] > ways].sum())
        total += int(secs.shape[0])
    return over, total


def _spread(count, samples):
    """Up to ``samples`` indices spread evenly over range(count)."""
    if count <= samples:
        return np.arange(count, dtype=np.int64)
    return (np.arange(samples, dtype=np.int64) * count) // samples


def b_step_pattern(layer, kernel):
    """A CTA's filter reads of one k-step, for the first CTA column: (row byte offsets, byte offsets of the
    sampled k-steps, their widths), relative to the filter tensor; None where the op reads the filter
    otherwise (strided dgrad's sub-problems, wgrad). fprop: the column's tile_n filters, at k-step (r s, c
    block) its channel block (nhwc) or tile_k elements of the C R S row (nchw); unit-stride dgrad: tile_k
    filters k of block k0 (folded into the offset), the column's tile_n channels of position (r, s)."""
    eb = kernel.elem_bytes
    C, K, RS = layer.c, layer.k, layer.r * layer.s
    tn, tk = kernel.tile_n, kernel.tile_k
    pitch = RS * C * eb
    if kernel.op == "fprop" and layer.groups == 1:
        rows = np.arange(min(tn, K), dtype=np.int64) * pitch
        if kernel.layout == "nhwc":
            nblk = -(-C // tk)
            steps = _spread(RS * nblk, STEP_SAMPLES)
            rs, cb = steps // nblk, steps % nblk
            offsets = rs * C * eb + cb * tk * eb
            widths = np.minimum(tk, C - cb * tk) * eb
        else:
            steps = _spread(-(-C * RS // tk), STEP_SAMPLES)
            offsets = steps * tk * eb
            widths = np.minimum(tk, C * RS - steps * tk) * eb
        return rows, offsets, widths.astype(np.int64)
    if kernel.op == "dgrad" and layer.groups == 1 and layer.stride == (1, 1) and kernel.layout == "nhwc":
        rows = np.arange(min(tk, K), dtype=np.int64) * pitch
        nblk = -(-K // tk)
        steps = _spread(RS * nblk, STEP_SAMPLES)
        rs, kb = steps // nblk, steps % nblk
        offsets = kb * tk * pitch + rs * C * eb
        widths = np.full(steps.shape[0], min(tn, C) * eb, np.int64)
        return rows, offsets, widths
    return None


# the xor index's screen (`_random_overfull`): the exact count runs only where lines dropped at random would
# overfill at least this many sets. 2 #121 (256 lines in 4,096 sets of 2 ways): 0.16 sets at random, 2 by the
# hash in one k-step of five; 16 ways (the stock GPUs' least): below 1e-25. Of 6,600 random cases (seeds 1-6,
# 20-59, 62-67), the only one with an overfull set is 2 #121; the exact count costs 56 us a prediction
# (resnet50's 3x3 on the a100: 4,096 lines), 45 % of an fprop prediction, where the screen passes 1 % of them.
OVERFULL_SCREEN = 1e-6


def _random_overfull(lines, sets, ways) -> float:
    """At least the sets expected to hold more than ``ways`` of ``lines`` lines dropped at random into ``sets``
    sets (Poisson): its tail's bound p(ways + 1) / (1 - lam / (ways + 2)), where lam < ways + 2 (one term in
    logs; the tail's other terms fall by at least that ratio each); every set where lam is larger."""
    lam = lines / sets
    if lam >= ways + 2:
        return float(sets)
    return sets * math.exp(-lam + (ways + 1) * math.log(lam) - math.lgamma(ways + 2)) / (1.0 - lam / (ways + 2))


def _step_size(layer, kernel):
    """(filter rows a CTA reads at a k-step, the most bytes of a row it reads then) of `b_step_pattern`, None
    where that has no pattern: the screen's figures, without building the pattern."""
    if layer.groups != 1:
        return None
    eb = kernel.elem_bytes
    if kernel.op == "fprop":
        return min(kernel.tile_n, layer.k), kernel.tile_k * eb
    if kernel.op == "dgrad" and layer.stride == (1, 1) and kernel.layout == "nhwc":
        return min(kernel.tile_k, layer.k), min(kernel.tile_n, layer.c) * eb
    return None


@functools.lru_cache(maxsize=64)
def _screen_floor(gpu) -> int:
    """The fewest lines of a k-step for which `b_overfull_share` counts, on ``gpu``: more than its ways, and (xor
    index) enough that lines dropped at random would overfill `OVERFULL_SCREEN` sets (`_random_overfull` grows
    with the lines: the least such count, by bisection). Cached per GPU: the screen took 3-4 % of an fprop
    pass evaluated at each prediction (measured)."""
    lo = gpu.l2_ways + 1
    if gpu.l2_index != "xor":
        return lo
    sets = gpu.l2_slices * gpu.l2_sets_per_slice
    hi = max(lo, (gpu.l2_ways + 2) * sets)         # lam = ways + 2: every set counts (`_random_overfull`)
    while lo < hi:
        mid = (lo + hi) // 2
        if _random_overfull(mid, sets, gpu.l2_ways) >= OVERFULL_SCREEN:
            hi = mid
        else:
            lo = mid + 1
    return lo


def b_overfull_share(layer, kernel, gpu) -> float:
    """The share of the filter sectors a CTA reads at its k-steps that lie in L2 sets holding more than
    ``gpu.l2_ways`` of that k-step's lines (`overfull_sectors`): the reads of them miss the L2 every time."""
    size = _step_size(layer, kernel)
    if size is None or size[0] * (size[1] // gpu.line_bytes + 2) < _screen_floor(gpu):
        return 0.0
    rows, offsets, widths = b_step_pattern(layer, kernel)
    _x, w_base, _y = tensor_bases(layer, kernel)
    over, total = overfull_sectors(rows, offsets, widths, w_base, gpu.l2_slices, gpu.l2_sets_per_slice,
                                   gpu.l2_ways, gpu.l2_index, gpu.line_bytes, gpu.sector_bytes)
    return over / total if total else 0.0
