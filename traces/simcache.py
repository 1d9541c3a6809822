"""Simulations of many (layer, GPU, kernel) cases: deduplicated, cached on disk, run on the executor.

`simulate_cases(cases, kernel, ...)` is what `validation.compare`, `calibrate`, `accuracy` and
`analytic.scaling --check` call: identical cases are simulated once, ``cache_dir`` keeps every
simulated metric dict as a JSON file named by `cache_key` (layer shape, every GPU field, the kernel,
the package version and `simcore.hierarchy.SIM_VERSION`), read and written by the calling process
only (results come back from the workers), and the tasks run on `traces.executor` (this process, a
local Dask cluster, or a running one).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys

import numpy as np

from .executor import Executor
from .files import atomic_write

__all__ = ["package_version", "cache_key", "simulate_cases"]


@functools.lru_cache(maxsize=1)
def package_version() -> str:
    """Installed version of the ``deltasim`` distribution (``0+unknown`` if not installed); read once
    (every simulation cache key and sweep case key carries it)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("deltasim")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


#: GPU fields added after the cache format that only the timing model reads: left out of the key, so
#: results simulated before they existed stay valid (no peak changes a simulated count)
_TIMING_ONLY_GPU_FIELDS = ("fp16_tflops", "bf16_tflops")


def cache_key(layer, gpu, kernel) -> str:
    """Key of one simulation in a cache directory."""
    layer_dict = layer.as_dict()
    layer_dict.pop("name", None)
    gpu_dict = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(gpu).items()
                if k not in _TIMING_ONLY_GPU_FIELDS}
    from simcore.hierarchy import SIM_VERSION
    text = json.dumps({"layer": layer_dict, "gpu": gpu_dict, "kernel": kernel.as_dict(),
                       "version": package_version(), "sim_version": SIM_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def read_cache(cache_dir, key):
    """The cached metrics of ``key``, or None (missing or unreadable file, another key)."""
    path = os.path.join(cache_dir, f"{key}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if data.get("key") == key and isinstance(data.get("metrics"), dict):
            return data["metrics"]
    except (OSError, ValueError):
        pass
    return None


def write_cache(cache_dir, key, metrics) -> None:
    def writer(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"key": key, "package_version": package_version(), "metrics": metrics}, fh)
    atomic_write(os.path.join(cache_dir, f"{key}.json"), writer)


def _case_kernel(case, kernel):
    """The kernel of a case: its 4th item if it has one (random cases), else ``kernel``."""
    return case[3] if len(case) > 3 else kernel


def simulate_cases(cases, kernel, *, simulate=None, jobs=1, scheduler=None, cache_dir=None, memory=None,
                   quiet=False) -> list:
    """Simulated metrics for each case (deduplicated by layer shape + GPU + kernel).

    Parameters
    ----------
    cases : list of tuples
        ``(label, layer, gpu)`` simulated with ``kernel``, or ``(label, layer, gpu, kernel)``.
    kernel : traces.KernelConfig or None
        The kernel of 3-item cases.
    simulate : callable, optional
        ``simulate(layer, gpu, kernel, jobs=...) -> dict`` run per distinct case (default
        `traces.simulate_layer`); a module-level function, so it travels to workers by reference.
    jobs, scheduler
        The executor (`traces.executor.Executor`).
    cache_dir : str, optional
        Directory of cached results (read and written by this process only).
    memory : dict, optional
        In-process cache shared by several calls (key -> metrics).
    quiet : bool
        No progress bar.

    Returns
    -------
    list of dict
        One metrics dict per case, in order.
    """
    from tqdm import tqdm
    if simulate is None:
        from .simulate import simulate_layer as simulate
    memory = {} if memory is None else memory
    keys = [cache_key(case[1], case[2], _case_kernel(case, kernel)) for case in cases]
    todo = {}
    for key, case in zip(keys, cases):
        if key in memory or key in todo:
            continue
        cached = read_cache(cache_dir, key) if cache_dir else None
        if cached is not None:
            memory[key] = cached
        else:
            todo[key] = (case[1], case[2], _case_kernel(case, kernel))
    order = list(todo)
    executor = Executor(jobs, scheduler, tasks=len(todo))
    tasks = [((layer, gpu, k), {"jobs": executor.task_threads}) for layer, gpu, k in todo.values()]

    def on_done(index, result):
        key = order[index]
        memory[key] = {k: (int(v) if isinstance(v, (int, np.integer)) else float(v)) for k, v in result.items()}
        if cache_dir:
            write_cache(cache_dir, key, memory[key])

    if tasks:
        bar = tqdm(total=len(tasks), desc="simulating", unit="layer", file=sys.stderr,
                   disable=True if quiet else None, dynamic_ncols=True)
        try:
            with executor:
                executor.run(simulate, tasks, on_done=on_done, progress=bar,
                             label=lambda i: todo[order[i]][0].name)
        finally:
            bar.close()
    return [memory[key] for key in keys]
