"""Exact L1 request and sector counts of DESIGN sections 3 and 3a's kernels (fprop, dgrad, wgrad), in
closed form (Numba): `l1_counts` / `l1_counts_for`, the primitives they share, and helpers of the model.

The per-op kernels are in `_counts_fprop` (fprop, every op's stores), `_counts_backward` (dgrad,
wgrad) and `_counts_grouped` (grouped fprop); requests that are not whole aligned rows (lanes straddling rows, entries with different
validity boxes, overlapping rows) are counted by `_groups.group_counts`. The central routine here
 is `_rows`: a set of "rows" (GEMM rows m = n*P*Q + p*Q + q, or filters k, ...)
forming a box n in [0, N), p in [plo, phi], q in [qlo, qhi]; rows are grouped into warp requests by
aligned groups of ``g`` consecutive row indices (group id = m // g); row m covers the byte interval
[a(m), a(m) + L) with a = n*An + p*Ap + q*Aq + b. It returns

* requests: the number of groups holding at least one row of the box, and
* sectors:  the sum over groups of the number of distinct 32-byte sectors their rows cover,

both exactly, with loops bounded by the periods of the residues (m mod g, a mod 32) in n, p and q
(each <= lcm(g, 32), i.e. <= 32 when g divides 32) -- never by N, P, Q or the number of groups.

Counting rules (proved in MODEL.md):

* the rows of one (n, p) form an interval of m; groups touched by an interval starting at residue
  mu = m mod g with w rows: 1 + (mu + w - 1) // g; consecutive intervals (in m order) that end and
  start in the same group share it (chain rule), so distinct groups = sum touched - shared pairs.
* the addresses of the rows are increasing in m within a group (monotone raster), rows never
  overlap, so the sectors of a group = sum over rows of sectors(interval) - number of consecutive
  valid rows of the group whose intervals share a sector (last sector of one == first of next).
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np
from simcore._jit import njit

from traces.kernel import KernelConfig
from traces.layer import ConvLayer

from ._memo import memo
from ._tiers import tiered

SEC = 32


@njit(cache=True)
def _gcd(a, b):
    a = abs(a)
    b = abs(b)
    while b:
        a, b = b, a % b
    return a


@njit(cache=True)
def _lcm(a, b):
    return a // _gcd(a, b) * b


@njit(cache=True)
def _period(step, mod):
    """Period of i -> (i * step) mod ``mod``."""
    return mod // _gcd(step % mod, mod)


@njit(cache=True)
def _mult(count, period, i):
    """Number of j in [0, count) with j % period == i."""
    if i >= count or count <= 0:
        return 0
    return (count - 1 - i) // period + 1


@njit(cache=True)
def _rowfunc(mu, al, w, g, Aq, L, Tq):
    """Sectors of the rows of one (n, p) interval (w rows starting at m-residue mu, address residue
    al), minus sectors shared by consecutive rows of the same group."""
    D = Aq - L + 1
    total = 0
    for t0 in range(min(Tq, w)):
        mult = _mult(w, Tq, t0)
        x = (al + t0 * Aq) % SEC
        total += mult * ((x + L - 1) // SEC + 1)
        if D < SEC:
            mh = _mult(w - 1, Tq, t0)
            if mh > 0 and (mu + t0) % g != g - 1:
                if (x + L - 1) % SEC + D < SEC:
                    total -= mh
    return total


@njit(cache=True)
def _rows(N, P, Q, plo, phi, qlo, qhi, g, An, Ap, Aq, b, L):
    """(requests, sectors) of a box of rows; see the module docstring."""
    cntp = phi - plo + 1
    w = qhi - qlo + 1
    if N <= 0 or cntp <= 0 or w <= 0:
        return 0, 0
    PQ = P * Q
    Tn = _lcm(_period(PQ, g), _period(An, SEC))
    Tp = _lcm(_period(Q, g), _period(Ap, SEC))
    Tq = _lcm(g // _gcd(1, g), _period(Aq, SEC))
    dm_row = Q - (w - 1)
    da_row = Ap - (w - 1) * Aq - L + 1
    dm_img = PQ - (cntp - 1) * Q - (w - 1)
    da_img = An - (cntp - 1) * Ap - (w - 1) * Aq - L + 1
    cache = np.full((g, SEC), -1, np.int64)
    req = 0
    sec = 0
    for jn in range(min(Tn, N)):
        mn = _mult(N, Tn, jn)
        mn_head = _mult(N - 1, Tn, jn)
        for jp in range(min(Tp, cntp)):
            mp = _mult(cntp, Tp, jp)
            mp_head = _mult(cntp - 1, Tp, jp)
            p = plo + jp
            mu = (jn * PQ + p * Q + qlo) % g
            al = (jn * An + p * Ap + qlo * Aq + b) % SEC
            req += mn * mp * (1 + (mu + w - 1) // g)
            f = cache[mu, al]
            if f < 0:
                f = _rowfunc(mu, al, w, g, Aq, L, Tq)
                cache[mu, al] = f
            sec += mn * mp * f
            if mp_head > 0:
                mue = (mu + w - 1) % g
                if mue + dm_row < g:
                    req -= mn * mp_head
                    ale = (al + (w - 1) * Aq + L - 1) % SEC
                    if ale + da_row < SEC:
                        sec -= mn * mp_head
        if mn_head > 0:
            mue = (jn * PQ + phi * Q + qhi) % g
            if mue + dm_img < g:
                req -= mn_head
                ale = (jn * An + phi * Ap + qhi * Aq + b + L - 1) % SEC
                if ale + da_img < SEC:
                    sec -= mn_head
    return req, sec


@njit(cache=True)
def _ramp(x, lo, hi):
    """L1 hit probability of a reuse at relative distance x (1 below lo, 0 above hi)."""
    if x <= lo:
        return 1.0
    if x >= hi:
        return 0.0
    return (hi - x) / (hi - lo)


@njit(cache=True)
def _range_1d(out_size, in_size, stride, pad, dil, f):
    """Output positions o in [0, out_size) with 0 <= o*stride - pad + f*dil < in_size: (lo, hi)."""
    off = f * dil - pad
    # o*stride + off >= 0  ->  o >= ceil(-off / stride)
    lo = -((off) // stride) if off < 0 else 0
    if lo < 0:
        lo = 0
    # o*stride + off <= in_size - 1
    top = in_size - 1 - off
    if top < 0:
        return 0, -1
    hi = top // stride
    if hi > out_size - 1:
        hi = out_size - 1
    return lo, hi


@njit(cache=True)
def _blocks(extent, tile, eb):
    """Classes of reduction blocks [x0, x0 + tile) over [0, extent): rows (x0, valid, multiplicity).
    Full blocks are grouped by x0*eb mod 32 (period <= 32); the last partial block is its own class."""
    nfull = extent // tile
    rem = extent - nfull * tile
    T = _period(tile * eb, SEC)
    n = min(T, nfull) + (1 if rem else 0)
    out = np.zeros((n, 3), np.int64)
    i = 0
    for c in range(min(T, nfull)):
        out[i, 0] = c * tile
        out[i, 1] = tile
        out[i, 2] = _mult(nfull, T, c)
        i += 1
    if rem:
        out[i, 0] = nfull * tile
        out[i, 1] = rem
        out[i, 2] = 1
    return out


@memo()
@tiered
def l1_counts(layer, kernel) -> MappingProxyType:
    """Exact L1 load requests/sectors (A, B) and store requests/sectors (C) of one layer, for
    ``kernel.op`` fprop, dgrad or wgrad (arguments already validated: see `l1_counts_for`); read-only,
    memoized (`_memo`)."""
    if layer.groups > 1:                        # (imported here: these modules import this one)
        from ._counts_grouped import grouped_counts
        return MappingProxyType(grouped_counts(layer, kernel))
    if kernel.op == "fprop":
        from ._counts_fprop import fprop_counts
        return MappingProxyType(fprop_counts(layer, kernel))
    from ._counts_backward import backward_counts
    return MappingProxyType(backward_counts(layer, kernel))


def l1_counts_for(layer, kernel) -> dict:
    """Exact L1 request and sector counts of one layer for any ``kernel.op`` (DESIGN sections 3, 3a).

    Parameters
    ----------
    layer : traces.ConvLayer
        The forward layer (dgrad and wgrad read and write its gradients).
    kernel : traces.KernelConfig

    Returns
    -------
    dict
        ``req_A``, ``sec_A``, ``req_B``, ``sec_B`` (L1 load requests and sectors of the GEMM
        operands A and B), ``req_C``, ``sec_C`` (store requests and sectors of C), ``valid_a_elems``
        and ``valid_mrs`` (see `analytic._counts_backward`); exact where `l1_exact` says so.

    Raises
    ------
    TypeError
        ``layer`` is not a ConvLayer or ``kernel`` not a KernelConfig.
    ValueError
        A layer the kernel cannot run (`KernelConfig.check_layer`; grouped layers: `traces.grouped`).
    """
    if not isinstance(layer, ConvLayer):
        raise TypeError(f"layer must be a traces.ConvLayer, got {type(layer).__name__}")
    if not isinstance(kernel, KernelConfig):
        raise TypeError(f"kernel must be a traces.KernelConfig, got {type(kernel).__name__}")
    kernel.check_layer(layer)
    return dict(l1_counts(layer, kernel))


def l1_exact(layer, kernel) -> bool:
    """Whether `l1_counts` is exact for this layer and kernel: always (MODEL.md section 1), for every op,
    layout and thread map (kept so that callers need not know)."""
    return True


@njit(cache=True)
def block_sharing(extent, tile, eb, step):
    """Fraction of the sector lookups of a k-step's block [x0, x0 + tile) (of ``extent`` elements per
    row) that an earlier block already read: rows (nhwc A: the pixels one filter position reads,
    sw C e bytes apart; B: a filter's positions, C e bytes apart) lie ``step`` bytes apart, so a block
    boundary inside a sector (tile e not a multiple of 32, or rows not sector-aligned) puts part of a
    sector in the next block, of this row or of the next one. Counted over one period of the row
    pattern (lcm(step, 32) bytes), each block's sectors as a set."""
    step = max(step, extent * eb)
    g = _gcd(step % SEC, SEC) if step % SEC else SEC
    period = step * (SEC // g)                    # lcm(step, 32) bytes
    nsec = period // SEC
    nrows = period // step
    seen = np.zeros(nsec, np.bool_)
    mine = np.zeros(nsec, np.bool_)
    shared = 0
    total = 0
    x0 = 0
    while x0 < extent:
        x1 = min(extent, x0 + tile)
        mine[:] = False
        for i in range(nrows):
            lo = (i * step + x0 * eb) // SEC
            hi = (i * step + x1 * eb - 1) // SEC
            for k in range(lo, hi + 1):
                mine[k % nsec] = True
        for k in range(nsec):
            if mine[k]:
                total += 1
                if seen[k]:
                    shared += 1
                seen[k] = True
        x0 = x1
    return shared / total if total else 0.0


@njit(cache=True)
def lines_per_row(extent, tile, eb, step, pos_step, unit):
    """Distinct ``unit``-byte lines a k-step reads per row access: rows ``step`` bytes apart each read a
    block [x0, x0 + tile) of their ``extent`` elements, at a filter-position offset (a multiple of
    ``pos_step`` bytes). The pattern repeats every lcm(step, unit) bytes, so lines are counted
    cyclically over that period (a line shared by consecutive rows counts once) and divided by its
    rows; averaged over the blocks and the position offsets (at most 8 of each, sampled evenly)."""
    return block_lines_per_row(extent, tile, eb, step, pos_step, unit, 0, (extent + tile - 1) // tile)


@njit(cache=True)
def block_lines_per_row(extent, tile, eb, step, pos_step, unit, first, last):
    """`lines_per_row` over the blocks ``first`` .. ``last`` - 1 only (at most 8 of them, sampled evenly)."""
    nrows = unit // _gcd(step % unit, unit) if step % unit else 1
    nlines = nrows * step // unit
    if nlines < 1:
        nlines = 1
    g = _gcd(pos_step % unit, unit) if pos_step % unit else unit
    npos = unit // g
    take_pos = min(npos, 8)
    nblk = last - first
    take_blk = min(nblk, 8)
    mark = np.zeros(nlines, np.bool_)
    total = 0.0
    for ip in range(take_pos):
        off = ((ip * npos) // take_pos) * g
        for ib in range(take_blk):
            x0 = (first + (ib * nblk) // take_blk) * tile
            x1 = min(extent, x0 + tile)
            mark[:] = False
            for i in range(nrows):
                lo = (off + i * step + x0 * eb) // unit
                hi = (off + i * step + x1 * eb - 1) // unit
                for k in range(lo, hi + 1):
                    mark[k % nlines] = True
            total += mark.sum() / nrows
    return total / (take_pos * take_blk)


@njit(cache=True)
def nchw_window_lines(T, TK, C, R, S, Q, sw, dw, eb, unit):
    """`nchw_lines_per_row` of a window of d consecutive GEMM k positions, for each d < R S, over that of a
    k-step (TK positions): out[d] (compiled: the loop of 120 calls from Python took 264 us a 11x11 shape)."""
    out = np.zeros(R * S, np.float64)
    per_round = nchw_lines_per_row(T, TK, C, R, S, Q, sw, dw, eb, unit)
    for d in range(1, R * S):
        out[d] = nchw_lines_per_row(T, d, C, R, S, Q, sw, dw, eb, unit) / per_round
    return out


@njit(cache=True)
def nchw_lines_per_row(T, TK, C, R, S, Q, sw, dw, eb, unit):
    """nchw A: distinct ``unit``-byte lines a k-step reads per row access. A k-step covers TK
    consecutive gk = (c r + r) s + s; those with the same (c, r) read the same input rows, at columns
    q sw + s dw of the tile's output columns, which overlap when the taps cover the stride. Averaged
    over at most 8 k-steps sampled evenly."""
    GK = C * R * S
    ksteps = (GK + TK - 1) // TK
    take = min(ksteps, 8)
    q_t = min(T, Q)                          # output columns of one output row in the tile
    rows_out = max(1.0, T / Q)               # output rows in the tile
    total = 0.0
    for i in range(take):
        gk0 = ((i * ksteps) // take) * TK
        gk = gk0
        lines = 0.0
        while gk < min(GK, gk0 + TK):
            cr = gk // S
            n_s = 0
            while gk < min(GK, gk0 + TK) and gk // S == cr:
                n_s += 1
                gk += 1
            if n_s * dw >= sw:               # the group's columns form one run
                span = (q_t - 1) * sw + (n_s - 1) * dw + 1
                lines += rows_out * ((span * eb + unit - eb) / unit)
            else:
                lines += rows_out * n_s * (((q_t - 1) * sw + 1) * eb + unit - eb) / unit
        total += lines / T
    return total / take
