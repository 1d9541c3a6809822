"""When CTAs differ in length: the dispatcher's timeline at CTA granularity (Numba).

Every schedule statistic of `_schedule` assumes waves in lockstep, which holds when every CTA takes the
same number of steps. Strided dgrad's sub-problems differ in their taps, so their CTAs in k-steps
(DESIGN section 3a), and the grid runs them in block order, one sub-problem after another. From the
first CTA of another length on, each slot retires and refills at its own time, and two slots of an SM
that hold the same filter tile read it some rounds apart: the later one finds the lines only while the
rounds between fit its L1.

`lead_share` follows DESIGN section 3's dispatcher (refill at the start of a round, passes over the SMs
in order, each SM's lowest free slot first; a CTA of k k-steps takes k + 1 steps) run by run (a run: the
consecutive blocks of one sub-problem and column, all of one length), each run in closed form: slot p,
free from round f_p, starts a CTA at f_p, f_p + L, ...; the run's n blocks fill the earliest starts, so
its last start T is the least with sum_p (floor((T - f_p) / L) + 1)+ >= n, the starts at T going in the
dispatcher's order. Its cost grows with the slots and the runs, not with the CTAs of a run.
"""
from __future__ import annotations

import numpy as np

from simcore._jit import njit


@njit(cache=True)
def _starts_by(t, free, length):
    """Starts of every slot at rounds <= t (slots free from ``free``, CTAs of ``length`` rounds)."""
    total = 0
    for p in range(free.shape[0]):
        if t >= free[p]:
            total += (t - free[p]) // length + 1
    return total


@njit(cache=True)
def _fill_run(free, last, start, count, n, length, sms, cps):
    """Gives a run of ``n`` blocks of ``length`` rounds to the slots (slot p = sm cps + s, free from round
    ``free[p]``, its latest CTA started at ``last[p]``): ``start[p]`` its first start in the run,
    ``count[p]`` its blocks; ``free`` and ``last`` advanced. The run's last round t is shared with the
    next run: its starts follow the round's pass order (rank of the slot among its SM's slots starting
    at t, then SM), those an earlier run took at t included."""
    lo = free.min()
    hi = lo + (n // free.shape[0] + 1) * length + (free.max() - lo)
    while lo < hi:                                   # least t with n starts by t
        mid = (lo + hi) // 2
        if _starts_by(mid, free, length) >= n:
            hi = mid
        else:
            lo = mid + 1
    t = lo
    left = n - _starts_by(t - 1, free, length)       # blocks that start at round t
    for p in range(free.shape[0]):
        count[p] = (t - 1 - free[p]) // length + 1 if t - 1 >= free[p] else 0
        start[p] = free[p]
    for rank in range(cps):
        for sm in range(sms):
            seen = 0
            for s in range(cps):
                p = sm * cps + s
                here = t >= free[p] and (t - free[p]) % length == 0
                if here or last[p] == t:
                    if seen == rank:
                        if here and left > 0:
                            count[p] += 1
                            left -= 1
                        break
                    seen += 1
    for p in range(free.shape[0]):
        if count[p] > 0:
            last[p] = free[p] + (count[p] - 1) * length
            free[p] += count[p] * length


@njit(cache=True)
def _union(los, his, m) -> int:
    """Length of the union of the intervals [los[i], his[i]), i < m (sorted here in place)."""
    for i in range(1, m):                            # insertion sort by start: m < CTAs per SM
        lo, hi = los[i], his[i]
        j = i - 1
        while j >= 0 and los[j] > lo:
            los[j + 1], his[j + 1] = los[j], his[j]
            j -= 1
        los[j + 1], his[j + 1] = lo, hi
    return sorted_union(los, his, m)


@njit(cache=True)
def sorted_union(los, his, m) -> int:
    """Length of the union of the intervals [los[i], his[i]), i < m, given in rising order of their starts."""
    out = 0
    end = -1
    for i in range(m):
        if his[i] <= end:
            continue
        out += his[i] - max(los[i], end)
        end = his[i]
    return out


@njit(cache=True)
def lead_share(lengths, counts, loads, sms, cps, fit):
    """Share of the loading runs' CTAs that an earlier slot of their SM leads through the same run by at
    most ``fit`` rounds (0 rounds: a lower slot, which steps first in a round).

    ``lengths`` / ``counts`` / ``loads``: each run's rounds per CTA (k-steps + 1), blocks, and whether
    it reads (store-only runs take one round and read nothing). A CTA's leader on its SM: a slot whose
    CTA of the same run started δ rounds before it (δ = the two slots' first starts apart, modulo the
    run's length), counted for the CTAs of this slot that such a CTA of the leader overlaps."""
    nslot = sms * cps
    free = np.zeros(nslot, np.int64)
    last = np.full(nslot, -1, np.int64)
    start = np.zeros(nslot, np.int64)
    count = np.zeros(nslot, np.int64)
    los = np.empty(cps, np.int64)
    his = np.empty(cps, np.int64)
    led = 0.0
    total = 0.0
    for r in range(lengths.shape[0]):
        n, length = counts[r], lengths[r]
        if n <= 0:
            continue
        _fill_run(free, last, start, count, n, length, sms, cps)
        if not loads[r]:
            continue
        for sm in range(sms):
            for a in range(cps):
                pa = sm * cps + a
                if count[pa] == 0:
                    continue
                total += count[pa]
                # this slot's CTAs k = 0 .. count - 1 start at start + k length; a leader b with lead
                # d covers those k whose start - d is one of b's starts
                m = 0
                for b in range(cps):
                    pb = sm * cps + b
                    if b == a or count[pb] == 0:
                        continue
                    d = (start[pa] - start[pb]) % length
                    if d > fit or (d == 0 and b > a):
                        continue
                    # b's CTA index j = k + (start[pa] - d - start[pb]) / length must lie in [0, count[pb])
                    shift = (start[pa] - d - start[pb]) // length
                    lo = max(0, -shift)
                    hi = min(count[pa], count[pb] - shift)
                    if hi > lo:
                        los[m] = lo
                        his[m] = hi
                        m += 1
                led += _union(los, his, m)
    return led / total if total > 0 else 0.0


@njit(cache=True)
def lockstep_lead_share(counts, loads, sms, cps):
    """`lead_share` where every run's CTAs take the same rounds (``fit`` >= 0), in closed form: the grid runs in
    waves of ``sms`` x ``cps`` blocks, block b on SM b mod sms at slot (b mod wave) // sms, every slot
    starting together, so a CTA is led (by 0 rounds) exactly where the block ``sms`` before it, the one a slot
    lower on its SM in its wave, is of its run. One pass over the runs, not a fill of the slots a run (the
    lockstep reference of strided dgrad's `_lockstep_share`: half its cost)."""
    wave = sms * cps
    led = 0.0
    total = 0.0
    start = 0
    for r in range(counts.shape[0]):
        n = counts[r]
        if n <= 0:
            continue
        end = start + n
        if loads[r]:
            total += n
            lo = start + sms
            if lo < end:
                # blocks b in [lo, end) past their wave's first sms (slot >= 1): f(end) - f(lo)
                hi_count = (end // wave) * (wave - sms) + max(0, end % wave - sms)
                lo_count = (lo // wave) * (wave - sms) + max(0, lo % wave - sms)
                led += hi_count - lo_count
        start = end
    return led / total if total > 0 else 0.0
