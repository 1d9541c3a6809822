"""Same-round sharers of a tile on other SMs: the L2 lines between a tile's first reader and its followers.

The dense engine counts a wave's DRAM reads of A (B) once per tile_m (tile_n) and wave: the wave's other CTAs
of that tile read the same sectors in the same round, "right behind" the first (MODEL.md section 3). In a
round the SMs step in SM order and each SM's CTAs in slot order (DESIGN section 3), so a follower on another
SM reads them after every CTA placed between the two has stepped, and those CTAs' lines stand between the two
reads in the L2: their distinct tiles' A lines of a k-step and filter lines. Where that reaches the L2 (many
CTAs a wave, a small L2), the follower misses too. Seed 2 #132 (360 CTAs a wave, 64 one-line rows and 128
filter lines a step, a quarter of a titanxp's L2; `validation.l2_replay`): the CTAs of a tile_m sit 14 to 17
SMs apart, 110 CTAs of other tiles between, and 69 % of the followers' A reads miss the L2; taken as hits,
A's DRAM reads were 2.5 M predicted, 6.9 M simulated.

`follower_windows` counts, on sampled waves, each follower's distinct tiles between it and the previous
reader of its tile; `follower_misses` judges those windows against the L2.
"""
from __future__ import annotations

import numpy as np
from simcore._jit import njit

from ._l2 import l2_miss_prob
from ._schedule import tile_of

# Numba's on-disk cache checks only this file's own time stamp, but its kernels compile in code from _l2.py and
# _schedule.py: tests/test_jit_deps.py checks this digest of them, so no stale compiled kernel survives an edit.
_JIT_DEPS_SHA256 = "e575c67e56bf7f75"

__all__ = ["follower_windows", "window_lines", "follower_misses", "mean_gap"]


@njit(cache=True)
def _range_distinct(seq, count, nvals, lo, hi, out, col):
    """out[q, col] = the distinct values of seq at the places lo[q] .. hi[q] - 1 of the round repeated twice
    (place u is seq[u mod count]; 0 <= lo, hi <= 2 count), for every query q at once: a sweep over the places
    keeping a Fenwick tree of each value's last place so far, each query answered at its end."""
    length = 2 * count
    tree = np.zeros(length + 1, np.int64)
    lastpos = np.full(nvals, -1, np.int64)
    order = np.argsort(hi)
    k = 0
    for r in range(-1, length):
        if r >= 0:
            v = seq[r % count]
            if lastpos[v] >= 0:
                i = lastpos[v] + 1
                while i <= length:
                    tree[i] -= 1
                    i += i & -i
            i = r + 1
            while i <= length:
                tree[i] += 1
                i += i & -i
            lastpos[v] = r
        while k < order.shape[0] and hi[order[k]] - 1 <= r:
            q = order[k]
            total = 0
            if hi[q] > lo[q]:
                i = hi[q]
                while i > 0:
                    total += tree[i]
                    i -= i & -i
                i = lo[q]
                while i > 0:
                    total -= tree[i]
                    i -= i & -i
            out[q, col] = total
            k += 1


