"""Hypothetical GPUs with a consistent geometry: `replace_gpu` and `scale_gpu`.

``dataclasses.replace(gpu, l2_bytes=...)`` keeps every other field, so a new L2 capacity or slice
count usually breaks the slice geometry (the xor index needs a power-of-two number of sets per
slice, and capacity / (slices x line) must be sets x ways). These helpers derive the rest:

* **L2** (``l2_bytes`` or ``l2_slices`` changed, ``l2_ways`` not given): the sets per slice stay as
  they were and the **ways scale**: ways = round(lines per slice / sets) (at least 1; if even one way
  of the old sets is too much, the sets are halved until it fits). The capacity is then
  slices x sets x ways x line, which may differ from the requested one by less than one way per slice
  (``describe_l2`` says what was chosen). With ``l2_ways`` given, the sets follow from the capacity
  and must be a whole number (a power of two for the xor index), else ValueError naming the fields.
* **L1** (``l1_smem_bytes`` changed): rounded to a multiple of ``l1_sets`` x line; shared-memory
  carve-outs larger than the new size are dropped (0 is kept).
* **SMs and clock** (``sms``, ``clock_mhz`` changed): the FP32 and tensor peaks scale with
  SMs x clock (more or faster SMs of the same design) unless they are given too.

Integer fields given as non-integers are rounded. Every result goes through `GPU`'s own checks.
The simulator and the analytic model both read the geometry from the returned `GPU`
(`GPU.l2_slice_config`), so they agree on it.
"""
from __future__ import annotations

import dataclasses
import numbers

from .config import is_power_of_two
from .gpus import GPU

__all__ = ["replace_gpu", "scale_gpu", "describe_l2"]

_NOT_NUMERIC = ("name", "smem_carveouts", "l2_index")


def _fields():
    return {f.name for f in dataclasses.fields(GPU)}


def _l2_geometry(gpu: GPU, l2_bytes: float, slices: int, ways, line: int):
    """(l2_bytes, l2_ways) of a consistent slice geometry near ``l2_bytes`` (see module docstring)."""
    lines_per_slice = float(l2_bytes) / (slices * line)
    if ways is not None:
        sets = lines_per_slice / ways
        if sets != int(sets) or sets < 1 or (gpu.l2_index == "xor" and not is_power_of_two(int(sets))):
            raise ValueError(f"replace_gpu: l2_bytes={l2_bytes:.0f} over l2_slices={slices} and "
                             f"l2_ways={ways} gives {sets:g} sets per slice; the {gpu.l2_index} index "
                             f"needs a whole{' power-of-two' if gpu.l2_index == 'xor' else ''} number")
        return int(round(l2_bytes)), int(ways)
    sets = gpu.l2_sets_per_slice
    while sets > 1 and lines_per_slice / sets < 0.5:
        sets //= 2
    new_ways = max(1, int(round(lines_per_slice / sets)))
    return slices * sets * new_ways * line, new_ways


def replace_gpu(gpu: GPU, **changes) -> GPU:
    """``dataclasses.replace(gpu, **changes)`` with a consistent geometry (see the module docstring).

    Parameters
    ----------
    gpu : simcore.GPU
        The GPU to start from.
    **changes
        New values of GPU fields (e.g. ``l2_bytes=9 << 20``, ``sms=160``, ``l2_slices=96``).

    Returns
    -------
    simcore.GPU

    Raises
    ------
    TypeError, ValueError
        An unknown field, a non-numeric value for a numeric field, or a geometry that cannot be made
        consistent (e.g. ``l2_ways`` given with a capacity it does not divide).
    """
    if not isinstance(gpu, GPU):
        raise TypeError(f"replace_gpu: gpu must be a simcore.GPU, got {type(gpu).__name__}")
    known = _fields()
    for field, value in changes.items():
        if field not in known:
            raise ValueError(f"replace_gpu: unknown GPU field {field!r}")
        if field not in _NOT_NUMERIC and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
            raise TypeError(f"replace_gpu: GPU.{field} must be a number, got {value!r}")
    new = dict(changes)
    for field, value in list(new.items()):
        if field not in _NOT_NUMERIC and isinstance(getattr(gpu, field), int):
            new[field] = int(round(value))
    # more (or faster) SMs of the same design: the peaks follow unless given
    speed = new.get("sms", gpu.sms) / gpu.sms * new.get("clock_mhz", gpu.clock_mhz) / gpu.clock_mhz
    if speed != 1.0:
        for peak in ("fp32_tflops", "tensor_tflops", "fp16_tflops", "bf16_tflops"):
            if getattr(gpu, peak) is not None:
                new.setdefault(peak, getattr(gpu, peak) * speed)
    line = new.get("line_bytes", gpu.line_bytes)
    if "l1_smem_bytes" in new:
        unit = new.get("l1_sets", gpu.l1_sets) * line
        size = max(unit, int(round(new["l1_smem_bytes"] / unit)) * unit)
        new["l1_smem_bytes"] = size
        if "smem_carveouts" not in new and gpu.smem_carveouts:
            new["smem_carveouts"] = tuple(c for c in gpu.smem_carveouts if c <= size)
    if {"l2_bytes", "l2_slices"} & set(new) and "l2_ways" not in changes:
        l2_bytes, ways = _l2_geometry(gpu, new.get("l2_bytes", gpu.l2_bytes), new.get("l2_slices", gpu.l2_slices),
                                      None, line)
        new["l2_bytes"], new["l2_ways"] = l2_bytes, ways
    elif "l2_ways" in changes:
        new["l2_bytes"], new["l2_ways"] = _l2_geometry(gpu, new.get("l2_bytes", gpu.l2_bytes),
                                                       new.get("l2_slices", gpu.l2_slices), new["l2_ways"], line)
    return dataclasses.replace(gpu, **new)


def scale_gpu(gpu: GPU, factors: dict) -> GPU:
    """`replace_gpu` with each field multiplied by its factor (``{"l2_bytes": 1.5, "sms": 2}``).

    Raises ValueError naming the field for an unknown or non-numeric field or a non-positive factor.
    """
    if not isinstance(factors, dict):
        raise TypeError(f"scale_gpu: factors must be a dict of field -> factor, got {type(factors).__name__}")
    known = _fields()
    changes = {}
    for field, factor in factors.items():
        if field not in known:
            raise ValueError(f"scale_gpu: unknown GPU field {field!r}")
        if field in _NOT_NUMERIC:
            raise ValueError(f"scale_gpu: GPU field {field!r} is not numeric and cannot be scaled")
        if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not 0 < factor < float("inf"):
            raise ValueError(f"scale_gpu: factor of {field} must be a positive finite number, got {factor!r}")
        value = getattr(gpu, field) * float(factor)
        if isinstance(getattr(gpu, field), int) and int(round(value)) < 1:
            raise ValueError(f"scale_gpu: {field}={getattr(gpu, field)} x {factor:g} rounds to "
                             f"{int(round(value))}, not a positive integer")
        changes[field] = value
    return replace_gpu(gpu, **changes)


def describe_l2(gpu: GPU) -> str:
    """``'9 MiB L2: 64 slices x 144 KiB, 32 sets x 36 ways (xor)'``."""
    def size(b):
        return f"{b / (1 << 20):g} MiB" if b >= 1 << 20 else f"{b / 1024:g} KiB"
    return (f"{size(gpu.l2_bytes)} L2: {gpu.l2_slices} slices x {size(gpu.l2_slice_bytes)}, "
            f"{gpu.l2_sets_per_slice} sets x {gpu.l2_ways} ways ({gpu.l2_index})")
