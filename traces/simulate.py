"""`simulate_layer`: the exact request stream of one layer through per-SM L1s and a sliced L2."""
from __future__ import annotations

import numbers
from contextlib import contextmanager

import numba
import numpy as np

from .stream import _Generator, plan_stream, tensor_bases

__all__ = ["simulate_layer"]

_CHUNK_SECTORS = 1 << 20


@contextmanager
def _numba_threads(jobs):
    if jobs is None:
        yield
        return
    old = numba.get_num_threads()
    numba.set_num_threads(jobs)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _check_jobs(jobs):
    if jobs is None:
        return None
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral) or jobs <= 0:
        raise ValueError(f"jobs must be a positive integer or None, got {jobs!r}")
    return min(int(jobs), numba.config.NUMBA_NUM_THREADS)


def simulate_layer(layer, gpu, kernel, *, jobs=None, max_sectors: int = _CHUNK_SECTORS) -> dict:
    """Simulate ``layer`` with ``kernel`` on ``gpu``: every request of the exact stream (DESIGN
    sections 3 and 3a) through the per-SM L1s and the sliced L2 (section 4). Returns the metric counts of
    DESIGN section 5 (totals and per operand ``:A``, ``:B``, ``:C``: the GEMM operands of ``kernel.op``,
    fprop x, w, y; dgrad dy, w, dx; wgrad dy, x, dw).

    ``jobs``: Numba threads for the duration (None: the current setting); the cache hierarchy runs
    its SMs' L1s and its L2 slices in parallel over them. The stream is generated in the calling
    thread, chunk by chunk (a producer thread beside Numba's workers only oversubscribes the cores).
    ``max_sectors``: stream chunk size (memory is O(chunk), whatever the layer's size).
    """
    from simcore.hierarchy import _MAX_ADDRESS, Hierarchy

    jobs = _check_jobs(jobs)
    if isinstance(max_sectors, bool) or not isinstance(max_sectors, numbers.Integral) or max_sectors <= 0:
        raise ValueError(f"max_sectors must be a positive integer, got {max_sectors!r}")
    plan = plan_stream(layer, gpu, kernel)          # validates layer, gpu, kernel first
    hierarchy = Hierarchy.for_gpu(gpu, kernel.l1_config(gpu))
    end = tensor_bases(layer, kernel)[2] + layer.n * layer.k * layer.p * layer.q * kernel.elem_bytes
    if end >= _MAX_ADDRESS:                         # the one check of feed's that depends on the layer
        raise ValueError(f"layer {layer.name or layer!r} needs {end} bytes of tensors, above the "
                         f"simulator's address limit 2**47")
    gen = _Generator(plan, max_sectors, lean=True)   # only sm, operand, kind, first, count, sectors
    bufs = gen.new_buffers()
    with _numba_threads(jobs):
        while True:
            chunk = gen.fill(bufs)
            if chunk is None:
                break
            # trusted path: the generator's arrays have the hierarchy's dtypes and valid values
            # (addresses bounded above), so the per-chunk numpy checks of ``feed`` are skipped
            hierarchy._feed_unchecked(chunk.sm, chunk.operand, chunk.kind, chunk.first, chunk.count,
                                      chunk.sectors, top=end)
    return hierarchy.metrics()


def _compile_kernels(part: str, ops=("fprop",), l1_variant=None) -> None:
    """Compile into Numba's on-disk cache the kernels ``simulate_layer`` runs, for a first run that
    compiles them in background processes (``validation.common.start_first_run``): ``part`` "stream",
    the request-stream generator of each op of ``ops`` (filled for a small layer); "hierarchy", the
    cache hierarchy's serial and parallel paths (one small chunk through each, of the dtypes the
    generator's chunks have) with the L1 loop of ``l1_variant`` (``Hierarchy._l1_variant`` of the
    run's GPU; any variant counts correctly, so a v100 hierarchy serves them all). Otherwise the
    kernels' argument types do not depend on the layer, GPU or kernel configuration."""
    from simcore import gpu as get_gpu
    from simcore.hierarchy import Hierarchy

    from .kernel import KernelConfig
    from .layer import ConvLayer

    gpu = get_gpu("v100")
    if part == "stream":
        for op in ops:
            plan = plan_stream(ConvLayer(1, 8, 6, 6, 8, 3, 3, pad=1), gpu, KernelConfig(op=op))
            gen = _Generator(plan, _CHUNK_SECTORS, lean=True)
            bufs = gen.new_buffers()
            while gen.fill(bufs) is not None:
                pass
    elif part == "hierarchy":
        hierarchy = Hierarchy.for_gpu(gpu, KernelConfig().l1_config(gpu))
        if l1_variant is not None:
            hierarchy._l1_variant = tuple(l1_variant)
        chunk = (np.arange(4, dtype=np.int32), np.zeros(4, np.uint8), np.array([0, 1, 2, 3], np.uint8),
                 np.arange(4, dtype=np.int64), np.ones(4, np.int32), np.arange(4, dtype=np.int64) * 32)
        for parallel in (False, True):
            hierarchy.parallel = parallel
            hierarchy._feed_unchecked(*chunk, top=1 << 12)
        hierarchy.metrics()
    else:
        raise ValueError(f"part must be 'stream' or 'hierarchy', got {part!r}")
