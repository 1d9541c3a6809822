"""The model's sampled replays (`_l1_rounds`, `_l1_sampled`) on threads: their samples are independent (each from a
cold L1), so a pool of threads replays them, a window ahead of the one taken next, and the caller takes the results
in the samples' own order while its rule (at least so many samples, no more once a budget of touches is spent)
holds; samples run past the rule's end are dropped, so the counts are those of one thread. The kernels release
the GIL (``nogil=True``)."""
from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba

__all__ = ["in_order", "sample_threads"]

_POOL = {"pid": None, "pool": None, "width": 0}
_POOL_LOCK = threading.Lock()


def sample_threads() -> int:
    """Threads that replay samples at once: Numba's thread count (``NUMBA_NUM_THREADS``, by default the CPUs)."""
    return max(1, numba.get_num_threads())


def _pool(width):
    """The process's thread pool for samples (a new one in a forked child: the parent's threads are not there)."""
    with _POOL_LOCK:
        if _POOL["pid"] != os.getpid() or _POOL["width"] != width:
            if _POOL["pid"] == os.getpid():
                _POOL["pool"].shutdown(wait=False)
            _POOL["pool"] = ThreadPoolExecutor(max_workers=width, thread_name_prefix="deltasim-l1-rounds")
            _POOL["pid"], _POOL["width"] = os.getpid(), width
        return _POOL["pool"]


def in_order(fn, rows, stop):
    """``fn(row)`` of each row in order, on `sample_threads` threads (up to that many rows ahead of the one
    yielded next), until ``stop()`` says so before a row's result is taken; rows run ahead of the stop are
    dropped. One thread (``NUMBA_NUM_THREADS=1``): each row in turn, none ahead."""
    width = sample_threads()
    if width < 2 or len(rows) < 2:
        for row in rows:
            if stop():
                return
            yield fn(row)
        return
    pool = _pool(width)
    pending = collections.deque()
    at = 0
    try:
        while not stop():
            while at < len(rows) and len(pending) < width:
                pending.append(pool.submit(fn, rows[at]))
                at += 1
            if not pending:
                return
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
