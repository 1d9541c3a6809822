"""The write side of the dense engine (MODEL.md section 4): the dirty output sectors a layer leaves in the L2
and its DRAM writes, from the waves' reads and stores (`stores_in_l2`), and the same without predicting the
loads (`grid_write_side`: the grouped engine's)."""
from __future__ import annotations

import math

import numpy as np
from simcore._jit import njit

from ._common import dirty_at_end, even_picks, row_period
from ._geometry import strided_starts
from ._memo import memo
from ._schedule import column_ranges, grid_schedule

__all__ = ["stores_in_l2", "grid_write_side", "row_lines", "wave_store_lines", "strided_store_lines",
           "shared_dirty_bound"]

# Numba's on-disk cache checks only this file's own time stamp, but its kernels compile in code from _schedule.py:
# tests/test_jit_deps.py checks this digest of it, so no stale compiled kernel survives an edit.
_JIT_DEPS_SHA256 = "4f81bf00af2fe07f"

#: full waves sampled by `wave_store_lines`
STORE_WAVES = 32


@memo(4096)
def row_lines(width, pitch, offset, line):
    """Mean lines that ``width`` bytes at ``offset`` of rows ``pitch`` bytes apart touch, each row its
    own (over one period of the rows' alignment to a line; `_counts.lines_per_row` counts a line that
    consecutive rows share once)."""
    return float(row_period(pitch, offset, offset + width, line)[0].mean())


@memo(256)
def strided_store_lines(layer, kernel, line, cols) -> float:
    """Distinct dx lines strided dgrad's sub-problems (every one the dispatcher does not skip, store-only ones
    included) store in the first ``cols`` channels of each pixel (one band of CTA columns: 2^swizzle_log columns
    of tile_n channels; or every channel), summed over the sub-problems. A sub-problem stores every stride_w-th
    pixel of every stride_h-th row: pixels closer than a line apart share lines, so the lines are those the
    pixels touch, not their bytes packed. Counted exactly (`_strided_store_lines`): a row at a time, rows alike
    in their start's alignment to a line counted once, less the lines consecutive stored rows share. Seed 66 #76
    (C 6 fp32, stride 4: 24 bytes every 96): each sub-problem's stores touch every line of its rows, 10,474
    lines, where its 335,160 / 16 sectors packed make 5,237. Memoized (`_memo`): GPU-independent but for
    ``line``."""
    starts = np.array([(start_h, start_w) for _r, _s, start_h, start_w, _nr, _ns in strided_starts(layer)],
                      np.int64).reshape(-1, 2)
    return float(_strided_store_lines(layer.n, layer.h, layer.w, layer.c * kernel.elem_bytes,
                                      cols * kernel.elem_bytes, layer.stride[0], layer.stride[1], line, starts))


