"""Slow, obviously correct references for `analytic._issue_order`: the window of a reuse one filter
position back, row by row; a tile's valid rows, row by row; the filter lines in the reused line's L1 set,
line by line."""
from __future__ import annotations

import numpy as np

from analytic._common import tile_samples


def issue_order(tm, tk, threads, vector):
    """pos[m] of DESIGN section 3's stripmined map, thread by thread: the first (warp, iteration) that
    reads row m, as warp * iterations + iteration."""
    t_c = tk // vector
    t_s = threads // t_c
    iters = tm // t_s
    pos = [None] * tm
    for warp in range(threads // 32):
        for j in range(iters):
            for t in range(32 * warp, 32 * warp + 32):
                row = j * t_s + t // t_c
                if pos[row] is None:
                    pos[row] = warp * iters + j
    return pos


def raked_issue_order(tm, tk, threads, vector):
    """pos[m] of DESIGN section 3a's warp-raked map (tensor-op A), thread by thread: warp w, lane l reads
    row w t_s It + l div t_c + t_s i in its access i (t_c = T_k / V lanes a row, t_s = 32 / t_c rows an
    access, It = T_m / t_s / warps accesses), issued as warp w It + i."""
    t_c = tk // vector
    t_s = 32 // t_c
    warps = threads // 32
    its = tm // t_s // warps
    pos = [None] * tm
    for warp in range(warps):
        for i in range(its):
            for lane in range(32):
                row = warp * t_s * its + lane // t_c + t_s * i
                if pos[row] is None:
                    pos[row] = warp * its + i
    return pos


def window_corrections(dm, pos, pitch, sets, line=128):
    """Per tile row m whose earlier reader m + dm is in the tile: the distinct lines of the reused line's set
    class read between the two reads (k-step t - 1 after row m + dm, k-step t before row m, a pixel counted
    once: row x of k-step t reads what row x + dm read in k-step t - 1), less a whole k-step's other reads of
    the class, times the number of classes. A read's class is its pixel's line's: pixel y at y pitch bytes,
    (y pitch // line) mod sets."""
    tm = len(pos)

    def cls(y):
        return (y * pitch // line) % sets

    ncls = len({cls(x) for x in range(tm)})
    out = []
    for m in range(tm):
        first = m + dm
        if not 0 <= first < tm:
            continue
        c = cls(first)
        pixels = set()
        for x in range(tm):                          # k-step t - 1: row x reads pixel x
            if cls(x) == c and pos[x] > pos[first]:
                pixels.add(x)
        for x in range(tm):                          # k-step t: row x reads pixel x + dm (a new one if outside)
            src = x + dm
            if cls(src) == c and pos[x] < pos[m]:
                pixels.add(src if 0 <= src < tm else ("new", x))
        whole = sum(1 for x in range(tm) if cls(x) == c and x != first)
        out.append((len(pixels) - whole) * ncls)
    return out


def quantiles(values, nq):
    """The project's quantile rule: the sorted values at floor((q + 1/2) n / nq)."""
    v = sorted(values)
    n = len(v)
    return [v[min(n - 1, int((q + 0.5) / nq * n))] for q in range(nq)]


def tile_valid_rows(win, tm, samples, nv):
    """valid[t][v], row by row: the full tiles among ``samples`` evenly spaced along M (as
    `analytic._common.tile_samples` picks them), each
    tile's share of rows whose position t is inside the image, at the quantiles over the tiles weighted by
    their valid rows at t + 1 (None where no tile has any)."""
    M = win.n * win.p * win.q
    picks = [int(x) for x in tile_samples(M, tm, samples)[0] if (x + 1) * tm <= M]
    RS = win.r * win.s
    valid = []
    for tile in picks:
        row = []
        for t in range(RS):
            tt = RS - 1 - t if win.reverse else t
            r, s = tt // win.s, tt % win.s
            count = 0
            for m in range(tile * tm, tile * tm + tm):
                p, q = m // win.q % win.p, m % win.q
                h, w = p * win.sh - win.ph + r * win.dh, q * win.sw - win.pw + s * win.dw
                count += 0 <= h < win.h and 0 <= w < win.w
            row.append(count)
        valid.append(row)
    out = []
    for t in range(RS):
        nxt = min(t + 1, RS - 1)
        mean = sum(v[t] for v in valid) / len(valid) if valid else 0
        total = sum(v[nxt] for v in valid)
        if not picks or mean <= 0 or total <= 0:
            out.append(None)
            continue
        ranked = sorted(range(len(valid)), key=lambda i: valid[i][t])
        got, acc, v = [], 0.0, 0
        for i in ranked:
            acc += valid[i][nxt] / total
            while v < nv and acc >= (v + 0.5) / nv:
                got.append(valid[i][t] / tm)
                v += 1
        while v < nv:
            got.append(valid[ranked[-1]][t] / tm)
            v += 1
        out.append(got)
    return out


def dgrad_filter_lines(c, k_filters, RS, row_b, pos_b, tn, tk, eb, line, block, tap, cols):
    """The distinct lines a round of dgrad's B reads for CTA columns ``cols``: filters k of the channel
    block, each the column's T_n channels (w is K x R x S x C)."""
    lines = set()
    for col in cols:
        for i in range(min(tk, c - block * tk)):
            start = (block * tk + i) * row_b + tap * pos_b + col * tn * eb
            width = min(tn, k_filters - col * tn) * eb
            lines.update(range(start // line, (start + width - 1) // line + 1))
    return lines


def line_window_corrections(dm, pos, pitch, sets, pixel, piece, line=128):
    """Rows that share lines (pitch < line), line by line: per tile row m whose earlier reader m + dm is in the
    tile, per channel block (its bytes [off, off + piece) of the pixel, the last one cut at ``pixel``) and per
    line L of the bytes that block reads of pixel m + dm: the set of lines of L's class ((index) mod sets)
    that some row touches in k-step t - 1 after the last row touching L there, or in k-step t before the first
    row touching L there (row x reads pixel x at t - 1 and pixel x + dm at t, pixel y at bytes y pitch), less
    the class's lines of k-step t - 1 other than L; times the classes the rows' pixels reach and line / pitch."""
    tm = len(pos)
    ncls = len({(x * pitch // line) % sets for x in range(tm)})
    out = []
    for off in range(0, pixel, piece):
        width = min(piece, pixel - off)

        def lines(y):
            return set(range((y * pitch + off) // line, (y * pitch + off + width - 1) // line + 1))

        before, after = {}, {}                      # line -> last pos at t - 1, first pos at t
        for x in range(tm):
            for a in lines(x):
                before[a] = max(before.get(a, -1), pos[x])
            for a in lines(x + dm):
                after[a] = min(after.get(a, tm), pos[x])
        for m in range(tm):
            if not 0 <= m + dm < tm:
                continue
            for a in sorted(lines(m + dm)):
                c = a % sets
                between = {u for u in set(before) | set(after) if u != a and u % sets == c
                           and (before.get(u, -1) > before[a] or after.get(u, tm) < after[a])}
                whole = sum(1 for u in before if u != a and u % sets == c)
                out.append((len(between) - whole) * ncls * line / pitch)
    return out
