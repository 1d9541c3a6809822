"""The window of a within-CTA reuse one filter position back, counted where the dense engine's window
(one whole k-step of A lines, `_reuse.window_rows`) is an average (MODEL.md section 2, "One position
back"). Three figures, each per layer shape and kernel (memoized), all but the last GPU-independent
but for the L1's set count:

* **Where the two reads sit in their k-steps** (`issue_corrections`). The pixel that row m reads at
  filter position t was read at t - 1 by row m + dm, so between the two reads the CTA issues the rest
  of k-step t - 1 after row m + dm and k-step t before row m, not one whole k-step: DESIGN section 3's
  stripmined map issues warp 0's iterations, then warp 1's, and only the reads into the reused line's L1
  set count; within a request the rows come in address order where each fills its own lines
  (`request_order`). Where rows share lines, counted line by line (`_line_windows`): the line survives
  from its last touch at t - 1 to its first touch at t, whichever rows make them. Seed 1 #65 (5x5 on
  29-wide images, 128 rows, two warps of one row a request, pixels two lines wide): the taps one filter row
  down (dm = 25) see 51 of a set's 64 lines a k-step, and 55 % of them hit in the simulator, where the whole
  k-step's 64 + 16 filter lines said none.
* **The tile's own valid rows** (`tile_valid_rows`). A tile at an image's top or bottom edge has fewer
  rows inside the image at the edge's taps (the padding's issue no request), so its windows are smaller
  than the mean over tiles.
* **The filter lines in the reused line's set** (`b_lines_in_a_set`, dgrad). fprop's filter block moves
  with the channel block as x's does (both at c0 e), so B's sets hold A's; dgrad's dy block sits at k0 e
  while the filters' rows sit at k0 row_b and a CTA column's channels at cta_n T_n e, so one column's
  lines reach the reused line's set in some rounds only (seed 1 #58, one CTA an SM: half the rounds bring
  16 filter lines, half none); columns side by side fill the sets in turn (seed 4 #23: six an SM).

Each is a small distribution (quantiles), and `_reuse.miss_rows` judges the LRU step (counted windows,
not the fitted ramp) at every combination.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit

from ._common import tile_samples
from ._line_windows import line_corrections, quantiles_of, reader_rows
from ._memo import memo

# Numba's on-disk cache checks only this file's own time stamp, but `_corrections` compiles in
# `_line_windows.line_corrections`: tests/test_jit_deps.py checks this digest of that file.
_JIT_DEPS_SHA256 = "cfb2beb47505b001"

__all__ = ["one_back_tables", "relative_valid", "issue_corrections", "request_order", "row_positions",
           "tile_valid_rows", "b_lines_in_a_set", "NQ", "NV", "NB"]

#: quantiles kept: of the rows' window corrections, of the tiles' valid rows, of the filter lines in set
NQ, NV, NB = 4, 8, 2
#: co-resident distinct CTA columns (B tiles) the filter-line overlap is tabulated for
NB_COLS = 4
# tiles whose valid rows `tile_valid_rows` counts (evenly spaced along M)
_VALID_SAMPLES = 32
# samples of the channel blocks, filter positions and first CTA columns the overlap is counted over
_OVERLAP_SAMPLES = 3


def row_positions(tm, tk, threads, vector, raked=False) -> np.ndarray:
    """pos[m]: the warp request of A's k-step that reads tile row m. DESIGN section 3's stripmined map:
    T_c = T_k / V threads a row, T_s = threads / T_c rows an iteration, I = T_m / T_s iterations; row m =
    j T_s + t div T_c is read in iteration j by thread t, whose warp issues its I iterations in turn:
    pos = warp I + j, with the warp of the row's first thread. ``raked``: section 3a's warp-raked map
    (tensor-op), a warp's t_s = 32 / (T_k / V) rows an access over its It = T_m / t_s / warps accesses of
    consecutive rows: pos = warp It + i, row m = (warp It + i) t_s + lane div (T_k / V)."""
    m = np.arange(tm)
    t_c = tk // vector
    if raked:
        t_s = 32 // t_c
        return m // t_s
    t_s = threads // t_c
    iters = tm // t_s
    return (m % t_s * t_c // 32) * iters + m // t_s


@njit(cache=True)
def _shift_corrections(dm, pos, pitch, line, sets, ncls, nq):
    """`issue_corrections`' quantiles for a row shift ``dm``: per row m whose reader m + dm is in the
    tile, (reads of k-step t - 1 after row m + dm in the reused line's set class + reads of k-step t before
    row m in that class whose pixel that first part did not read - a whole k-step's other reads of the
    class) x ``ncls``. A row's class is its pixel's line's ((pixel x pitch // line) mod ``sets``): row x
    reads pixel x at k-step t - 1 and pixel x + dm at t, so its class moves with the pixel (it is row m's
    at t that is row m + dm's at t - 1; taken as row m's own, a 1.5-line pitch's taps one position on put a
    quarter of the rows a half k-step further back: 67 #48, fp16 C 96 with half the L1, A hits 70 %
    predicted, 89 % simulated). The reads "seen" (before row m, in the class, whose pixel's reader
    src = x + dm is after row m + dm) are a 2-D dominance count: rows in order of pos, a Fenwick tree over the
    readers' pos, per class. O(T log T)."""
    tm = pos.shape[0]
    lo, hi = reader_rows(dm, tm)
    if dm == 0 or hi <= lo:
        return np.zeros(nq, np.float64)
    cls = np.empty(tm, np.int64)                      # the class of row x's read at k-step t - 1 ...
    cls_t = np.empty(tm, np.int64)                    # ... and at t (its pixel x + dm)
    for x in range(tm):
        cls[x] = (x * pitch // line) % sets
        cls_t[x] = ((x + dm) * pitch // line) % sets
    npos = 0
    for x in range(tm):
        npos = max(npos, pos[x] + 1)
    size = np.zeros(sets, np.int64)
    for x in range(tm):
        size[cls[x]] += 1
    order = np.empty(tm, np.int64)                    # rows by pos (a counting sort: pos < npos <= T)
    start = np.zeros(npos + 1, np.int64)
    for x in range(tm):
        start[pos[x] + 1] += 1
    for p in range(npos):
        start[p + 1] += start[p]
    for x in range(tm):
        order[start[pos[x]]] = x
        start[pos[x]] += 1
    # per row: reads of k-step t before it in its class at t, and of k-step t - 1 after it in its class then
    # (the rows of its own request neither)
    before = np.zeros(tm, np.int64)
    after = np.zeros(tm, np.int64)
    seen_t = np.zeros(sets, np.int64)
    seen_p = np.zeros(sets, np.int64)
    i = 0
    while i < tm:                                      # groups of equal pos (rows of one warp request)
        j = i
        while j < tm and pos[order[j]] == pos[order[i]]:
            j += 1
        for k in range(i, j):
            before[order[k]] = seen_t[cls_t[order[k]]]
        for k in range(i, j):
            seen_t[cls_t[order[k]]] += 1
        for k in range(i, j):
            seen_p[cls[order[k]]] += 1
        for k in range(i, j):
            after[order[k]] = size[cls[order[k]]] - seen_p[cls[order[k]]]
        i = j
    # seen[m]: a Fenwick tree over the readers' pos, one per class
    seen = np.zeros(tm, np.int64)
    tree = np.zeros((sets, npos + 1), np.int64)
    i = 0
    while i < tm:
        j = i
        while j < tm and pos[order[j]] == pos[order[i]]:
            j += 1
        for k in range(i, j):                          # queries: rows inserted so far have a smaller pos
            m = order[k]
            first = m + dm
            if m < lo or m >= hi:
                continue
            c = cls_t[m]
            # count inserted with reader pos > pos[first]: total - prefix(pos[first])
            p = pos[first] + 1
            below = 0
            while p > 0:
                below += tree[c, p]
                p -= p & (-p)
            p = npos
            total = 0
            while p > 0:
                total += tree[c, p]
                p -= p & (-p)
            seen[m] = total - below
        for k in range(i, j):                          # insert this request's rows
            x = order[k]
            src = x + dm
            if 0 <= src < tm:
                p = pos[src] + 1
                while p <= npos:
                    tree[cls_t[x], p] += 1
                    p += p & (-p)
        i = j
    corr = np.empty(hi - lo, np.float64)
    for m in range(lo, hi):
        whole = size[cls[m + dm]] - 1
        corr[m - lo] = (after[m + dm] + before[m] - seen[m] - whole) * ncls
    return quantiles_of(corr, nq)


@njit(cache=True)
def _row_shift(t, RS, S, reverse, sh, sw, dh, dw, Q):
    """dm of the reuse at filter position t of what t - 1 read (the pixel row m reads at t, row m + dm read
    at t - 1), or a value below -RS Q where the taps give no whole row shift."""
    tt = RS - 1 - t if reverse else t
    t0 = RS - 1 - (t - 1) if reverse else t - 1
    num_p = (tt // S - t0 // S) * dh
    num_q = (tt % S - t0 % S) * dw
    if num_p % sh or num_q % sw:
        return -(RS + 1) * (Q + 1)
    return num_p // sh * Q + num_q // sw


@njit(cache=True)
def _corrections(R, S, reverse, sh, sw, dh, dw, Q, pos, pitch, line, sets, ncls, nq, offs, widths):
    """`issue_corrections` compiled: per filter position, the quantiles of its row shift from the
    position before (each distinct shift computed once); where rows share lines (``pitch`` < ``line``),
    counted line by line over the channel blocks (``offs``, ``widths``: `_line_windows.line_corrections`)."""
    RS = R * S
    out = np.zeros((RS, nq), np.float64)
    none = -(RS + 1) * (Q + 1)
    for t in range(1, RS):
        dm = _row_shift(t, RS, S, reverse, sh, sw, dh, dw, Q)
        if dm == none:
            continue
        done = -1
        for u in range(1, t):
            if _row_shift(u, RS, S, reverse, sh, sw, dh, dw, Q) == dm:
                done = u
                break
        if done > 0:
            out[t] = out[done]
        elif pitch < line:
            out[t] = line_corrections(dm, pos, pitch, line, sets, ncls, nq, offs, widths)
        else:
            out[t] = _shift_corrections(dm, pos, pitch, line, sets, ncls, nq)
    return out


def request_order(pos) -> np.ndarray:
    """Each row's place among every row of a k-step (0 .. T - 1): by its request (``pos``), then within
    the request by row, which is address order for a stripmined or raked map (seed 31 #13, dense dgrad of
    1 KB dy pixels, 16 rows a request: a pixel's re-read one tap later meets 239-242 lines of the set
    between the two requests and the 15 rows of its own two requests on either side, 254-257 against
    256 ways; the request's rows as neither before nor after gave 240)."""
    tm = pos.shape[0]
    return np.argsort(np.argsort(pos * tm + np.arange(tm), kind="stable"), kind="stable")


def issue_corrections(win, tm, tk, threads, vector, eb, line, sets, raked=False) -> np.ndarray:
    """`_issue_table` of a window (its batch, image height and channels' count enter only through the
    pixel pitch and, where rows share lines, the bytes of a pixel and of a k-step's channel block)."""
    pitch = win.sw * win.c * eb
    pixel, piece = (win.c * eb, tk * eb) if pitch < line else (0, 0)
    return _issue_table(win.r, win.s, win.reverse, win.sh, win.sw, win.dh, win.dw, win.q, pitch, tm, tk, threads,
                        vector, line, sets, raked, pixel, piece)


@memo()
def _issue_table(R, S, reverse, sh, sw, dh, dw, Q, pitch, tm, tk, threads, vector, line, sets, raked, pixel,
                 piece) -> np.ndarray:
    """corr[t, q]: for the reuse at filter position t of what position t - 1 read, the CTA's own window
    (in rows of a k-step, all sets) less the whole k-step the dense window assumes, at the `NQ` quantiles
    over the tile's rows (module docstring), a request's rows in address order where a row's pixel fills
    its own lines (``pitch`` >= ``line``). Where rows share lines, line by line from each line's last touch
    to its first (`_line_windows`; ``pixel`` and ``piece``: the bytes of a pixel and of a channel block).
    Negative: fewer lines (the pixel's first reader was a later row, read later in its k-step). Zero where
    the taps give no whole row shift."""
    pos = row_positions(tm, tk, threads, vector, raked)
    if pitch >= line:
        # a request's sectors are looked up in ascending address order (DESIGN section 3), so its rows
        # (each its own lines where a pixel fills one) come one after another: ranked by row within it
        pos = request_order(pos)
    ncls = float(len(np.unique((np.arange(tm) * pitch // line) % sets)))
    offs = np.arange(0, pixel, piece, dtype=np.int64) if piece else np.zeros(0, np.int64)
    widths = np.minimum(piece, pixel - offs)
    out = _corrections(R, S, reverse, sh, sw, dh, dw, Q, pos, pitch, line, sets, ncls, NQ, offs, widths)
    out.setflags(write=False)
    return out


@njit(cache=True)
def _valid_table(g, picks, out):
    """`tile_valid_rows` compiled: ``g`` = (T_m, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, reverse);
    each full tile of ``picks``: its rows whose position t is in the image counted per output row it spans
    (its valid columns), then per position the quantiles over the tiles, each weighing by its rows at t + 1."""
    tm, P, Q, H, W, R, S, sh, sw, ph, pw, dh, dw, reverse = g
    RS = R * S
    n = picks.shape[0]
    if n < 1:
        return
    valid = np.zeros((n, RS), np.float64)
    for i in range(n):
        m0 = picks[i] * tm
        m1 = m0 + tm
        for t in range(RS):
            tt = RS - 1 - t if reverse else t
            r = tt // S
            s = tt % S
            qlo = 0
            while qlo < Q and qlo * sw - pw + s * dw < 0:
                qlo += 1
            qhi = min(Q - 1, (W - 1 + pw - s * dw) // sw)
            total = 0.0
            m = m0
            while m < m1:
                p = m // Q % P
                q0 = m % Q
                q1 = min(Q - 1, q0 + (m1 - m) - 1)
                h = p * sh - ph + r * dh
                if 0 <= h < H:
                    a = max(q0, qlo)
                    b = min(q1, qhi)
                    if b >= a:
                        total += b - a + 1
                m += q1 - q0 + 1
            valid[i, t] = total
    nv = out.shape[1]
    for t in range(RS):
        mean = 0.0
        for i in range(n):
            mean += valid[i, t]
        mean /= n
        nxt = min(t + 1, RS - 1)
        total = 0.0
        for i in range(n):
            total += valid[i, nxt]
        if mean <= 0.0 or total <= 0.0:
            continue
        order = np.argsort(valid[:, t], kind="mergesort")       # stable: tied tiles in order, as summed
        acc = 0.0
        v = 0
        for j in range(n):
            i = order[j]
            acc += valid[i, nxt] / total
            while v < nv and acc >= (v + 0.5) / nv:
                out[t, v] = valid[i, t] / tm
                v += 1
        while v < nv:
            out[t, v] = valid[order[n - 1], t] / tm
            v += 1


def tile_valid_rows(win, tm) -> np.ndarray:
    """`_valid_rows_table` of a window (its channels do not enter)."""
    return _valid_rows_table(win._replace(c=0), tm)


@memo()
def _valid_rows_table(win, tm) -> np.ndarray:
    """valid[t, v]: the share of a tile's rows whose filter position t lies in the image (they issue
    requests; the padding's do not), at the `NV` quantiles over up to `_VALID_SAMPLES` full tiles evenly
    spaced along M, each weighing by its rows that re-read at t + 1 (-1 where no full tile re-reads). The model
    divides it by the layer's exact share (`model._predict_gemm`): relative to the sampled tiles' mean, the
    sample's own bias (more edge tiles than the layer has) put full tiles above their T rows (vgg16
    conv1_2: 1.04 T)."""
    out = np.full((win.r * win.s, NV), -1.0)
    M = win.n * win.p * win.q
    picks = tile_samples(M, tm, _VALID_SAMPLES)[0]
    _valid_table(np.array([tm, win.p, win.q, win.h, win.w, win.r, win.s, win.sh, win.sw, win.ph, win.pw,
                           win.dh, win.dw, int(win.reverse)], np.int64), picks[(picks + 1) * tm <= M], out)
    out.setflags(write=False)
    return out


@njit(cache=True)
def _overlap_ratios(unit, nblk, tk, eb, row_b, pos_b, tn, cols_total, gemm_n, c, RS, line, sets, kmax,
                    samples, nb):
    """`b_lines_in_a_set` for dgrad, compiled: per k columns side by side, the filter lines of a round in
    A's line's set over the mean, at ``nb`` quantiles over (channel block, filter position, first column,
    A's pixel alignment) samples."""
    period = sets * line
    g = unit % period
    while g:
        period, g = g, period % g
    period = min(sets * line // period, 64)
    out = np.ones((kmax, nb), np.float64)
    nbs = min(nblk, samples)
    nts = min(RS, samples)
    per_set = np.zeros(sets, np.float64)
    a_seen = np.zeros(sets, np.int64)
    for k in range(1, kmax + 1):
        ncs = min(cols_total - k + 1, samples)
        vals = np.empty(nbs * nts * ncs * period, np.float64)
        n = 0
        for ib in range(nbs):
            b = (ib * (nblk - 1)) // max(1, nbs - 1) if nbs > 1 else 0
            a_seen[:] = 0
            for px in range(period):
                a_seen[((px * unit + b * tk * eb) // line) % sets] = 1
            a_reach = a_seen.sum()
            for it in range(nts):
                tap = (it * (RS - 1)) // max(1, nts - 1) if nts > 1 else 0
                for ic in range(ncs):
                    col0 = (ic * (cols_total - k)) // max(1, ncs - 1) if ncs > 1 else 0
                    per_set[:] = 0.0
                    rows = min(tk, c - b * tk)
                    nl = 0
                    for col in range(col0, col0 + k):
                        width = min(tn, gemm_n - col * tn) * eb
                        for i in range(rows):
                            start = (b * tk + i) * row_b + tap * pos_b + col * tn * eb
                            nl += (start + width - 1) // line - start // line + 1
                    lines = np.empty(nl, np.int64)
                    nl = 0
                    for col in range(col0, col0 + k):
                        width = min(tn, gemm_n - col * tn) * eb
                        for i in range(rows):
                            start = (b * tk + i) * row_b + tap * pos_b + col * tn * eb
                            for ln in range(start // line, (start + width - 1) // line + 1):
                                lines[nl] = ln
                                nl += 1
                    lines.sort()
                    total = 0.0
                    for x in range(nl):               # each distinct line once
                        if x == 0 or lines[x] != lines[x - 1]:
                            per_set[lines[x] % sets] += 1.0
                            total += 1.0
                    reach = 0
                    for x in range(sets):
                        if per_set[x] > 0:
                            reach += 1
                    mean = total / max(reach, a_reach)
                    for px in range(period):
                        vals[n] = per_set[((px * unit + b * tk * eb) // line) % sets] / mean if mean > 0 else 1.0
                        n += 1
        v = np.sort(vals[:n])
        for j in range(nb):
            out[k - 1, j] = v[min(n - 1, int((j + 0.5) / nb * n))]
    return out


def b_lines_in_a_set(op, win, gemm_n, row_b, pos_b, tn, tk, eb, line, sets) -> np.ndarray:
    """`_overlap_table` of a window (only its channels and filter positions enter)."""
    if op != "dgrad":
        return _ONES
    return _overlap_table(win.c, win.r * win.s, gemm_n, row_b, pos_b, tn, tk, eb, line, sets)


@memo()
def _overlap_table(c, RS, gemm_n, row_b, pos_b, tn, tk, eb, line, sets) -> np.ndarray:
    """ratio[k - 1, j]: the B lines of a round in the L1 set of the A line a reuse re-reads, when k
    distinct CTA columns (consecutive) share the SM, over the dense window's mean (their lines over the
    sets they and A reach, all in A's: `_reuse._window_x`'s ``other``), at the `NB` quantiles (module
    docstring). fprop: ones (B's sets hold A's)."""
    kmax = min(-(-gemm_n // tn), NB_COLS)
    out = _overlap_ratios(c * eb, -(-c // tk), tk, eb, row_b, pos_b, tn, -(-gemm_n // tn), gemm_n, c, RS, line,
                          sets, kmax, _OVERLAP_SAMPLES, NB)
    out.setflags(write=False)
    return out


_ONES = np.ones((1, 1), np.float64)
_ONES.setflags(write=False)


@memo()
def one_back_tables(win, tm, tk, threads, vector, eb, line, sets, op, gemm_n, row_b, pos_b, tn, raked=False) -> tuple:
    """(`issue_corrections`, `tile_valid_rows`, `b_lines_in_a_set`) of a layer shape and kernel on an L1
    of ``sets`` sets (each memoized, read-only); ``raked``: the tensor-op warp-raked map."""
    return (issue_corrections(win, tm, tk, threads, vector, eb, line, sets, raked), tile_valid_rows(win, tm),
            b_lines_in_a_set(op, win, gemm_n, row_b, pos_b, tn, tk, eb, line, sets))


@njit(cache=True)
def relative_valid(valid, rows_t, M):
    """`tile_valid_rows`' quantiles over the layer's mean share of valid rows at each position (``rows_t``
    of ``M``); 1 where a quantile is unset (negative). Compiled: the numpy expression cost 2.4 % of a pass
    over the fprop networks (`benchmarks/bench_analytic.py`)."""
    out = np.empty_like(valid)
    for t in range(valid.shape[0]):
        share = max(rows_t[t] / M, 1e-12)
        for j in range(valid.shape[1]):
            v = valid[t, j]
            out[t, j] = 1.0 if v < 0.0 else v / share
    return out
