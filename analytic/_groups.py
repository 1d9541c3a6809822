"""Exact request and sector counts of warp requests whose rows overlap or whose lanes straddle rows
(Numba): the counting routine behind dgrad/wgrad L1 counts where `_counts._rows` does not apply.

A warp request is a *template*: entries (row offset d, byte offset, byte length, validity box)
applied to the group of rows m0 + d, for every group start m0 = o (mod G) in [0, N*P*Q). Rows are
m = n*P*Q + p*Q + q; entry i at row (n, p, q) is valid iff n < N, plo_i <= p <= phi_i and
qlo_i <= q <= qhi_i, and then covers bytes [a, a + len_i) with a = n*An + p*Ap + q*Aq + off_i. A
request is issued iff one entry is valid; its sectors are the distinct 32-byte sectors of its valid
entries (any overlap: wgrad's B rows read the same pixels at neighbouring filter positions).

`group_counts` sums over all groups without a loop over N, P or Q: a group's count depends on its
start only through (i) where its rows lie relative to the boxes' edges (and the ends of a row of
the raster and of an image) and (ii) the residues of its start modulo G (the alignment class of the
next row or image) and of its address modulo 32. Along n, p and q the starts are cut into runs at
every edge b and at b - k (k: how far past its start row/image a group reaches); in a run no group
crosses an edge, so the run's groups fall into residue classes of a period <= lcm(G, 32) whose
members count alike: one representative per class is evaluated lane-exactly (`_eval_group`) and
weighted by the class size. Runs where a group crosses an edge are evaluated start by start (at
most k starts per edge).
"""
from __future__ import annotations

import functools

import numpy as np
from simcore._jit import njit

from ._counts import SEC, _lcm, _mult, _period, _rows

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code from _counts.py. tests/test_jit_deps.py checks this digest of it: updating the digest after
# an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "19987d90b14e214e"

# columns of a template's entry array (int64)
E_D, E_PLO, E_PHI, E_QLO, E_QHI, E_OFF, E_LEN, E_COLS = range(8)


@njit(cache=True)
def _eval_group(n, p0, q0, N, P, Q, An, Ap, Aq, ent, lo, hi):
    """(1, distinct sectors) of the request of the group starting at row (n, p0, q0), (0, 0) if no
    entry is valid. ``lo``/``hi``: scratch of the template's length."""
    cnt = 0
    for i in range(ent.shape[0]):
        q = q0 + ent[i, E_D]
        p = p0
        nn = n
        if q >= Q:
            p += q // Q
            q = q % Q
            if p >= P:
                nn += p // P
                p = p % P
        if nn >= N or p < ent[i, E_PLO] or p > ent[i, E_PHI] or q < ent[i, E_QLO] or q > ent[i, E_QHI]:
            continue
        a = nn * An + p * Ap + q * Aq + ent[i, E_OFF]
        x = a // SEC
        y = (a + ent[i, E_LEN] - 1) // SEC
        j = cnt                                   # insertion by first sector (mostly in order)
        while j > 0 and lo[j - 1] > x:
            lo[j] = lo[j - 1]
            hi[j] = hi[j - 1]
            j -= 1
        lo[j] = x
        hi[j] = y
        cnt += 1
    if cnt == 0:
        return 0, 0
    sec = 0
    end = lo[0] - 1
    for j in range(cnt):
        if hi[j] > end:
            sec += hi[j] - max(lo[j], end + 1) + 1
            end = hi[j]
    return 1, sec


@njit(cache=True)
def _runs(extent, edges, nedges, reach):
    """Cut [0, extent) where a start x passes an edge b (x = b) or x + reach does (x = b - reach):
    returns (cuts, number of runs, zone flags); run j is [cuts[j], cuts[j+1]), a zone iff a start
    in it has b in (x, x + reach] for some edge b (its groups cross an edge)."""
    cand = np.empty(2 * nedges + 2, np.int64)
    k = 0
    cand[k] = 0
    cand[k + 1] = extent
    k += 2
    for i in range(nedges):
        for x in (edges[i], edges[i] - reach):
            if 0 < x < extent:
                cand[k] = x
                k += 1
    # sorted distinct candidates, by insertion in place (a handful of them; np.unique compiled Numba's
    # quicksort: about 1 s of the first run)
    n = 0
    for i in range(k):
        x = cand[i]
        j = n
        while j > 0 and cand[j - 1] > x:
            j -= 1
        if j > 0 and cand[j - 1] == x:
            continue
        for t in range(n, j, -1):
            cand[t] = cand[t - 1]
        cand[j] = x
        n += 1
    cuts = cand[:n]
    nrun = cuts.shape[0] - 1
    zone = np.zeros(max(nrun, 1), np.bool_)
    for j in range(nrun):
        x = cuts[j]
        for i in range(nedges):
            if x < edges[i] <= x + reach:
                zone[j] = True
                break
    return cuts, nrun, zone