@njit(cache=True)
def follower_windows(tiles_m, tiles_n, swz, sms, cps, samples, along_n):
    """(each follower's window on the sampled waves, each shared tile's wrap, the wrap's whole round (every
    tile of its wave once), followers and wraps each sample stands for, the share of the waves' tiles that
    have followers). A window is a row [distinct tile_m's, distinct tile_n's]: times a tile's A lines and a
    CTA's filter lines of one k-step, its lines (`window_lines`).

    A follower is a CTA whose wave placed another CTA of its tile_m (``along_n`` false) or tile_n (true) before
    it in the round; its window holds the distinct tile_m's and tile_n's of the CTAs placed strictly between
    the two. A shared tile's wrap
    is the window of its first reader's next-round read: the CTAs placed after the tile's last CTA in the round
    and before its first. Wave w holds blocks w·P .. w·P + P - 1 (P = sms x cps: waves retire together), block
    i of the wave on SM i mod sms, slot i div sms (DESIGN section 3's passes), its place in the round SM x cps
    + slot. At most ``samples`` waves, spread evenly over the grid."""
    ctas = tiles_m * tiles_n
    per_wave = sms * cps
    waves = (ctas + per_wave - 1) // per_wave
    take = min(waves, samples)
    order_tm = np.empty(per_wave, np.int64)
    order_tn = np.empty(per_wave, np.int64)
    place = np.empty(per_wave, np.int64)
    ntile = max(tiles_m, tiles_n)
    last = np.empty(ntile, np.int64)
    first_at = np.empty(ntile, np.int64)
    copies = np.zeros(ntile, np.int64)
    out = np.empty((take * per_wave, 2), np.float64)
    wraps = np.empty((take * per_wave, 2), np.float64)
    rounds = np.empty((take * per_wave, 2), np.float64)
    lo = np.empty(2 * per_wave + 1, np.int64)
    hi = np.empty(2 * per_wave + 1, np.int64)
    res = np.empty((2 * per_wave + 1, 2), np.float64)
    nout = 0
    nwrap = 0
    tiles_seen = 0
    for iw in range(take):
        w = (iw * waves) // take
        first = w * per_wave
        count = min(per_wave, ctas - first)
        for i in range(count):
            place[i] = (i % sms) * cps + i // sms
        order = np.argsort(place[:count])
        for j in range(count):
            tm, tn = tile_of(first + order[j], tiles_m, tiles_n, swz)
            order_tm[j] = tm
            order_tn[j] = tn
        last[:] = -1
        copies[:] = 0
        nq = 0
        for j in range(count):                  # followers: the places strictly between two copies
            t = order_tn[j] if along_n else order_tm[j]
            if last[t] >= 0:
                lo[nq] = last[t] + 1
                hi[nq] = j
                nq += 1
            else:
                first_at[t] = j
                tiles_seen += 1
            last[t] = j
            copies[t] += 1
        nfol = nq
        for t in range(ntile):                  # wraps: after a shared tile's last copy, before its first
            if copies[t] > 1:
                lo[nq] = last[t] + 1
                hi[nq] = first_at[t] + count
                nq += 1
        lo[nq] = 0                              # the round itself
        hi[nq] = count
        nq += 1
        _range_distinct(order_tm, count, tiles_m, lo[:nq], hi[:nq], res, 0)
        _range_distinct(order_tn, count, tiles_n, lo[:nq], hi[:nq], res, 1)
        out[nout:nout + nfol] = res[:nfol]
        nout += nfol
        nw = nq - 1 - nfol
        wraps[nwrap:nwrap + nw] = res[nfol:nq - 1]
        rounds[nwrap:nwrap + nw, 0] = res[nq - 1, 0]
        rounds[nwrap:nwrap + nw, 1] = res[nq - 1, 1]
        nwrap += nw
    return out[:nout], wraps[:nwrap], rounds[:nwrap], waves / take, (nwrap / tiles_seen if tiles_seen else 0.0)


@njit(cache=True)
def window_lines(counts, a_lines, b_lines):
    """Lines of `follower_windows`' windows: distinct tile_m's x ``a_lines`` + distinct tile_n's x ``b_lines``
    (compiled: `_miss_sum` and `mean_gap` take their windows from it)."""
    return counts[:, 0] * a_lines + counts[:, 1] * b_lines


def follower_misses(counts, a_lines, b_lines, weight, misses_per_cta, cap_lines, ways, cliff) -> float:
    """Sectors the followers (`follower_windows`' ``counts``, their lines `window_lines`) read from DRAM: each of
    a follower's L1 misses of the tile (``misses_per_cta``) finds its line gone where the window's lines fill
    the L2 (`_l2.l2_miss_prob`)."""
    return _miss_sum(counts, a_lines, b_lines, cap_lines, ways, cliff) * weight * misses_per_cta


@njit(cache=True)
def _miss_sum(counts, a_lines, b_lines, cap_lines, ways, cliff):
    """The L2 miss probabilities of the windows ``counts`` (`window_lines`), summed."""
    total = 0.0
    for lines in window_lines(counts, a_lines, b_lines):
        total += l2_miss_prob(lines / cap_lines, ways, cliff)
    return total


@njit(cache=True)
def mean_gap(rounds, wraps, a_lines, b_lines):
    """The mean over `follower_windows`' shared tiles of the lines (`window_lines`, at least 0) between a
    tile's first and last copies in its round: ``rounds`` less ``wraps``; 0 for none."""
    if rounds.shape[0] == 0:
        return 0.0
    total = 0.0
    for lines in window_lines(rounds - wraps, a_lines, b_lines):
        total += max(0.0, lines)
    return total / rounds.shape[0]