@njit(cache=True)
def _strided_store_lines(n, h, w, pixel, width, sh, sw, line, starts):
    """`strided_store_lines`' count for sub-problems starting at dx pixels ``starts`` (start_h, start_w). Per
    sub-problem: the stored rows' first bytes' alignments to a line (image i's stored row j starts at base + i
    img + j row, residues that repeat every line / gcd(step, line) images and rows), each alignment's lines a row
    (each pixel's ``width`` bytes, less the lines consecutive pixels share) times its rows, less the lines the
    last pixel of a row shares with the first of the next stored row (only where the bytes between the two
    nearest rows are under a line). Integers throughout: the same count as the numpy form it replaced (0.6 ms a
    call for alexnet conv1's 16 sub-problems; 13-25 times faster compiled, measured)."""
    total = 0
    count = np.zeros(line, np.int64)
    for f in range(starts.shape[0]):
        start_h, start_w = starts[f, 0], starts[f, 1]
        pp, qq = -(-(h - start_h) // sh), -(-(w - start_w) // sw)
        img, row, base = h * w * pixel, sh * w * pixel, (start_h * w + start_w) * pixel
        rep_n, rep_i = line // math.gcd(img, line), line // math.gcd(row, line)
        count[:] = 0
        for a in range(min(n, rep_n)):
            per_n = (n - a + rep_n - 1) // rep_n              # images whose index is a modulo rep_n
            for b in range(min(pp, rep_i)):
                per_i = (pp - b + rep_i - 1) // rep_i
                count[(base + img * a + row * b) % line] += per_n * per_i
        step = sw * pixel
        for align in range(line):
            if count[align] == 0:
                continue
            per_row = 0
            prev_last = -1
            for q in range(qq):
                first = (align + step * q) // line
                last = (align + step * q + width - 1) // line
                per_row += last - first + 1
                if q > 0 and prev_last - first + 1 > 0:
                    per_row -= prev_last - first + 1
                prev_last = last
            total += per_row * count[align]
        span = (qq - 1) * step + width
        nearest = min(sh, h - (pp - 1) * sh) if n > 1 else sh
        if pp * n > 1 and nearest * w * pixel - span < line - 1:
            prev_end = -1
            for a in range(n):
                for b in range(pp):
                    row_start = base + img * a + row * b
                    if a > 0 or b > 0:
                        shared = prev_end - row_start // line + 1
                        if shared > 0:
                            total -= shared
                    prev_end = (row_start + span - 1) // line
    return total


@memo(4096)
def wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, line) -> float:
    """Distinct lines a full wave's CTAs store (nhwc), the mean over its full waves (`STORE_WAVES` of them
    at most, evenly spaced): each tile_m's rows touch, in each row, the lines of the columns the wave
    holds of it (`_schedule.column_ranges`), a line two of those columns (or two rows) share once and a
    line of a column the wave does not hold (a neighbour in another wave) touched all the same. Seed 13
    #10 (K = 192 fp16 in 32-wide columns, 64 bytes a row: two columns a line; 56 CTAs a wave down the
    columns): a wave of column 1's last 16 tiles and column 2's 36 stores 13,312 lines simulated, 52 CTAs
    x 256; one line a row per two columns, the layer's mean, gives 7,168."""
    ctas = tiles_m * tiles_n
    n_full = ctas // per_wave
    if n_full < 1:
        return 0.0
    waves = even_picks(n_full, min(n_full, STORE_WAVES))
    return _waves_store_lines(waves, per_wave, tiles_m, tiles_n, swz, M, tm, tn, K, eb, line) / waves.shape[0]


