"""A per-process memo of the model's figures, keyed by layer shape: those that depend on the layer and the
kernel but not on the GPU or the factors (the exact L1 counts, `_counts.l1_counts`; an op's `Geometry`; strided
dgrad's sub-problems), some that do (keyed by the GPU's figures too), and whole predictions, keyed by the
layer's shape, the GPU, the kernel and the factors (`model._predict_shape`: a network's layers of one shape are
predicted once; each call gets its own copy of the dict, and the memoized one is never handed out). A scaling
study, a training step's three GPUs or a calibration predicts each layer many times; these figures are then
computed once. They cost 25-30 us of a 100 us prediction (fprop, dgrad; measured with
`benchmarks/bench_analytic.py`, which clears the memo before each pass over its layers so that it times what a
pass over four networks on three GPUs costs, not a steady state of hits).

A layer is looked up by its shape, not its name (`ConvLayer.shape`): a network's repeated blocks (resnet50's
53 conv layers have 23 shapes, mobilenet_v2's 52 have 30) share their figures. No memoized figure may
therefore carry a layer's name into a prediction.

Memoized values are read-only: counts are `types.MappingProxyType`, arrays have their write flag off.
"""
from __future__ import annotations

import functools
import inspect
import threading

from traces.layer import ConvLayer

__all__ = ["memo", "clear_memo"]

_CACHES = []


class _Memo:
    """A function's memo: a dict keyed by its arguments, every `ConvLayer` among them by its shape; the
    oldest entry goes when ``maxsize`` are held. (A dict and a key tuple: `functools.lru_cache` over an
    object that hashes the shape cost fprop predictions 3 %.)"""

    def __init__(self, function, maxsize):
        self.function, self.maxsize, self.table = function, maxsize, {}
        self.lock = threading.Lock()      # inserts and evictions (threads predicting at once); reads need none
        functools.update_wrapper(self, function)
        # the position of the parameter named ``layer``, the one a `ConvLayer` is passed in; a `ConvLayer`
        # passed elsewhere keys the memo by itself, name included (correct, shared by fewer layers). Looking
        # at one position: 0.6 us a call, against 1.7 us for a test of every argument (10-20 calls a
        # prediction; measured)
        names = list(inspect.signature(function).parameters)
        self.layer_at = names.index("layer") if "layer" in names else -1

    def __call__(self, *args):
        i = self.layer_at
        if 0 <= i < len(args) and type(args[i]) is ConvLayer:
            key = (args[0].shape,) + args[1:] if i == 0 else args[:i] + (args[i].shape,) + args[i + 1:]
        else:
            key = args
        table = self.table
        try:
            return table[key]
        except KeyError:
            pass
        value = self.function(*args)
        with self.lock:
            while len(table) >= self.maxsize:
                del table[next(iter(table))]
            table[key] = value
        return value

    def cache_clear(self):
        with self.lock:
            self.table.clear()


def memo(maxsize: int = 1024):
    """A memo of ``maxsize`` entries keyed by layer shape (`_Memo`), registered with `clear_memo`."""
    def decorate(function):
        cached = _Memo(function, maxsize)
        _CACHES.append(cached)
        return cached
    return decorate


def clear_memo() -> None:
    """Forget every memoized figure (benchmarks; tests that compare the model's tiers)."""
    for cached in _CACHES:
        cached.cache_clear()