@njit(cache=True)
def _row_sum(n, p0, N, P, Q, An, Ap, Aq, ent, G, o, qcuts, nq, qzone, Tqi, lo, hi):
    """Requests and sectors of the groups starting in raster row (n, p0)."""
    PQ = P * Q
    c = (o - n * PQ - p0 * Q) % G
    req = 0
    sec = 0
    for j in range(nq):
        a = qcuts[j]
        b = qcuts[j + 1]
        first = a + (c - a) % G
        if first >= b:
            continue
        count = (b - 1 - first) // G + 1
        if qzone[j]:
            for i in range(count):
                r, s = _eval_group(n, p0, first + i * G, N, P, Q, An, Ap, Aq, ent, lo, hi)
                req += r
                sec += s
        else:
            for i in range(min(Tqi, count)):
                mult = _mult(count, Tqi, i)
                r, s = _eval_group(n, p0, first + i * G, N, P, Q, An, Ap, Aq, ent, lo, hi)
                req += mult * r
                sec += mult * s
    return req, sec


@njit(cache=True)
def _image_sum(n, N, P, Q, An, Ap, Aq, ent, G, o, pcuts, npr, pzone, Tp, qcuts, nq, qzone, Tqi, lo, hi):
    """Requests and sectors of the groups starting in image n."""
    req = 0
    sec = 0
    for j in range(npr):
        a = pcuts[j]
        length = pcuts[j + 1] - a
        if pzone[j]:
            for p0 in range(a, a + length):
                r, s = _row_sum(n, p0, N, P, Q, An, Ap, Aq, ent, G, o, qcuts, nq, qzone, Tqi, lo, hi)
                req += r
                sec += s
        else:
            for i in range(min(Tp, length)):
                mult = _mult(length, Tp, i)
                r, s = _row_sum(n, a + i, N, P, Q, An, Ap, Aq, ent, G, o, qcuts, nq, qzone, Tqi, lo, hi)
                req += mult * r
                sec += mult * s
    return req, sec


@njit(cache=True)
def group_counts(N, P, Q, An, Ap, Aq, ent, G, o):
    """(requests, sectors) of the template ``ent`` (rows: entries, columns `E_*`) over every group
    start m0 = o (mod G), 0 <= m0 < N*P*Q; see the module docstring."""
    ne = ent.shape[0]
    if ne == 0 or N <= 0 or P <= 0 or Q <= 0:
        return 0, 0
    D = 0
    for i in range(ne):
        D = max(D, ent[i, E_D])
    PQ = P * Q
    reach_n = (PQ - 1 + D) // PQ               # images past its own a group can reach
    reach_p = (Q - 1 + D) // Q                 # raster rows past its own
    pe = np.empty(2 * ne + 1, np.int64)
    qe = np.empty(2 * ne + 1, np.int64)
    k = 0
    for i in range(ne):
        if ent[i, E_PLO] <= ent[i, E_PHI] and ent[i, E_QLO] <= ent[i, E_QHI]:
            pe[k] = ent[i, E_PLO]
            pe[k + 1] = ent[i, E_PHI] + 1
            qe[k] = ent[i, E_QLO]
            qe[k + 1] = ent[i, E_QHI] + 1
            k += 2
    pe[k] = P
    qe[k] = Q
    pcuts, npr, pzone = _runs(P, pe, k + 1, reach_p)
    qcuts, nq, qzone = _runs(Q, qe, k + 1, D)
    Tn = _lcm(_period(PQ, G), _period(An, SEC))
    Tp = _lcm(_period(Q, G), _period(Ap, SEC))
    Tqi = _period(G * Aq, SEC)                 # in steps of G along q
    lo = np.empty(ne, np.int64)
    hi = np.empty(ne, np.int64)
    req = 0
    sec = 0
    safe = max(0, N - reach_n)                 # images whose groups end inside the tensor
    for i in range(min(Tn, safe)):
        mult = _mult(safe, Tn, i)
        r, s = _image_sum(i, N, P, Q, An, Ap, Aq, ent, G, o, pcuts, npr, pzone, Tp, qcuts, nq, qzone, Tqi, lo, hi)
        req += mult * r
        sec += mult * s
    for n in range(safe, N):
        r, s = _image_sum(n, N, P, Q, An, Ap, Aq, ent, G, o, pcuts, npr, pzone, Tp, qcuts, nq, qzone, Tqi, lo, hi)
        req += r
        sec += s
    return req, sec


# a thread map's templates as one array (`_templates`): rows 0..T-1 describe template t (its entry rows
# [first, end), its G and o, whether uniform), rows T.. are the entries (row offset, first and end column)
T_FIRST, T_END, T_G, T_O, T_UNI = range(5)
X_D, X_LO, X_HI = range(3)