@njit(cache=True)
def _waves_store_lines(waves, per_wave, tiles_m, tiles_n, swz, M, tm, tn, K, eb, line):
    """`wave_store_lines`' sum over the sampled full waves ``waves`` (compiled: 300 us a call in numpy, 16 % of
    a pass of `benchmarks/bench_analytic.py` over the fprop networks; tests/test_wave_cliff.py checks it against
    enumerated bytes). Runs of adjacent tiles with one column range are contiguous rows, counted a period of
    their alignment to a line at a time (`_run_lines`); a line two neighbouring runs' rows share counted
    once."""
    total = 0
    for w in waves:
        lo, hi = column_ranges(w * per_wave, per_wave, tiles_m, tiles_n, swz)
        prev_last = -1
        i0 = -1                                   # the current run's first tile
        for i in range(tiles_m + 1):
            if i0 >= 0 and (i == tiles_m or hi[i] < 0 or lo[i] != lo[i0] or hi[i] != hi[i0]):
                m0, m1 = i0 * tm, min(M, i * tm)
                c0, c1 = lo[i0] * tn * eb, min(K, (hi[i0] + 1) * tn) * eb
                total += _run_lines(m0, m1, K * eb, c0, c1, line)
                total -= max(0, prev_last - (m0 * K * eb + c0) // line + 1)
                prev_last = ((m1 - 1) * K * eb + c1 - 1) // line
                i0 = -1
            if i < tiles_m and hi[i] >= 0 and i0 < 0:
                i0 = i
    return float(total)


@njit(cache=True)
def _run_lines(m0, m1, pitch, c0, c1, line):
    """Distinct lines of bytes [c0, c1) of rows m0 .. m1 - 1, ``pitch`` bytes apart: each row's lines, less
    those it shares with the next (`_common.row_period`'s figures, a period of the rows' alignment to a line)."""
    a, b = pitch, line
    while b:
        a, b = b, a % b
    period = line // a
    out = 0
    for r in range(min(m1 - m0, period)):       # each residue of the run's rows, times its rows
        m = (m0 + r) % period
        first, last = (m * pitch + c0) // line, (m * pitch + c1 - 1) // line
        rows = (m1 - m0 - r + period - 1) // period
        out += rows * (last - first + 1)
        if r < m1 - m0 - 1:                       # row m shares lines with row m + 1 (the run's next row)
            pairs = (m1 - m0 - 1 - r + period - 1) // period
            out -= pairs * max(0, last - ((m + 1) * pitch + c0) // line + 1)
    return out


def stores_in_l2(gpu, f, uniq_a, uniq_b, uniq_c, M, tm, delta, tiles_n, ctas, per_wave, wsum) -> tuple:
    """(dirty output sectors left in L2 at the end, DRAM write sectors): the LRU stack walked back by
    waves (`dirty_at_end`), a wave's reads occupying L2 once per distinct tile (its A tiles with their
    halos, ``delta`` rows, and its B slices); ``wsum``: `wave_stats`' sums."""
    n_waves = wsum[3]
    na_wave, nb_wave, ctas_wave, runs_wave = wsum[0] / n_waves, wsum[1] / n_waves, wsum[2] / n_waves, \
        wsum[4] / n_waves
    r_full = uniq_a / M * (na_wave * tm + runs_wave * delta) + nb_wave * uniq_b / tiles_n
    return dirty_at_end(gpu, f, uniq_c, uniq_c / ctas, r_full, ctas, per_wave, ctas_wave, uniq_a + uniq_b)


def grid_write_side(gpu, kernel, f, machine, written, uniq_in, uniq_b, tiles_m, tiles_n) -> tuple:
    """(dirty output sectors left in the L2, DRAM write sectors) of a grid of tiles_m x tiles_n CTAs that dirty
    ``written`` sectors, each CTA reading its share of the ``uniq_in`` input sectors and its column's share of the
    ``uniq_b`` filter sectors: the LRU stack walked back by waves over the whole grid (`dirty_at_end`). The
    grouped engine's write side (`_grouped_model.predict_grouped`): its dense part's own walk, scaled to the
    layer's stores, counted each copy's output against the whole L2 (seed 17 #43, depthwise 1x1 in 24 columns:
    9.2 L2s of dirty sectors at the end and no DRAM writes, simulated 13,080 and 212,712)."""
    ctas = tiles_m * tiles_n
    wsum = grid_schedule(tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, machine[0])[1][3]
    ctas_wave, nb_wave = wsum[2] / wsum[3], wsum[1] / wsum[3]
    r_full = ctas_wave * uniq_in / ctas + nb_wave * uniq_b / tiles_n
    return dirty_at_end(gpu, f, written, written / ctas, r_full, ctas, machine[0] * gpu.sms, ctas_wave,
                        uniq_in + uniq_b)


def shared_dirty_bound(gpu, f, uniq_c, ctas, reread, reads_per_cta) -> float:
    """The dirty output sectors a grid leaves in the L2 at the end where its stores share the L2 with an input
    that every part of the grid re-reads (strided dgrad: each sub-problem reads all of dy, ``reread`` sectors with
    its filters): walking the LRU stack back from the end block by block, each adds its share of the distinct
    output (``uniq_c`` / ``ctas``, store-only blocks included) and ``reads_per_cta`` sectors of the input until
    all of it is in the window; the useful capacity (``l2_dirty_capacity``) ends the walk. `dirty_at_end` counts a
    wave's reads as new lines every wave, which a re-read input is not, and a sub-problem's own walk sees only
    its own stores: their sum can exceed the L2 (seed 32 #17, 16 sub-problems' dx of 111,794 sectors on a
    titanxp's 98,304: predicted all dirty at the end and no DRAM writes, simulated 55,238 and 65,454). Infinite
    where the whole output stays (no bound)."""
    capd = gpu.l2_bytes / gpu.sector_bytes * f.l2_dirty_capacity
    y = uniq_c / max(ctas, 1.0)
    if y <= 0.0:
        return 0.0
    blocks = capd / (y + reads_per_cta)
    if reads_per_cta * blocks > reread:           # the whole input is in the window first
        blocks = max(0.0, capd - reread) / y
    return y * blocks if y * blocks < uniq_c else math.inf
