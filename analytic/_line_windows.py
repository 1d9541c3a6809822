"""The window of a reuse one filter position back where a tile's rows share lines (`_issue_order`,
``pitch`` < ``line``), counted line by line.

Row x of a tile reads, in a k-step, the bytes [x pitch + off, x pitch + off + width) of its pixel (``off``: the
k-step's channel block; a piece may straddle two lines); one filter position on, row x reads what row x + dm
read. The L1's LRU order is per line and any sector's access renews it (DESIGN section 4), so the reused
sector survives if its line does from the line's last touch in k-step t - 1 to its first touch in k-step t,
whichever rows make them: the distinct lines of the line's set class touched between must stay below the
ways. Counting reads instead (`_issue_order._shift_corrections`, row by row) misses where the rows of one line
are issued far apart: DESIGN section 3's stripmined map issues warp 0's iterations, then warp 1's, and with
64-byte pixels and one row a warp request warp 0 reads every line's first pixel, warp 1 its second. Seed 67
#69 (strided dgrad, dy pixels of 64 bytes, 256 rows, one CTA an SM on a p100: 4 sets of 48 ways): at the
step to the next filter row (a shift of 105 or 106 rows) every re-read misses in the simulator (180 lines of
the class between, scratch `replstep2.py`), where the row count gave 151 lines for 106 and half the rows
under 100 for 105.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit

__all__ = ["line_corrections", "reader_rows", "quantiles_of"]


@njit(cache=True)
def reader_rows(dm, tm) -> tuple:
    """The rows m of a ``tm``-row tile whose reader one position back, row m + dm, is in the tile: [lo, hi)."""
    return max(0, -dm), min(tm, tm - dm)


@njit(cache=True)
def quantiles_of(values, nq):
    """``nq`` quantiles of ``values`` by the project's rule: the sorted values at floor((q + 1/2) n / nq)."""
    done = np.sort(values)
    n = done.shape[0]
    out = np.zeros(nq, np.float64)
    for q in range(nq):
        out[q] = done[min(n - 1, int((q + 0.5) / nq * n))]
    return out


@njit(cache=True)
def line_corrections(dm, pos, pitch, line, sets, ncls, nq, offs, widths):
    """`_issue_order.issue_corrections`' quantiles for a row shift ``dm`` where rows share lines: per row m
    whose reader m + dm is in the tile, per line L of the piece it re-reads and per channel block (``offs``,
    ``widths``: each block's first byte in the pixel and its bytes), the distinct lines of L's set class
    ((line index) mod ``sets``) touched after L's last touch in k-step t - 1 or before its first touch in
    k-step t (``pos``: each row's place in the k-step's issue order), less a whole k-step's other lines of the
    class; times ``ncls`` (the classes the tile's rows reach) and line / pitch, in rows of a k-step like
    `_issue_order._shift_corrections`. Lines are those of the tile's rows from a line-aligned first pixel."""
    tm = pos.shape[0]
    lo, hi = reader_rows(dm, tm)
    if dm == 0 or hi <= lo:
        return np.zeros(nq, np.float64)
    base = min(0, dm) * pitch // line - 1              # the lowest line index a read can reach, less one
    span = (tm + abs(dm) + 1) * pitch // line + 3
    corr = np.empty((hi - lo) * 2 * offs.shape[0], np.float64)
    nc = 0
    last0 = np.empty(span, np.int64)                   # each line's last touch in k-step t - 1 (-1: none)
    first1 = np.empty(span, np.int64)                  # its first touch in k-step t (tm: none)
    whole = np.zeros(sets, np.int64)
    between = np.empty(span, np.int64)                 # each re-read line's lines of its class between (-1: not yet)
    for b in range(offs.shape[0]):
        off, width = offs[b], widths[b]
        last0[:] = -1
        first1[:] = tm
        between[:] = -1
        for x in range(tm):
            for a in range((x * pitch + off) // line - base, (x * pitch + off + width - 1) // line - base + 1):
                last0[a] = max(last0[a], pos[x])
            y = x + dm
            for a in range((y * pitch + off) // line - base, (y * pitch + off + width - 1) // line - base + 1):
                first1[a] = min(first1[a], pos[x])
        whole[:] = 0
        for a in range(span):
            if last0[a] >= 0:
                whole[(a + base) % sets] += 1
        for m in range(lo, hi):
            r = m + dm
            for a in range((r * pitch + off) // line - base, (r * pitch + off + width - 1) // line - base + 1):
                c = (a + base) % sets
                if between[a] < 0:                     # counted once a line (the rows that share it re-read it)
                    n = 0
                    for u in range(span):
                        if u != a and (u + base) % sets == c and (last0[u] > last0[a] or first1[u] < first1[a]):
                            n += 1
                    between[a] = n
                corr[nc] = (between[a] - (whole[c] - 1)) * ncls * line / pitch
                nc += 1
    return quantiles_of(corr[:nc], nq)
