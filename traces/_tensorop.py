"""The SM80 tensor-op Fprop kernel's rules (DESIGN section 3a, "Tensor-op Fprop, SM80 style"; written out in
``traces/KERNELS.md``): the warp-raked thread map, the alignment of a layer's accesses, the cache operation
of each operand's requests and the shape of a warp store request. Plain Python, used by `KernelConfig`
(validation, thread maps) and `traces.stream` (the plan); the SIMT kernel answers every question here
with today's values (one access per vector, ``ld`` requests, 32-column stores).

CUTLASS v3.5.1 (paths relative to ``include/cutlass/``): `gemm/threadblock/default_mma_core_sm80.h`
(16-bit A row-major, B column-major: 128-bit accesses, ``PitchLinearWarpRakedThreadMap<(TK, E_s), T,
(TK / 8, 32 / (TK / 8)), 8>``, crosswise shared-memory layouts of TK = 32 or 64 elements),
`transform/pitch_linear_thread_map.h` (the map), `conv/kernel/default_conv2d_fprop.h` (``CacheOpB``:
``cp.async.cg`` iff B's access is 128 bits), `conv/threadblock/conv2d_fprop_activation_tile_access_
iterator_analytic.h` (``kAccessesPerVector = ThreadMap::kElementsPerAccess / AccessType::kElements``).
"""
from __future__ import annotations

import math

from simcore.metrics import KIND_CP_ASYNC_CA, KIND_CP_ASYNC_CG, KIND_LD

#: elements per thread access of the tensor-op map (128 bits of fp16 / bf16)
VECTOR = 8
#: GEMM-K tile extents of the SM80 16-bit tensor-op cores (crosswise shared-memory layouts)
TILE_K = (32, 64)
#: dtypes the tensor-op kernel takes
DTYPES = ("fp16", "bf16")
#: elements one warp store request covers (32 lanes x 8 fp16 / bf16 outputs)
STORE_ELEMENTS = 256


def raked_map(operand: str, contiguous: int, strided: int, threads: int, vector: int, thread_map):
    """The PitchLinearWarpRakedThreadMap of one operand tile (``thread_map``: the `ThreadMap` class);
    ValueError unless it tiles the operand exactly: t_c = contiguous / vector threads of a warp along the
    contiguous extent (dividing 32), t_s = 32 / t_c rows per warp access, and the warps (threads / 32)
    dividing the strided extent's strided / t_s warp accesses (CUTLASS's static_asserts, plus an exact
    cover: with a remainder CUTLASS would leave rows unloaded)."""
    t_c = contiguous // vector
    if contiguous % vector or 32 % t_c:
        raise ValueError(f"KernelConfig: operand {operand}: the warp-raked map needs tile_k / {vector} threads "
                         f"dividing a warp, got tile_k={contiguous}")
    t_s = 32 // t_c
    warps = threads // 32
    if strided % t_s or (strided // t_s) % warps:
        raise ValueError(f"KernelConfig: operand {operand}: the warp-raked map cannot tile {strided} rows with "
                         f"threads={threads} ({warps} warps, {t_s} rows per warp access: the warps must divide "
                         f"{strided} / {t_s})")
    return thread_map(contiguous, strided, vector, t_c, t_s, strided // t_s // warps, True)


def check_kernel(kernel) -> None:
    """ValueError (one line) unless ``kernel`` (math "tensorop") is an SM80 tensor-op Fprop kernel the
    project models: dtype fp16/bf16, layout nhwc, op fprop, vector 8, tile_k 32 or 64, stages >= 3, tile_n
    dividing 256 (a warp store request covers 256 / tile_n whole tile rows); the thread maps are checked
    by `raked_map`."""
    def bad(what):
        raise ValueError(f"KernelConfig(math='tensorop'): {what}")
    if kernel.dtype not in DTYPES:
        bad(f"dtype must be one of {DTYPES}, got {kernel.dtype!r}")
    if kernel.layout != "nhwc":
        bad(f"layout must be 'nhwc', got {kernel.layout!r}")
    if kernel.op != "fprop":
        bad(f"op must be 'fprop' (DESIGN section 3a states no tensor-op dgrad or wgrad thread maps), "
            f"got {kernel.op!r}")
    if kernel.vector != VECTOR:
        bad(f"vector must be {VECTOR} (16-byte accesses; a layer whose C is not a multiple of 8 uses "
            f"gcd(C, 8)-element accesses by itself), got {kernel.vector}")
    if kernel.tile_k not in TILE_K:
        bad(f"tile_k must be one of {TILE_K} (CUTLASS's SM80 16-bit crosswise layouts), got {kernel.tile_k}")
    if kernel.stages < 3:
        bad(f"stages must be >= 3 (the cp.async multistage pipeline), got {kernel.stages}")
    if STORE_ELEMENTS % kernel.tile_n:
        bad(f"tile_n must divide {STORE_ELEMENTS} (a warp store request covers {STORE_ELEMENTS} / tile_n "
            f"whole tile rows), got {kernel.tile_n}")


def alignment(kernel, layer) -> int:
    """Elements per access for ``layer``: the vector (SIMT, or tensor-op when C is a multiple of 8), else
    gcd(C, 8): each 8-element vector is loaded by 8 / a accesses of a elements (DESIGN section 3a)."""
    if kernel.math != "tensorop":
        return kernel.vector
    return math.gcd(layer.c, VECTOR)


def operand_kinds(kernel, layer) -> tuple:
    """Request kinds (``simcore.metrics.KIND_*``) of A's and B's loads: SIMT ``ld``; tensor-op A
    ``cp.async.ca``, B ``cp.async.cg`` iff its access is 16 bytes, else ``cp.async.ca``."""
    if kernel.math != "tensorop":
        return KIND_LD, KIND_LD
    full = alignment(kernel, layer) * kernel.elem_bytes == 16
    return KIND_CP_ASYNC_CA, KIND_CP_ASYNC_CG if full else KIND_CP_ASYNC_CA


def store_shape(kernel) -> tuple:
    """(tile rows, columns) of one warp store request: SIMT one row x 32 columns (in the epilogue's row
    order); tensor-op 256 / tile_n consecutive rows x tile_n columns (16-byte accesses of 8 outputs, tile
    rows ascending: the simplified order, see ``traces/KERNELS.md``)."""
    if kernel.math != "tensorop":
        return 1, 32
    return STORE_ELEMENTS // kernel.tile_n, kernel.tile_n
