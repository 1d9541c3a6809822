"""A per-process memo of the model's figures that depend on the layer and the kernel but not on the GPU
or the factors: the exact L1 counts (`_counts.l1_counts`), an op's `Geometry` and strided dgrad's
sub-problems. A scaling study, a training step's three GPUs or a calibration predicts each layer many
times; these figures are then computed once. They cost 25-30 us of a 100 us prediction (fprop, dgrad;
measured with `benchmarks/bench_analytic.py`, which clears the memo before each pass over its layers so
that it times what a pass over four networks on three GPUs costs, not a steady state of hits).

Memoized values are read-only: counts are `types.MappingProxyType`, arrays have their write flag off.
"""
from __future__ import annotations

import functools

__all__ = ["memo", "clear_memo"]

_CACHES = []


def memo(maxsize: int = 1024):
    """`functools.lru_cache` of ``maxsize`` entries, registered with `clear_memo`."""
    def decorate(function):
        cached = functools.lru_cache(maxsize=maxsize)(function)
        _CACHES.append(cached)
        return cached
    return decorate


def clear_memo() -> None:
    """Forget every memoized figure (benchmarks; tests that compare the model's tiers)."""
    for cached in _CACHES:
        cached.cache_clear()
