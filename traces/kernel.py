"""`KernelConfig`: the CTA-tiled implicit-GEMM kernel and its thread maps (DESIGN sections 3 and 3a).

``op`` picks the convolution pass (CUTLASS ``conv::Operator``): ``fprop`` (y from x and w), ``dgrad``
(dx from dy and w) or ``wgrad`` (dw from dy and x); the layer is always the forward layer. Operand labels
stay GEMM operands: A and B are loaded, C is stored (fprop: A = x, B = w, C = y; dgrad: A = dy, B = w,
C = dx; wgrad: A = dy, B = x, C = dw). dgrad and wgrad are defined for ``nhwc`` only.

``math`` picks the core: ``simt`` (CUDA cores, CUTLASS ``PitchLinearStripminedThreadMap``) or ``tensorop``
(SM80 tensor cores: the ``PitchLinearWarpRakedThreadMap`` and ``cp.async`` cache operations of DESIGN
section 3a; the rules are in ``traces._tensorop`` and ``traces/KERNELS.md``).
"""
from __future__ import annotations

import dataclasses
import numbers
from typing import NamedTuple

from simcore._frozen import hash_once

from .grouped import check_grouped
from . import _tensorop

LAYOUTS = ("nhwc", "nchw")
OPS = ("fprop", "dgrad", "wgrad")
MATHS = ("simt", "tensorop")
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
OPERAND_A, OPERAND_B, OPERAND_C = 0, 1, 2


class ThreadMap(NamedTuple):
    """CUTLASS PitchLinearStripminedThreadMap (``raked`` False) or PitchLinearWarpRakedThreadMap (True)
    of one operand tile.

    Stripmined: thread t accesses contiguous offset (t % t_c) * vector and strided offsets
    t // t_c + j * t_s, j = 0 .. iterations - 1. Warp-raked (one warp access spans the contiguous
    extent, t_c = contiguous / vector threads along it, t_s = 32 / t_c rows): thread t of warp
    w = t // 32, lane l = t % 32, accesses contiguous offset (l % t_c) * vector and strided offsets
    w * t_s * iterations + l // t_c + j * t_s. One warp-level request is one j for the 32 threads of one
    warp (`strided_offset` gives a thread's strided offset at j = 0).
    """

    contiguous: int   # E_c: tile extent along the contiguous dimension (elements)
    strided: int      # E_s: tile extent along the strided dimension
    vector: int       # V: elements per thread access
    t_c: int          # threads along the contiguous dimension
    t_s: int          # threads along the strided dimension
    iterations: int   # I: accesses per thread
    raked: bool = False

    def strided_offset(self, thread: int) -> int:
        """Strided offset of ``thread``'s first access (iteration j adds j * t_s)."""
        if self.raked:
            return thread // 32 * self.t_s * self.iterations + thread % 32 // self.t_c
        return thread // self.t_c

    def contiguous_offset(self, thread: int) -> int:
        """Contiguous offset (elements) of ``thread``'s accesses."""
        return (thread % (32 if self.raked else self.t_c)) % self.t_c * self.vector


