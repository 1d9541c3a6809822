"""What the model needs to know about one op's GEMM, independent of which op it is (MODEL.md section 0).

Every op the model covers is a CTA-tiled GEMM whose A operand, seen from the GEMM rows, is an
fprop-like *window* over a 4-D tensor: GEMM row m = (n, p, q) of an n x p x q grid reads, at k-step
filter position (r, s), the element at (p stride_h - pad_h + r dil_h, q stride_w - pad_w + s dil_w) of
an n x h x w x c tensor, channel blocks of tile_k. fprop: the input x. dgrad (unit stride): dy, read by
the rows (n, h, w) of dx with pad (R - 1) dil - pad and the filter positions in reverse order. The
`Window` carries those dimensions (pads may be negative), `Geometry` adds GEMM-N, the k-steps, the
exact L1 counts, and the B operand's descriptor:

* ``b_rows``: B rows a CTA reads per round (fprop: its filters; dgrad: tile_k filters k); each row a
  block of contiguous elements (fprop: tile_k channels; dgrad: the tile's channels), rows ``row_b``
  bytes apart, consecutive filter positions ``pos_b`` bytes apart.
* ``ncls``: B tile classes (full and partial tiles along GEMM-N): lines read per round, weight, and the
  distinct lines of the tile's whole B slice.
* ``uniq_b``: distinct B sectors (the whole filter tensor); ``share_b_blk``: sectors the next block
  re-reads (``blk_rounds`` later); ``reuse_b1``: B lookups that repeat a sector read one round before.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._counts import block_sharing, l1_counts, lines_per_row
from ._memo import memo
from ._dgrad_places import row_shifts, step_overlap

__all__ = ["Window", "Geometry", "geometry", "grid"]

SEC = 32
LINE = 128


def _cdiv(a, b):
    return -(-a // b)


class Window(NamedTuple):
    n: int
    c: int
    h: int
    w: int
    r: int
    s: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    p: int
    q: int
    reverse: bool

    @property
    def m(self) -> int:
        return self.n * self.p * self.q

    @property
    def reach(self) -> float:
        """The filter's reach in GEMM rows (a tile's halo): (R - 1) dh / sh rows of Q, (S - 1) dw / sw columns."""
        return (self.r - 1) * self.dh / self.sh * self.q + (self.s - 1) * self.dw / self.sw


class Geometry(NamedTuple):
    op: str
    win: Window
    gemm_n: int
    ksteps: int
    counts: dict
    b_rows: float
    row_b: int
    pos_b: int
    lpr_b: float
    ncls: np.ndarray          # (classes, 3): lines per round, weight, slice lines
    uniq_b: float
    share_b_blk: float
    reuse_b1: float
    flops: float


def _tile_classes(tiles_n, full, last):
    """``ncls`` (see `Geometry`): the B classes of the full column tiles and, when ``last`` is not None,
    of the partial last one; ``full`` and ``last`` are (lines per round, slice lines) of one tile."""
    if last is None:
        out = np.array([[full[0], 1.0, full[1]]])
    else:
        out = np.array([[full[0], (tiles_n - 1) / tiles_n, full[1]],
                        [last[0], 1.0 / tiles_n, last[1]]])
    return out                              # read-only by convention: a `Geometry` is memoized (`_memo`)


def _dgrad_tile_lines(C, tn, last_n, eb, row_b, step):
    """dgrad's B lines of one k row's block of tn channels, and of the last tile's last_n (None when
    every tile is full): rows of w ``row_b`` bytes apart, filter positions ``step`` bytes apart."""
    lines_tn = lines_per_row(tn, tn, eb, row_b, step, LINE)
    lines_last = lines_per_row(last_n, last_n, eb, row_b, step, LINE) if last_n != tn else None
    return lines_tn, lines_last


def _fprop(layer, kernel):
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    P, Q = layer.p, layer.q
    eb = kernel.elem_bytes
    nhwc = kernel.layout == "nhwc"
    tn, tk = kernel.tile_n, kernel.tile_k
    win = Window(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, False)
    ex = l1_counts(layer, kernel)
    ksteps = R * S * _cdiv(C, tk) if nhwc else _cdiv(C * R * S, tk)
    row_b = R * S * C * eb
    if nhwc:
        lpr_b = lines_per_row(C, tk, eb, row_b, C * eb, LINE)
        share_b_blk = block_sharing(C, tk, eb, C * eb)
    else:
        lpr_b = lines_per_row(C * R * S, tk, eb, row_b, LINE, LINE)
        share_b_blk = block_sharing(C * R * S, tk, eb, C * R * S * eb)
    tiles_m = _cdiv(N * P * Q, kernel.tile_m)
    tiles_n = _cdiv(K, tn)
    last_n = K - (tiles_n - 1) * tn
    b_row_lines = row_b / LINE
    ncls = _tile_classes(tiles_n, (tn * lpr_b, tn * b_row_lines),
                         (last_n * lpr_b, last_n * b_row_lines) if last_n != tn else None)
    sec_b = ex["sec_B"]
    uniq_b = float(_cdiv(K * C * R * S * eb, SEC))
    if C <= tk and nhwc and (C * eb) % SEC and sec_b:
        # one k-step a filter position: its C e bytes of a filter row end in the sector the next position's
        # begin in, re-read one round later (any C e off the sector grid: seed 4 #265 and #208, 48 bytes)
        reuse_b1 = _reread_next_round(uniq_b, tiles_n, sec_b, tiles_m * tiles_n)
    else:
        reuse_b1 = 0.0
    return Geometry("fprop", win, K, ksteps, ex, float(min(tn, K)), row_b, C * eb, lpr_b, ncls,
                    uniq_b, share_b_blk, reuse_b1, float(layer.flops))


def b_line_hold(layout, C, R, S, tk, eb, line) -> tuple:
    """fprop: (the share of a CTA lifetime over which one line of its filter slice keeps being read, its
    first k-step to its last; the most k-steps between two of those reads). A line holds line / e
    elements of a filter row; the k-steps walk the row in order: nchw contiguously, nhwc channel block
    outermost, so a tap's next block comes R S k-steps on. A CTA reading the filters the SM's previous
    CTA read finds a line that the LRU kept over that share: only the rest of a lifetime lies between
    (seed 9 #44, 1x1 nchw fp32 T_k = 8: each line read over 4 of 8 k-steps; simulated B misses one
    slice an SM, predicted 24 times that), where the line outlives the gaps between its reads.
    1x1 filters only: their k-steps read disjoint A lines, so the A lines between scale with the
    k-steps; where taps overlap, a part of the lifetime reads most of its A window (seed 9 #17, 7x7
    C = 4 fp16: 125 A lines a lifetime, B lines held over 16 of 49 k-steps, yet simulated B first reads
    hit 27 %, not all), which this share does not count."""
    L = line / eb                                     # elements a line
    RS = R * S
    nblk = _cdiv(C, tk)
    ksteps = RS * nblk if layout == "nhwc" else _cdiv(C * RS, tk)
    if ksteps <= 1 or RS > 1:
        return 0.0, 1.0
    gap = 1.0
    if layout != "nhwc":
        span = ksteps - 1 if C * RS <= L else max(0.0, L / tk - 1.0)
    elif C >= L:
        span = (min(max(1.0, L / tk), nblk) - 1.0) * RS    # a tap's channel blocks in the line
        gap = float(RS)
    else:
        taps = L / C                                    # the line holds L / C taps, every block of each
        span = (nblk - 1) * RS + taps - 1.0
        gap = max(1.0, RS - taps + 1.0) if nblk > 1 else 1.0
    return min(span, ksteps - 1.0) / ksteps, gap


def b_hold_in_set(hold, ksteps, groups) -> float:
    """`b_line_hold`'s share ``hold`` of a lifetime, counted in the line's own L1 set: where one k-step's lines
    (A's and B's: nhwc 1x1 rows both step C e bytes) lie in 1 / ``groups`` of the sets the lifetime reaches,
    the walk visits the line's group for its k-steps (``hold`` ksteps + 1, first to last read) in one of
    every ``groups`` lines and puts nothing in its set in between: of the set's traffic the visit holds
    ``groups`` times its share of the k-steps, and what lies between the last CTA's read and the next one's
    is the set's other visits, plus the round between the two reads (`_reuse.l1_configs`' ``b_visits``).
    resnext50_32x4d ``layer1.0.conv3`` (C 128 fp32, a100: 4 sets, each row's line l in set l) re-reads its
    filter slice across the SM's waves with no other visit of the set between (replayed: every later CTA's
    filter read hits), where the lifetime's 1,536 lines over all 4 sets put 54 % of them at a miss. C 256
    (seed 1 #258, resnet50 ``layer1.1.conv1`` on the h100) visits each set twice a lifetime: the other
    visit's lines and the round's overflow the ways, and the reads miss (without the round's lines, h100
    B L1 misses -66 %)."""
    return min(1.0, (hold * ksteps + 1.0) * groups / ksteps)


def _dgrad_unit(layer, kernel):
    """dgrad with stride 1: dy read as fprop's A of the window (n, h, w) <- dy (n, p, q, k)."""
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    ph, pw = layer.pad
    dh, dw = layer.dilation
    P, Q = layer.p, layer.q
    eb = kernel.elem_bytes
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    win = Window(N, K, P, Q, R, S, 1, 1, (R - 1) * dh - ph, (S - 1) * dw - pw, dh, dw, H, W, True)
    ex = l1_counts(layer, kernel)
    ksteps = R * S * _cdiv(K, tk)
    row_b = R * S * C * eb
    rows = K / _cdiv(K, tk)                  # filters k per k-step, averaged over the k blocks
    lpr_b = lines_per_row(C, tn, eb, row_b, C * eb, LINE)
    tiles_m = _cdiv(N * H * W, tm)
    tiles_n = _cdiv(C, tn)
    last_n = C - (tiles_n - 1) * tn

    lines_tn, lines_last = _dgrad_tile_lines(C, tn, last_n, eb, row_b, C * eb)
    slice_rows = K * R * S
    ncls = _tile_classes(tiles_n, (rows * lines_tn, slice_rows * lines_tn),
                         (rows * lines_last, slice_rows * lines_last) if lines_last is not None else None)
    sec_b = ex["sec_B"]
    uniq_b = float(_cdiv(K * C * R * S * eb, SEC))
    ctas = tiles_m * tiles_n
    # filter positions (r, s) -> (r, s + 1) of one filter are C e bytes apart: with C e < 32, or with one
    # CTA column (a k-step row is the position's C e bytes, contiguous with the next one's) and C e off the
    # sector grid, the next k-step re-reads part of the sectors one round later (62 #80: C 24 fp16, 48-byte
    # positions, one CTA: a quarter of the filter lookups hit simulated, none predicted)
    reuse_b1 = (_reread_next_round(uniq_b, tiles_n, sec_b, ctas)
                if (C * eb < SEC or tiles_n == 1) and sec_b else 0.0)
    return Geometry("dgrad", win, C, ksteps, ex, rows, row_b, C * eb, lpr_b, ncls, uniq_b, 0.0,
                    reuse_b1, float(layer.flops))


def _tap_sectors(K, C, R, S, eb, rows, cols):
    """Distinct sectors of w (K filters of R S C elements, contiguous) that the filter positions
    ``rows`` x ``cols`` cover, all filters together; positions at most a sector wide (C e <= 32), so
    each covers its first and last byte's sectors."""
    offsets = np.array([(r * S + s) * C * eb for r in rows for s in cols], np.int64)
    starts = (np.arange(K, dtype=np.int64)[:, None] * (R * S * C * eb) + offsets[None, :]).ravel()
    # the positions ascend (filters one after another, positions in order inside one), so the sectors each
    # covers, [first, last], ascend too: each adds those past the last one before (no sort: np.unique's cost
    # 2-5 ms a 512-filter layer shape, measured)
    first, last = starts // SEC, (starts + C * eb - 1) // SEC
    before = np.concatenate(([-1], last[:-1]))
    return float(np.maximum(0, last - np.maximum(first, before + 1) + 1).sum())


def _reread_next_round(distinct, tiles_n, sec_b, ctas) -> float:
    """``reuse_b1`` (see `Geometry`): the share of B lookups that repeat a sector read one round before,
    when each CTA reads its column's ``distinct`` sectors (of ``tiles_n`` columns) ``sec_b / ctas`` times
    over: every lookup past the first of a sector."""
    return max(0.0, 1.0 - (distinct / tiles_n) / (sec_b / ctas))


def _starting_coord(stride, pad, start):
    """DESIGN 3a `strided_dgrad_starting_coords` along one axis."""
    return abs(stride - (pad % stride - start)) % stride


@memo(256)
def strided_starts(layer) -> tuple:
    """Strided dgrad's sub-problems that the dispatcher does not skip (start_h < H and start_w < W; DESIGN
    3a), in block order: (start_r, start_s, start_h, start_w, taps along r, taps along s); a sub-problem
    with no tap only stores. Memoized (`_memo`; a tuple): a strided dgrad prediction asks for it 5-6 times."""
    (sh, sw), (ph, pw) = layer.stride, layer.pad
    out = []
    for f in range(sh * sw):
        start_r, start_s = f // sw, f % sw
        start_h, start_w = _starting_coord(sh, ph, start_r), _starting_coord(sw, pw, start_s)
        if start_h < layer.h and start_w < layer.w:
            out.append((start_r, start_s, start_h, start_w, len(range(start_r, layer.r, sh)),
                        len(range(start_s, layer.s, sw))))
    return tuple(out)


@memo(256)
def dgrad_subproblems(layer, kernel) -> tuple:
    """Strided dgrad (DESIGN 3a) as one unit-stride-like GEMM per starting filter position f: rows
    (n, p', q') of dx pixels h = start_h + p' stride_h (w likewise), taps r = start_r, start_r +
    stride_h, ... read dy at p = p' + off_h - i (i-th tap), i.e. an fprop window over dy with stride 1,
    dilation 1, the taps in reverse. Returns [(Geometry, share)]: sub-problems with at least one tap
    and one row (idle and store-only CTAs load nothing); ``share`` is the sub-problem's part of the
    layer's B and C traffic (its taps' and rows' share); A and B counts are the sub-problem's exact ones
    (`_counts_backward._l1_dgrad` on its starting position alone), C its rows' share of the stores.
    Memoized (`_memo`): a tuple, read-only."""
    from ._counts_backward import _dgrad_positions, _l1_dgrad
    from ._groups import kernel_templates
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    sh, sw = layer.stride
    ph, pw = layer.pad
    P, Q = layer.p, layer.q
    eb = kernel.elem_bytes
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    total = l1_counts(layer, kernel)
    fpos, per_filter = _dgrad_positions(layer, kernel)
    tpl = kernel_templates(kernel)
    subs = []
    for start_r, start_s, start_h, start_w, nr, ns in strided_starts(layer):
        pp, qq = -(-(H - start_h) // sh), -(-(W - start_w) // sw)
        if nr == 0 or ns == 0:
            subs.append((None, nr, ns, pp, qq, start_r, start_s, start_h, start_w))
            continue
        subs.append(("x", nr, ns, pp, qq, start_r, start_s, start_h, start_w))
    taps_total = sum(nr * ns * pp * qq for kind, nr, ns, pp, qq, *_ in subs if kind)
    rows_total = sum(pp * qq for _kind, _nr, _ns, pp, qq, *_ in subs)
    out = []
    row_b = R * S * C * eb
    uniq_b = float(_cdiv(K * C * R * S * eb, SEC))
    tiles_n = _cdiv(C, tn)
    last_n = C - (tiles_n - 1) * tn
    # B lines of a k-step row and of a column tile's row: the same for every sub-problem
    rows = K / _cdiv(K, tk)
    lpr_b = lines_per_row(C, tn, eb, row_b, sw * C * eb, LINE)
    lines_tn, lines_last = _dgrad_tile_lines(C, tn, last_n, eb, row_b, sw * C * eb)
    for kind, nr, ns, pp, qq, start_r, start_s, start_h, start_w in subs:
        if not kind:
            continue
        off_h = (start_h + ph - start_r) // sh
        off_w = (start_w + pw - start_s) // sw
        win = Window(N, K, P, Q, nr, ns, 1, 1, nr - 1 - off_h, ns - 1 - off_w, 1, 1, pp, qq, True)
        one = fpos.copy()                       # this starting position alone: its exact A and B counts
        one[:, 0] = 0
        one[start_r * sw + start_s, 0] = 1
        res = _l1_dgrad(N, C, H, W, K, R, S, sh, sw, ph, pw, 1, 1, P, Q, eb, tn, tk, one, per_filter, *tpl)
        share = nr * ns * pp * qq / taps_total
        row_share = pp * qq / rows_total
        ex = {"req_A": int(res[0]), "sec_A": int(res[1]), "req_B": int(res[2]), "sec_B": int(res[3]),
              "req_C": total["req_C"] * row_share, "sec_C": total["sec_C"] * row_share}
        slice_rows = K * nr * ns
        ncls = _tile_classes(tiles_n, (rows * lines_tn, slice_rows * lines_tn),
                             (rows * lines_last, slice_rows * lines_last) if lines_last is not None else None)
        flops = 2.0 * N * pp * qq * C * K * nr * ns
        # the sub-problem's taps are sw positions apart: with sw C e < 32 the next k-step re-reads part of
        # the sectors one round later (as `_dgrad_unit`'s with C e < 32), against the sectors its taps
        # cover (shared with other sub-problems' taps when C e < 32)
        reuse_b1 = 0.0
        if sw * C * eb < SEC and ex["sec_B"]:
            sub_b = _tap_sectors(K, C, R, S, eb, range(start_r, R, sh), range(start_s, S, sw))
            reuse_b1 = _reread_next_round(sub_b, tiles_n, ex["sec_B"], _cdiv(N * pp * qq, tm) * tiles_n)
        geo = Geometry("dgrad", win, C, nr * ns * _cdiv(K, tk), ex, rows, row_b, sw * C * eb, lpr_b, ncls,
                       uniq_b * nr * ns / (R * S), 0.0, reuse_b1, flops)
        out.append((geo, share))
    return tuple(out)


@memo(256)
def dgrad_b_classes(layer, kernel, sec) -> np.ndarray:
    """Strided dgrad's sub-problems that load (starting filter position f = start_r stride_w + start_s, in
    order; idle and store-only ones retire at once, so the others fill the SMs) in classes that read the
    same filter sectors (an L1 hit needs the sector): f's taps (start_r, start_s) +
    multiples of the stride, over a CTA column's channels and two filters k, sectors of ``sec`` bytes; f
    joins the first earlier class whose sectors cover half of its own (or of the class's). With C e of
    a few bytes one sector holds several taps, so sub-problems share filter sectors (seed 1 #260, C = 5
    fp16 11x11 stride 3: simulated B L1 hits 86 %, 56 % predicted for sub-problems that never met); with
    C e >= 32 B every one has its own. Read-only."""
    R, S, C = layer.r, layer.s, layer.c
    sh, sw = layer.stride
    eb = kernel.elem_bytes
    width = min(C, kernel.tile_n) * eb
    found = []
    for start_r, start_s, _h, _w, nr, ns in strided_starts(layer):
        if not nr or not ns:
            continue                          # store-only: its CTAs retire at once
        sectors = set()
        for k in range(min(layer.k, 2)):
            for r in range(start_r, R, sh):
                for s in range(start_s, S, sw):
                    start = ((k * R + r) * S + s) * C * eb
                    sectors.update(range(start // sec, (start + width - 1) // sec + 1))
        found.append(sectors)
    cls = np.arange(len(found), dtype=np.int64)
    for f in range(len(found)):
        for g in range(f):
            if found[f] and found[g] and 2 * len(found[f] & found[g]) >= min(len(found[f]), len(found[g])):
                cls[f] = cls[g]
                break
    cls.setflags(write=False)
    return cls


@memo(256)
def dgrad_step_overlap(layer, kernel, sec, depth=0) -> np.ndarray:
    """Strided dgrad, loading sub-problems in `dgrad_b_classes`' order: [f, g] = the share of f's filter
    sectors at its k-step t that g reads at a k-step within ``depth`` of t (CTAs that start together run
    their k-steps in step; ``depth``: the k-steps a sector stays in the L1), over f's k-steps of the first
    two channel blocks of filters (k-step t: filter block t div (nr ns), tap t mod (nr ns), taps s
    fastest), a CTA column's channels; for f and g of one class (0 elsewhere: never used). Sub-problems of
    one class share sectors, but near one k-step only where their taps pair up in a sector: seed 1 #292
    (C = 8 fp16, 11x11 stride 3: 16-byte taps, two a sector) has starts s = 0 and 1 in step (4 taps each,
    half their sectors shared at each step) and s = 2 out of step (3 taps). Numba
    (`_dgrad_places.step_overlap`; tests/test_strided_dgrad_b.py holds the slow reference). Read-only."""
    sh, sw = layer.stride
    subs = np.array([(start_r, start_s, nr, ns, sh, sw) for start_r, start_s, _h, _w, nr, ns in strided_starts(layer)
                     if nr and ns], np.int64).reshape(-1, 6)
    out = step_overlap(subs, layer.r, layer.s, layer.c, layer.k, kernel.elem_bytes, kernel.tile_k,
                       min(layer.c, kernel.tile_n) * kernel.elem_bytes, sec, depth,
                       dgrad_b_classes(layer, kernel, sec))
    out.setflags(write=False)
    return out


@memo(256)
def dgrad_a_shifts(layer, kernel, line) -> tuple:
    """Strided dgrad, loading sub-problems in `dgrad_b_classes`' order: (``ashift``, ``apq``) for
    `_schedule.sm_config_summary`. ``ashift`` [f, g, u]: the shift in dy pixels of f's read rows from g's at
    k-step t_u of a tile (`_dgrad_places.row_shifts`, at most 64 k-steps); ``apq``: rows (P', Q', the dy row and
    column its dx grid's first pixel reads at its first tap, its taps along h and w) of each, then
    (P Q, Q, tile_m, P, N, 0), which place a tile's rows in its own dx grid (`_dgrad_places._tile_start`) and
    its dy window in dy (`_dgrad_places.window_layers`). Co-resident
    tiles of one place are one A window only where they are in step: seed 1 #292 (11x11 stride 3, starts
    r = 0, 1, 2 of one s on an SM, 16, 16 and 12 taps): the in-step CTAs hit 100 % simulated, the others
    47-74 % (a Python LRU over the first SMs). Read-only."""
    sh, sw = layer.stride
    ph, pw = layer.pad
    rows, pq = [], []
    for start_r, start_s, start_h, start_w, nr, ns in strided_starts(layer):
        if nr and ns:
            rows.append(((start_h + ph - start_r) // sh, (start_w + pw - start_s) // sw, nr, ns))
            pq.append((_cdiv(layer.h - start_h, sh), _cdiv(layer.w - start_w, sw)) + rows[-1])
    pq.append((layer.p * layer.q, layer.q, kernel.tile_m, layer.p, layer.n, 0))
    subs = np.array(rows, np.int64).reshape(-1, 4)
    ashift = row_shifts(subs, _cdiv(layer.k, kernel.tile_k), kernel.tile_k, kernel.elem_bytes, line, layer.q, 64)
    apq = np.array(pq, np.int64)
    ashift.setflags(write=False)
    apq.setflags(write=False)
    return ashift, apq


def geometry_check(layer, kernel) -> None:
    """ValueError (one line) for an op the model does not cover."""
    op = getattr(kernel, "op", "fprop")
    if op in ("fprop", "wgrad", "dgrad"):
        return
    raise ValueError(f"analytic model: op {op!r} is not modelled")


@memo()
def geometry(layer, kernel) -> Geometry:
    """The `Geometry` of ``layer`` run by ``kernel`` (fprop, or dgrad with unit stride); memoized, read-only."""
    op = getattr(kernel, "op", "fprop")
    if op == "fprop":
        return _fprop(layer, kernel)
    if op == "dgrad" and layer.stride == (1, 1):
        return _dgrad_unit(layer, kernel)
    raise ValueError(f"analytic model: op {op!r} with stride {layer.stride} is not modelled yet")


def grid(layer, kernel) -> tuple:
    """``(CTAs, k-steps of the longest CTA, FLOPs)`` of ``layer``'s launch for ``kernel.op``: the grid
    figures the time model charges (`_common.layer_time`). Strided dgrad counts the CTAs of its
    sub-problems that have a tap (DESIGN 3a: the others exit at once or only store)."""
    op = getattr(kernel, "op", "fprop")
    N, C, H, W, K, R, S = layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s
    tm, tn, tk = kernel.tile_m, kernel.tile_n, kernel.tile_k
    flops = float(layer.flops)
    if op == "wgrad":
        return _cdiv(K, tm) * _cdiv(R * S * C, tn), _cdiv(N * layer.p * layer.q, tk), flops
    if op == "dgrad":
        sh, sw = layer.stride
        if (sh, sw) == (1, 1):
            return _cdiv(N * H * W, tm) * _cdiv(C, tn), R * S * _cdiv(K, tk), flops
        rows, ksteps = 0, 0
        for f in range(sh * sw):
            start_r, start_s = f // sw, f % sw
            start_h = _starting_coord(sh, layer.pad[0], start_r)
            start_w = _starting_coord(sw, layer.pad[1], start_s)
            taps = len(range(start_r, R, sh)) * len(range(start_s, S, sw))
            if start_h >= H or start_w >= W or not taps:
                continue
            rows += _cdiv(N * _cdiv(H - start_h, sh) * _cdiv(W - start_w, sw), tm)
            ksteps = max(ksteps, taps * _cdiv(K, tk))
        return max(rows * _cdiv(C, tn), 1), ksteps, flops
    if layer.groups > 1:                     # grouped (traces/KERNELS.md): the CTA's groups one after another
        from traces.grouped import groups_per_cta
        ksteps = groups_per_cta(layer, kernel) * R * S * _cdiv(layer.c_per_group, tk)
    else:
        ksteps = _cdiv(layer.gemm_k, tk) if kernel.layout == "nchw" else R * S * _cdiv(C, tk)
    return _cdiv(layer.gemm_m, tm) * _cdiv(K, tn), ksteps, flops
