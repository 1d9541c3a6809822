"""Named kernels (`KERNELS`) and the one rule every CLI uses to build a kernel from ``--kernel NAME`` and
explicit options (`kernel_from_options`): the preset is the base, options given override its fields.

Sources (CUTLASS v3.5.1, ``python/cutlass_library/generator.py``; the list is in ``traces/KERNELS.md``):
``GenerateSM50_Simt`` / ``GenerateSM80_Simt_f32`` (SIMT 128x128x8, 2 stages, 8 warps) and
``GenerateSM80_TensorOp_16816`` (f16/bf16 ``TileDescription([128, 128, 32], 3, [2, 2, 1])``,
``([256, 128, 32], 3, [4, 2, 1])``, ``([128, 128, 64], 4, [2, 2, 1])``; warps = the product of the last
triple). ``sm80_tensorop_128x128x32_256t`` (8 warps of 64x32) is not in that list: the issue asks for it to
compare 128 with 256 threads on one tile.

``regs_per_thread`` of the tensor-op presets is an estimate, not a measurement: the fp32 accumulators
(tile_m * tile_n / threads registers) plus 104 for the A/B fragments (double-buffered) and addresses,
rounded up to a multiple of 8; it only decides occupancy where registers bind before shared memory.
"""
from __future__ import annotations

import dataclasses

from .kernel import KernelConfig, parse_tile

__all__ = ["KERNELS", "DEFAULT_KERNEL", "kernel_preset", "kernel_from_options"]


def _sm80(tile_m, tile_n, tile_k, threads, stages):
    accumulators = tile_m * tile_n // threads
    regs = -(-(accumulators + 104) // 8) * 8
    return KernelConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, threads=threads, dtype="fp16", vector=8,
                        stages=stages, regs_per_thread=min(regs, 255), math="tensorop")


#: name -> KernelConfig
KERNELS = {
    "simt_128x128x8": KernelConfig(),
    "sm80_tensorop_128x128x32_128t": _sm80(128, 128, 32, 128, 3),
    "sm80_tensorop_128x128x32_256t": _sm80(128, 128, 32, 256, 3),
    "sm80_tensorop_256x128x32": _sm80(256, 128, 32, 256, 3),
    "sm80_tensorop_128x128x64": _sm80(128, 128, 64, 128, 4),
}
DEFAULT_KERNEL = "simt_128x128x8"


def kernel_preset(name: str) -> KernelConfig:
    """The preset ``name``; ValueError (one line listing the names) if there is none."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r} (known: {', '.join(KERNELS)})")
    return KERNELS[name]


def kernel_from_options(preset=None, tile=None, **options) -> KernelConfig:
    """``preset`` (None: `DEFAULT_KERNEL`) with ``tile`` ("MxNxK") and every option that is not None
    (KernelConfig field names) replacing its fields; ValueError / TypeError as KernelConfig raises them."""
    base = kernel_preset(DEFAULT_KERNEL if preset is None else preset)
    changes = {field: value for field, value in options.items() if value is not None}
    if tile is not None:
        changes = dict(zip(("tile_m", "tile_n", "tile_k"), parse_tile(tile)), **changes)
    return dataclasses.replace(base, **changes) if changes else base
