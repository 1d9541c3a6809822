"""Slow, obviously correct reference for `analytic._timeline`: the dispatcher of DESIGN section 3 round by
round, for CTAs of unequal lengths.

At the start of every round the finished CTAs retire and the refill runs: passes over the SMs in order,
each SM with a free slot taking the next block into its lowest free slot, until no slot is free or no
block is left. A block of a run of length L occupies its slot for L rounds (k k-steps and the stores).
"""
from __future__ import annotations

__all__ = ["naive_starts", "naive_lead_share"]


def naive_starts(lengths, counts, sms, cps):
    """[(sm, slot, run, start round)] of every block, blocks in order run after run."""
    blocks = [r for r in range(len(lengths)) for _ in range(counts[r])]
    end = [[None] * cps for _ in range(sms)]          # round at which each slot's CTA retires
    out = []
    nxt, t = 0, 0
    while nxt < len(blocks):
        for sm in range(sms):
            for s in range(cps):
                if end[sm][s] is not None and end[sm][s] <= t:
                    end[sm][s] = None
        took = True
        while took and nxt < len(blocks):
            took = False
            for sm in range(sms):
                free = [s for s in range(cps) if end[sm][s] is None]
                if free and nxt < len(blocks):
                    run = blocks[nxt]
                    nxt += 1
                    end[sm][free[0]] = t + lengths[run]
                    out.append((sm, free[0], run, t))
                    took = True
        t += 1
    return out


def naive_lead_share(lengths, counts, loads, sms, cps, fit):
    """Share of the loading runs' CTAs whose SM holds a CTA of the same run that started d rounds before
    it, 0 <= d <= fit, and is still running (d < the run's length); d = 0 only from a lower slot."""
    starts = naive_starts(lengths, counts, sms, cps)
    led = total = 0
    for sm, slot, run, t in starts:
        if not loads[run]:
            continue
        total += 1
        led += any(sm2 == sm and run2 == run and (slot2, t2) != (slot, t)
                   and 0 <= t - t2 <= fit and t - t2 < lengths[run] and not (t2 == t and slot2 > slot)
                   for sm2, slot2, run2, t2 in starts)
    return led / total if total else 0.0
