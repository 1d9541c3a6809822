"""Grouped and depthwise convolution (``ConvLayer.groups > 1``): which CUTLASS ``GroupMode`` a layer runs
with on a kernel, and what that mode requires (traces/KERNELS.md, "Grouped and depthwise fprop").

CUTLASS v3.5.1 (`conv/device/implicit_gemm_convolution.h`, ``can_implement``) accepts a grouped problem
with ``GroupMode::kSingleGroup`` iff K/groups is a multiple of the CTA tile's N (a CTA's filters lie in one
group) and with ``GroupMode::kMultipleGroup`` iff the tile's N is a multiple of K/groups (a CTA covers
tile_n / (K/groups) whole groups). The library instantiates both for every grouped Fprop
(`python/cutlass_library/generator.py`, ``CreateConv2dOperator``: SingleGroup first), so the project picks
kSingleGroup where it applies and kMultipleGroup otherwise; when K/groups == tile_n both give the same
stream. Depthwise layers (groups == C == K) take the same rule (K/groups = 1: kMultipleGroup).
"""
from __future__ import annotations

import functools

GROUP_MODES = ("none", "single", "multiple")


@functools.lru_cache(maxsize=4096)
def group_mode(layer, kernel) -> str:
    """The group mode of ``layer`` on ``kernel``: "none" (groups == 1), "single" (CUTLASS kSingleGroup:
    K/groups a multiple of tile_n) or "multiple" (kMultipleGroup: tile_n a multiple of K/groups).

    Raises
    ------
    ValueError
        A grouped layer the kernel cannot run: op not fprop, layout not nhwc, neither mode applies, or
        C/groups not a multiple of the vector width (one line naming the field and the value).
    """
    check_grouped(layer, kernel)
    if layer.groups == 1:
        return "none"
    return "single" if layer.k_per_group % kernel.tile_n == 0 else "multiple"


@functools.lru_cache(maxsize=4096)
def groups_per_cta(layer, kernel) -> int:
    """Groups one CTA walks through: tile_n / (K/groups) under kMultipleGroup, else 1."""
    return kernel.tile_n // layer.k_per_group if group_mode(layer, kernel) == "multiple" else 1


def check_grouped(layer, kernel) -> None:
    """ValueError unless ``kernel`` can run the grouped ``layer`` (nothing to check when groups == 1)."""
    if layer.groups == 1:
        return
    name = layer.name or layer
    if kernel.op != "fprop":
        raise ValueError(f"layer {name}: groups={layer.groups} is supported for op 'fprop' only, got "
                         f"KernelConfig.op={kernel.op!r}")
    if kernel.math != "simt":
        raise ValueError(f"layer {name}: groups={layer.groups} is supported for KernelConfig.math 'simt' only, "
                         f"got {kernel.math!r} (the grouped stream is stated for the SIMT kernels)")
    if kernel.layout != "nhwc":
        raise ValueError(f"layer {name}: groups={layer.groups} needs KernelConfig.layout 'nhwc' (CUTLASS's "
                         f"grouped Fprop is NHWC only), got {kernel.layout!r}")
    kg = layer.k_per_group
    if kg % kernel.tile_n and kernel.tile_n % kg:
        raise ValueError(f"layer {name}: groups={layer.groups} gives K/groups={kg}, which is neither a multiple "
                         f"of KernelConfig.tile_n={kernel.tile_n} (CUTLASS kSingleGroup) nor divides it "
                         f"(kMultipleGroup)")
    if layer.c_per_group % kernel.vector:
        raise ValueError(f"layer {name}: C/groups={layer.c_per_group} is not a multiple of "
                         f"KernelConfig.vector={kernel.vector} (CUTLASS's activation iterator alignment)")