@functools.lru_cache(maxsize=64)
def _templates(tmap, threads: int, align: int) -> np.ndarray:
    """The warp-request templates of a thread map (layout above): template t's groups start at rows
    o (mod G), entry (d, lo, hi) reads columns [lo, hi) of row start + d. Uniform: g entries on rows
    0..g-1 with the same columns, G = g, o = 0 (whole aligned groups of rows, as `_rows` counts).
    ``align`` < vector (tensor-op, C not a multiple of 8): each vector is read by vector / align
    accesses, one request each: per access ``sub`` the t_c lanes' pieces [u v + sub, u v + sub + align) of
    each of the g rows (the row sets of the warp-raked and the stripmined maps are the same aligned
    groups of g rows)."""
    t_c, t_s, v = tmap.t_c, tmap.t_s, tmap.vector
    if align < v:
        if 32 % t_c:
            raise ValueError(f"sub-vector accesses need t_c dividing 32, got t_c={t_c}")
        g = 32 // t_c
        tpls = [([(d, u * v + sub, u * v + sub + align) for d in range(g) for u in range(t_c)], g, 0, 0)
                for sub in range(0, v, align)]
    elif 32 % t_c == 0:                        # g = 32 / t_c rows, all t_c v columns
        g = 32 // t_c
        tpls = [([(d, 0, t_c * v) for d in range(g)], g, 0, 1)]
    elif t_c % 32 == 0:                        # one row, 32 v columns
        tpls = [([(0, u, u + 32 * v)], 1, 0, 1) for u in range(0, t_c * v, 32 * v)]
    else:                                      # a warp's runs of lanes straddle rows
        tpls = []
        for warp in range(threads // 32):
            first = 32 * warp // t_c
            runs = {}
            for t in range(32 * warp, 32 * warp + 32):
                lo, _ = runs.get(t // t_c, ((t % t_c) * v, 0))
                runs[t // t_c] = (lo, (t % t_c) * v + v)
            tpls.append(([(row - first, lo, hi) for row, (lo, hi) in sorted(runs.items())], t_s, first, 0))
    rows = []
    first = len(tpls)
    for entries, G, o, uniform in tpls:
        rows.append((first, first + len(entries), G, o, uniform))
        first += len(entries)
    rows += [(d, lo, hi, 0, 0) for entries, _, _, _ in tpls for d, lo, hi in entries]
    out = np.array(rows, dtype=np.int64)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=64)
def kernel_templates(kernel, align=None) -> tuple:
    """(templates of A, templates of B) of a KernelConfig: cached per kernel, since its thread maps are
    derived (and validated) anew at every access. ``align``: elements per access when below the vector
    (`traces._tensorop.alignment` of the layer); None: the vector."""
    ta, tb = kernel.thread_map_a, kernel.thread_map_b
    return (_templates(ta, kernel.threads, align or ta.vector),
            _templates(tb, kernel.threads, align or tb.vector))


@njit(cache=True)
def _box_operand(N, P, Q, plo, phi, qlo, qhi, An, Ap, Aq, b, cv, eb, tpl):
    """(requests, sectors) of one operand over the rows of a box (every row valid on the box,
    columns [0, cv), column c at byte b + c eb of a row), all templates of ``tpl``."""
    req = 0
    sec = 0
    if N <= 0 or plo > phi or qlo > qhi:
        return 0, 0
    for t in range(tpl[0, T_FIRST]):
        e0 = tpl[t, T_FIRST]
        e1 = tpl[t, T_END]
        if tpl[t, T_UNI]:
            ln = min(tpl[e0, X_HI], cv) - tpl[e0, X_LO]
            if ln <= 0:
                continue
            rq, sc = _rows(N, P, Q, plo, phi, qlo, qhi, e1 - e0, An, Ap, Aq, b + tpl[e0, X_LO] * eb, ln * eb)
        else:
            ent = np.empty((e1 - e0, E_COLS), np.int64)
            k = 0
            for e in range(e0, e1):
                ln = min(tpl[e, X_HI], cv) - tpl[e, X_LO]
                if ln > 0:
                    ent[k, E_D] = tpl[e, X_D]
                    ent[k, E_PLO] = plo
                    ent[k, E_PHI] = phi
                    ent[k, E_QLO] = qlo
                    ent[k, E_QHI] = qhi
                    ent[k, E_OFF] = b + tpl[e, X_LO] * eb
                    ent[k, E_LEN] = ln * eb
                    k += 1
            rq, sc = group_counts(N, P, Q, An, Ap, Aq, ent[:k], tpl[t, T_G], tpl[t, T_O])
        req += rq
        sec += sc
    return req, sec


@njit(cache=True)
def _blocked_rows(nrows, pitch, base, blocks, eb, tpl):
    """(requests, sectors) of an operand whose rows 0..nrows-1 lie ``pitch`` bytes apart (filters k of
    w, or rows npq of dy), over every reduction block of `_counts._blocks` (column c0 + c of a row at
    byte base + (c0 + c) eb)."""
    req = 0
    sec = 0
    for i in range(blocks.shape[0]):
        rq, sc = _box_operand(1, 1, nrows, 0, 0, 0, nrows - 1, 0, 0, pitch, base + blocks[i, 0] * eb, blocks[i, 1],
                              eb, tpl)
        req += blocks[i, 2] * rq
        sec += blocks[i, 2] * sc
    return req, sec
