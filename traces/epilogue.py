"""The order of a CTA's output stores: CUTLASS's SIMT epilogue (DESIGN section 3a; the rule is written out
in full in ``traces/KERNELS.md``).

CUTLASS v3.5.1 (paths relative to ``include/cutlass/``) stores a SIMT kernel's tile through
`epilogue/threadblock/default_thread_map_simt.h` (``DefaultThreadMapSimt``), whose
``OutputTileOptimalThreadMap`` (`epilogue/threadblock/output_tile_thread_map.h`) and
``PredicatedTileIterator`` (`epilogue/threadblock/predicated_tile_iterator.h`) follow from the warp
tile and the per-thread MMA shape of `gemm/threadblock/default_mma_core_simt.h`. The project has no
warp-shape field, so `simt_warp_arrangement` picks one (the rule reproduces every SIMT tile of CUTLASS's
SM50 and SM80 generator lists, `python/cutlass_library/generator.py`, e.g. 32x64 warps for 128x128x8
with 8 warps). A warp store request is 32 consecutive columns of one tile row, so the whole order is
a permutation of the tile rows (`store_row_order`), each row's column blocks in ascending order.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

__all__ = ["EpilogueMap", "simt_warp_arrangement", "epilogue_map", "store_row_order"]


class EpilogueMap(NamedTuple):
    """The SIMT epilogue of one kernel (names as in CUTLASS).

    Warp w, store call i (0 .. calls - 1), group iteration g (0 .. group_iterations - 1) stores tile row
    ``(w // warps_n) * warp_m + (w % warps_n) * lane_m + g * lane_m * warps_n + i % lane_m
    + (i // lane_m) * threads_m * lane_m``, columns lane + 32 j for j = 0 .. tile_n / 32 - 1.
    """

    warps_m: int           # WarpCount::kM
    warps_n: int           # WarpCount::kN
    warp_m: int            # WarpShape::kM (rows of one warp's tile)
    warp_n: int            # WarpShape::kN
    threads_m: int         # MmaSimtPolicy::WarpShape::kRow: lanes along M in the MMA (4 or 8)
    lane_m: int            # LaneMmaShape::kM
    calls: int             # store calls per tile: OutputTileIterator::kIterations = lane_m * groups
    group_iterations: int  # ThreadMap::Iterations::kGroup = threads_m / warps_n


def _arrangement_ok(tile_m, tile_n, warps_m, warps_n, elem_bits):
    """CUTLASS's static checks on a SIMT warp arrangement and its epilogue; the MMA figures or None."""
    if tile_m % warps_m or tile_n % warps_n or tile_n % 32:
        return None
    warp_m, warp_n = tile_m // warps_m, tile_n // warps_n
    threads_m = 8 if warp_m > warp_n else 4           # detail::simt_get_warp_threads_m
    threads_n = 32 // threads_m
    if warp_m % threads_m or warp_n % threads_n:
        return None
    thread_m, thread_n = warp_m // threads_m, warp_n // threads_n
    lane_m = min(128 // elem_bits, thread_m)          # LaneM = min(numElementsA, ThreadTileM)
    lane_n = min(128 // elem_bits, thread_n)
    if thread_m % lane_m or thread_n % lane_n:          # warp/mma_simt.h static_asserts
        return None
    if threads_m % warps_n:                             # the epilogue's warp partition covers the rows
        return None
    return warp_m, warp_n, threads_m, lane_m


def _ratio(a, b):
    return max(a, b) / min(a, b)


@functools.lru_cache(maxsize=256)
def _arrangement(tile_m, tile_n, warps, elem_bits):
    best = None
    for warps_m in range(warps, 0, -1):
        if warps % warps_m:
            continue
        warps_n = warps // warps_m
        figures = _arrangement_ok(tile_m, tile_n, warps_m, warps_n, elem_bits)
        if figures is None:
            continue
        warp_m, warp_n = figures[:2]
        # squarest warp tile, then the most even warp grid, then more warps along M (first found)
        key = (_ratio(warp_m, warp_n), _ratio(warps_m, warps_n))
        if best is None or key < best[0]:
            best = (key, warps_m, warps_n, figures)
    if best is None:
        return None
    _, warps_m, warps_n, (warp_m, warp_n, threads_m, lane_m) = best
    groups = warp_m // (threads_m * lane_m)
    return EpilogueMap(warps_m, warps_n, warp_m, warp_n, threads_m, lane_m, lane_m * groups,
                       threads_m // warps_n)


def simt_warp_arrangement(kernel):
    """(warps_m, warps_n, warp_m, warp_n) of ``kernel``'s SIMT warp tiles, or None when no arrangement
    passes CUTLASS's checks (see ``traces/KERNELS.md``)."""
    found = epilogue_map(kernel)
    return None if found is None else found[:4]


def epilogue_map(kernel):
    """The `EpilogueMap` of ``kernel`` (an nhwc `KernelConfig`), or None when CUTLASS's SIMT epilogue
    cannot be built for it."""
    return _arrangement(kernel.tile_m, kernel.tile_n, kernel.warps, 8 * kernel.elem_bytes)


@functools.lru_cache(maxsize=256)
def _row_order(tile_m, tile_n, warps, elem_bits):
    found = _arrangement(tile_m, tile_n, warps, elem_bits) if warps else None
    if found is None:
        order = np.arange(tile_m, dtype=np.int64)
    else:
        e = found
        order = np.array([(w // e.warps_n) * e.warp_m + (w % e.warps_n) * e.lane_m + g * e.lane_m * e.warps_n
                          + i % e.lane_m + (i // e.lane_m) * e.threads_m * e.lane_m
                          for i in range(e.calls) for w in range(warps) for g in range(e.group_iterations)],
                         dtype=np.int64)
    order.setflags(write=False)
    return order


def store_row_order(kernel) -> np.ndarray:
    """Tile rows in the order the epilogue stores them (read-only int64 array of length tile_m, a
    permutation); the identity (DESIGN section 3's simplified order) when `epilogue_map` is None, and for
    tensor-op kernels (whose requests cover 256 / tile_n consecutive rows: `traces._tensorop.store_shape`)."""
    if kernel.math == "tensorop":
        return _row_order(kernel.tile_m, 0, 0, 0)
    return _row_order(kernel.tile_m, kernel.tile_n, kernel.warps, 8 * kernel.elem_bytes)
