"""The model's Numba kernels run interpreted for a process's first predictions, compiled after them.

Compiled, a prediction takes 0.2-1.6 ms; interpreted (the kernels' own Python functions,
``dispatcher.py_func``), 1.5-6 ms (vgg16 and resnet50 at batch 32, every op, the SIMT default and the
SM80 tensor-op presets, grouped mobilenet_v2 and resnext50: 554 layer predictions, every key equal to
the compiled model's; 2-core development machine). But compiling the kernels costs about 19 CPU
seconds (77 compilations for fprop, empty Numba cache) and loading them from the cache about 0.8 s,
so a command that predicts a few dozen layers (``validation.compare vgg16``: 13) is done sooner
interpreted, and its first run on a fresh clone need not compile the model at all (issue 18: that
was the longest of the first run's three compilations). A process therefore predicts interpreted
until `INTERPRETED_PREDICTIONS` predictions, then compiled (loaded from the cache, compiled on a
miss): what the interpreted ones cost, about 1-3 s, is then of the order of a cache load, and a sweep
of thousands of predictions runs at the compiled rate.

How: while an entry point decorated with `tiered` runs in the interpreted tier, every module of
`KERNEL_MODULES` has its Numba dispatchers replaced by their Python functions, so Python code and the
kernels' own bodies call Python; the dispatchers are put back when the outermost such call returns.
Results do not depend on the tier (tests/test_model_tiers.py). ``DELTASIM_MODEL_KERNELS`` (or
`set_model_kernels`) forces "compiled" or "interpreted"; "auto" (default) is the rule above. The
variable is read at each prediction until the process settles on the compiled tier (auto mode past
the limit), then no more (the check cost a few us of a 100 us prediction): set it before starting.
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
import threading

from numba.core.registry import CPUDispatcher

__all__ = ["INTERPRETED_PREDICTIONS", "KERNEL_MODULES", "MODES", "set_model_kernels", "model_kernels", "tiered"]

# A process's first this-many predictions (outermost `tiered` calls) run interpreted in "auto" mode:
# about 1-3 s at 1.5-6 ms each, against 0.8 s to load the compiled kernels (19 s to compile them).
INTERPRETED_PREDICTIONS = 512

# The analytic modules that define Numba kernels or import them by name, imported before a swap (some are
# imported lazily; a test checks the list). Every loaded analytic module is swapped.
KERNEL_MODULES = ("analytic._counts", "analytic._groups", "analytic._counts_fprop", "analytic._counts_backward",
                  "analytic._counts_grouped", "analytic._geometry", "analytic._l2", "analytic._reuse",
                  "analytic._schedule", "analytic._wgrad", "analytic._grouped_rereads", "analytic._readers",
                  "analytic._grouped_model", "analytic._grouped_returns",
                  "analytic._common", "analytic._window", "analytic._timeline", "analytic._compulsory",
                  "analytic._issue_order", "analytic._line_windows", "analytic._store_only",
                  "analytic._dgrad_places", "analytic._stores",
                  "analytic._followers", "analytic._dispatch", "analytic._filter_gaps", "analytic._wave_windows",
                  "analytic._refetch_window", "analytic._l1_rounds", "analytic._l1_sampled", "analytic.model")

MODES = ("auto", "compiled", "interpreted")
_ENV = "DELTASIM_MODEL_KERNELS"

_turn = threading.Condition(threading.Lock())     # guards the state below and the swap
_local = threading.local()                         # .depth: inside a tiered call in this thread
# "settled": compiled for good (auto mode past the limit, or "compiled" set): calls skip the checks
_state = {"mode": None, "count": 0, "active": 0, "saved": [], "settled": False}


def _check_mode(mode, where):
    if mode not in MODES:
        raise ValueError(f"{where} must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def model_kernels() -> str:
    """The mode: `set_model_kernels`'s, else ``$DELTASIM_MODEL_KERNELS``, else "auto"."""
    mode = _state["mode"]
    if mode is None:
        mode = _check_mode(os.environ.get(_ENV, "auto") or "auto", _ENV)
    return mode


def set_model_kernels(mode) -> str:
    """Run the model's kernels "compiled", "interpreted" or "auto" (interpreted for the process's first
    `INTERPRETED_PREDICTIONS` predictions); None: back to ``$DELTASIM_MODEL_KERNELS``. Returns the
    previous setting (None if none was set). Results are the same in every mode."""
    if mode is not None:
        _check_mode(mode, "model kernels mode")
    with _turn:
        previous, _state["mode"] = _state["mode"], mode
        _state["settled"] = mode == "compiled"
    return previous


def _interpreting() -> bool:
    mode = model_kernels()
    return mode == "interpreted" or (mode == "auto" and _state["count"] < INTERPRETED_PREDICTIONS)


def _swap_in():
    """Replace every analytic dispatcher bound in a module of the analytic package by its Python
    function (KERNEL_MODULES imported first, so that none is imported half-swapped)."""
    saved = _state["saved"]
    for name in KERNEL_MODULES:
        importlib.import_module(name)
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "analytic" or name.startswith("analytic.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, CPUDispatcher) and value.py_func.__module__.startswith("analytic."):
                saved.append((module, attr, value))
                setattr(module, attr, value.py_func)


def _swap_out():
    saved = _state["saved"]
    while saved:
        module, attr, value = saved.pop()
        setattr(module, attr, value)


def tiered(function):
    """Decorator for the model's entry points: run ``function`` with the kernels of the current tier
    (module docstring). Each outermost call of a thread counts one prediction; a call nested in
    another runs in that one's tier. Once the interpreted predictions are used up, new calls wait for
    the interpreted ones still running (a few ms) so that no call runs compiled while the dispatchers
    are swapped out: a kernel compiled then would see Python functions for its callees."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if _state["settled"] and _state["active"] == 0:
            return function(*args, **kwargs)          # compiled for good: two lookups (a few us saved)
        if getattr(_local, "depth", 0):
            return function(*args, **kwargs)
        # compiled tier, no bookkeeping. The order of the reads matters: a swap raises "active" before
        # the count, under the GIL, so a count past the limit seen here implies its "active" is seen
        if not _interpreting() and _state["active"] == 0:
            if model_kernels() == "auto":
                _state["settled"] = True              # the count only grows: compiled from now on
            return function(*args, **kwargs)
        with _turn:
            while True:
                interpreted = _interpreting()
                if interpreted or _state["active"] == 0:
                    break
                _turn.wait()
            if interpreted:
                _state["active"] += 1
                _state["count"] += 1
                if _state["active"] == 1:
                    _swap_in()
        if not interpreted:
            return function(*args, **kwargs)
        _local.depth = 1
        try:
            return function(*args, **kwargs)
        finally:
            _local.depth = 0
            with _turn:
                if _state["active"] == 1:
                    _swap_out()
                _state["active"] -= 1
                if _state["active"] == 0:
                    _turn.notify_all()
    return wrapper