def _int_field(field: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"KernelConfig.{field} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"KernelConfig.{field} must be >= {minimum}, got {value!r}")
    return int(value)


def make_thread_map(operand: str, contiguous: int, strided: int, threads: int, vector: int) -> ThreadMap:
    """The stripmined thread map of one operand tile; ValueError unless it tiles the operand exactly."""
    if contiguous % vector:
        raise ValueError(f"KernelConfig: operand {operand} contiguous tile extent {contiguous} is not a "
                         f"multiple of vector={vector}")
    t_c = contiguous // vector
    if threads % t_c:
        raise ValueError(f"KernelConfig: operand {operand} needs {t_c} threads along its contiguous "
                         f"dimension, which does not divide threads={threads}")
    t_s = threads // t_c
    if strided % t_s:
        raise ValueError(f"KernelConfig: operand {operand} strided tile extent {strided} is not a multiple "
                         f"of the {t_s} threads along it (threads={threads}, vector={vector})")
    return ThreadMap(contiguous, strided, vector, t_c, t_s, strided // t_s)


def parse_tile(text) -> tuple:
    """``'128x128x8'`` -> (128, 128, 8); ValueError unless the text looks like MxNxK."""
    parts = str(text).lower().split("x")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"tile must look like MxNxK (e.g. 128x128x8), got {text!r}")
    return tuple(int(p) for p in parts)


@hash_once
@dataclasses.dataclass(frozen=True)
class KernelConfig:
    """A CTA-tiled implicit-GEMM convolution kernel (defaults: CUTLASS SIMT fp32 128x128x8 Fprop).

    Parameters
    ----------
    tile_m, tile_n, tile_k : int
        CTA tile of the GEMM (rows of M, filters, reduction elements per k-step).
    threads : int
        Threads per CTA, a multiple of 32.
    layout : {"nhwc", "nchw"}
    dtype : {"fp32", "fp16", "bf16"}
    vector : int
        Elements per thread access (``nchw`` needs 1; ``tensorop`` 8).
    stages : int
        Shared-memory pipeline stages (shared memory = stages (tile_m + tile_n) tile_k elem bytes).
    regs_per_thread : int
    ctas_per_sm : int or None
        Force CTAs resident per SM; None: the occupancy limit.
    swizzle_log : int
        log2 of the GemmIdentityThreadblockSwizzle width.
    op : {"fprop", "dgrad", "wgrad"}
        The pass (DESIGN section 3a); ``dgrad`` and ``wgrad`` need layout ``nhwc``. Thread maps (contiguous
        x strided extent): fprop nhwc A (tile_k x tile_m), B (tile_k x tile_n); nchw A (tile_m x tile_k);
        dgrad A (tile_k x tile_m), B (tile_n x tile_k); wgrad A (tile_m x tile_k), B (tile_n x tile_k).
    math : {"simt", "tensorop"}
        ``tensorop``: the SM80 tensor-op Fprop kernel of DESIGN section 3a (warp-raked thread maps,
        ``cp.async``); needs dtype fp16/bf16, nhwc, fprop, vector 8, tile_k 32 or 64, stages >= 3, tile_n
        dividing 256, and warps dividing tile_m / (256 / tile_k) and tile_n / (256 / tile_k).
    """

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 8
    threads: int = 256
    layout: str = "nhwc"
    dtype: str = "fp32"
    vector: int = 1
    stages: int = 2
    regs_per_thread: int = 128
    ctas_per_sm: int | None = None
    swizzle_log: int = 0
    op: str = "fprop"
    math: str = "simt"

    def __post_init__(self):
        for field in ("tile_m", "tile_n", "tile_k", "threads", "vector", "stages", "regs_per_thread"):
            object.__setattr__(self, field, _int_field(field, getattr(self, field)))
        object.__setattr__(self, "swizzle_log", _int_field("swizzle_log", self.swizzle_log, 0))
        if self.swizzle_log > 8:
            raise ValueError(f"KernelConfig.swizzle_log must be <= 8, got {self.swizzle_log}")
        if self.ctas_per_sm is not None:
            object.__setattr__(self, "ctas_per_sm", _int_field("ctas_per_sm", self.ctas_per_sm))
        if self.threads % 32:
            raise ValueError(f"KernelConfig.threads must be a multiple of 32 (a warp), got {self.threads}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"KernelConfig.layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.op not in OPS:
            raise ValueError(f"KernelConfig.op must be one of {OPS}, got {self.op!r}")
        if self.op != "fprop" and self.layout != "nhwc":
            raise ValueError(f"KernelConfig.op={self.op!r} is defined for layout 'nhwc' only (DESIGN section 3a), "
                             f"got layout {self.layout!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"KernelConfig.dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.math not in MATHS:
            raise ValueError(f"KernelConfig.math must be one of {MATHS}, got {self.math!r}")
        if self.math == "tensorop":
            _tensorop.check_kernel(self)
        if self.layout == "nchw" and self.vector != 1:
            raise ValueError(f"KernelConfig.vector must be 1 for layout 'nchw', got {self.vector}")
        if self.vector * self.elem_bytes > 16:
            raise ValueError(f"KernelConfig.vector={self.vector}: a thread access is at most 16 bytes "
                             f"({16 // self.elem_bytes} {self.dtype} elements)")
        self.thread_map_a  # noqa: B018  (raises if the thread map does not tile the operand)
        self.thread_map_b  # noqa: B018

    # ---- derived figures -------------------------------------------------------------------
    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def warps(self) -> int:
        return self.threads // 32

    @property
    def smem_per_cta(self) -> int:
        return self.stages * (self.tile_m + self.tile_n) * self.tile_k * self.elem_bytes

    @property
    def thread_map_a(self) -> ThreadMap:
        if self.math == "tensorop":             # fprop nhwc: contiguous channels, strided rows m
            return _tensorop.raked_map("A", self.tile_k, self.tile_m, self.threads, self.vector, ThreadMap)
        if self.layout == "nchw" or self.op == "wgrad":     # contiguous rows m (nchw) or filters k (wgrad)
            return make_thread_map(self._operand("A"), self.tile_m, self.tile_k, self.threads, self.vector)
        return make_thread_map(self._operand("A"), self.tile_k, self.tile_m, self.threads, self.vector)

    @property
    def thread_map_b(self) -> ThreadMap:
        if self.math == "tensorop":             # fprop nhwc: contiguous channels, strided filters k
            return _tensorop.raked_map("B", self.tile_k, self.tile_n, self.threads, self.vector, ThreadMap)
        if self.op == "fprop":
            return make_thread_map("B", self.tile_k, self.tile_n, self.threads, self.vector)
        return make_thread_map(self._operand("B"), self.tile_n, self.tile_k, self.threads, self.vector)

    def _operand(self, name: str) -> str:
        return name if self.op == "fprop" else f"{name} ({self.op})"

    def gemm_shape(self, layer) -> tuple:
        """(GEMM-M, GEMM-N, GEMM-K) of ``layer`` for this kernel's op (DESIGN section 3a)."""
        if self.op == "dgrad":
            return layer.n * layer.h * layer.w, layer.c, layer.k * layer.r * layer.s
        if self.op == "wgrad":
            return layer.k, layer.r * layer.s * layer.c, layer.gemm_m
        return layer.gemm_m, layer.k, layer.gemm_k

    def resident_ctas(self, gpu) -> int:
        """CTAs per SM on ``gpu``: ``ctas_per_sm`` if set, else the occupancy limit (DESIGN section 3)."""
        if self.ctas_per_sm is not None:
            gpu.carveout_for(self.ctas_per_sm * self.smem_per_cta)  # raises if it cannot fit
            return self.ctas_per_sm
        return gpu.occupancy(self.smem_per_cta, self.threads, self.regs_per_thread)

    def l1_config(self, gpu):
        """One SM's L1 geometry on ``gpu`` when this kernel runs."""
        return gpu.l1_config(self.resident_ctas(gpu), self.smem_per_cta)

    def check_layer(self, layer) -> None:
        """Raise ValueError if ``layer`` cannot run with this kernel: a contiguous extent (C for x and w;
        K for dy in dgrad and wgrad) not a multiple of ``vector``, a strided dgrad with dilation, or a grouped
        layer the kernel cannot run (`traces.grouped.check_grouped`)."""
        check_grouped(layer, self)
        name = layer.name or layer
        if self.layout == "nhwc" and layer.c % _tensorop.alignment(self, layer):
            raise ValueError(f"layer {name}: C={layer.c} is not a multiple of "
                             f"KernelConfig.vector={self.vector} (nhwc contiguous extent)")
        if self.op != "fprop" and layer.k % self.vector:
            raise ValueError(f"layer {name}: K={layer.k} is not a multiple of KernelConfig.vector={self.vector} "
                             f"({self.op}: contiguous extent of dy)")
        if self.op == "dgrad" and layer.stride != (1, 1) and layer.dilation != (1, 1):
            raise ValueError(f"layer {name}: strided dgrad (stride={layer.stride}) with dilation={layer.dilation} "
                             f"is not supported (CUTLASS's strided Dgrad rejects dilation > 1)")

    @classmethod
    def from_tile(cls, text: str, **kwargs) -> "KernelConfig":
        """Parse ``'128x128x8'`` into tile_m, tile_n, tile_k."""
        m, n, k = parse_tile(text)
        return cls(tile_m=m, tile_n=n, tile_k=k, **kwargs)

    def as_dict(self) -> dict:
        """Every field; ``math`` only when not "simt" (so SIMT kernels keep their cache and results keys)."""
        out = dataclasses.asdict(self)
        if out["math"] == "simt":
            del out["math"]
        return out
