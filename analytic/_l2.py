"""The L2 side of the model (Numba): the LRU cliff of a set-associative, hashed L2, and the
re-fetch misses of tiles that later waves read again (MODEL.md section 3).

**Cliff.** A line reused after F distinct other lines were touched survives in a fully associative
LRU cache of C lines iff F < C. In the L2, lines are spread over S = slices x sets sets of W ways
by the slice hash and the set index; the reused line is evicted iff W or more of the F lines fall
in its set. With the F lines spread at random that count is Binomial(F, 1/S) ~ Poisson(F / S), so

    P(miss) = P(Poisson(lambda) >= W),  lambda = W x (F / C) / capacity

(``capacity``: the fraction of the L2 that LRU keeps useful, ``l2_capacity``; normal approximation
with continuity correction, its spread scaled by ``l2_cliff_spread``). The cliff is as sharp as the
associativity makes it: 20-24-way slices (h100, v100) give a steeper one than 16-way (a100), and a
hypothetical L2 with few ways a soft one; no width is fitted per GPU.
"""
from __future__ import annotations

import math

from simcore._jit import njit

__all__ = ["l2_miss_prob", "refetch_misses", "footprint", "swept_rereads"]


@njit(cache=True)
def l2_miss_prob(x, ways, spread):
    """P(miss) of a reuse whose LRU window holds x (in units of the useful L2 capacity) distinct
    other lines, in an L2 of ``ways``-way sets: P(Poisson(ways x) >= ways)."""
    if x <= 0.0:
        return 0.0
    lam = ways * x
    z = (ways - 0.5 - lam) / (spread * math.sqrt(lam))
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@njit(cache=True)
def footprint(g, f1, fnew):
    """Distinct lines touched in a window of g waves: one wave's lines f1, plus fnew for each
    further wave (lines of the tiles it does not share with the wave before)."""
    return f1 + (g - 1) * fnew


@njit(cache=True)
def refetch_misses(hist, volume, f1, fnew, cap_lines, ways, spread):
    """Sum over gaps g of hist[g] x volume x P(miss | footprint of g waves)."""
    total = 0.0
    for g in range(1, hist.shape[0]):
        if hist[g] == 0.0:
            continue
        total += hist[g] * volume * l2_miss_prob(footprint(g, f1, fnew) / cap_lines, ways, spread)
    return total


@njit(cache=True)
def swept_rereads(taps, nblk, lines, more, samples, cap_lines, ways, spread, volume):
    """``volume`` x the mean L2 miss probability, summed over consecutive pairs (prev, cur) of the
    ascending ``taps``, of a line read at block k0 T_prev / T_max and again at k0 T_cur / T_1 (k0 at
    ``samples`` points over the ``nblk`` blocks; the blocks swept between, capped at ``nblk`` unless
    ``more``, touch their share of ``lines``): strided dgrad's co-resident sub-problems
    (`analytic.model._coresident_rereads`)."""
    t1 = taps[0]
    tmax = taps[taps.shape[0] - 1]
    reread = 0.0
    for j in range(1, taps.shape[0]):
        prev = taps[j - 1]
        cur = taps[j]
        miss = 0.0
        for i in range(samples):
            k0 = (i + 0.5) * nblk / samples
            hi = k0 * cur / t1
            if not more:
                hi = min(hi, float(nblk))
            blocks = max(0.0, hi - k0 * prev / tmax)
            gap = lines * min(1.0, blocks / nblk)            # no more distinct lines than dy and w hold
            miss += l2_miss_prob(gap / cap_lines, ways, spread)
        reread += volume * miss / samples
    return reread
