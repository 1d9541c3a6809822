"""A training step of a conv layer: its three convolution passes and their sum.

A training step runs, per forward layer, fprop (y from x and w), dgrad (dx from dy and w) and wgrad
(dw from x and dy); each is a kernel launch of its own (`traces.KernelConfig(op=...)`, DESIGN
section 3a), so the step's traffic at every level is the sum of the three passes' and its time the
sum of their times (launches run one after the other). Its bound is the bound of the passes that take
most of its time (each pass is bound by one resource; the step's time is split between those bounds).
"""
from __future__ import annotations

import dataclasses
import math

from .model import layer_time, predict_network

__all__ = ["TRAIN_OPS", "pass_kernels", "step_total", "predict_step", "predict_step_network", "step_time"]

#: The passes of a training step, in the order they run for one layer.
TRAIN_OPS = ("fprop", "dgrad", "wgrad")
_AI = {"ai_l1": "l1", "ai_l2": "l2", "ai_dram": "dram"}
_NOT_SUMMED = {"bound", "waves", *_AI}


def pass_kernels(kernel) -> dict:
    """``{op: kernel with that op}`` for the three passes; ValueError (one line) when ``kernel``'s
    other settings do not allow a backward pass (e.g. layout nchw)."""
    out = {}
    for op in TRAIN_OPS:
        try:
            out[op] = kernel if kernel.op == op else dataclasses.replace(kernel, op=op)
        except ValueError as err:
            raise ValueError(f"a training step needs every pass: {err}") from None
    return out


def step_total(passes: dict) -> dict:
    """The sum of the passes' predictions (or simulated counts with their `layer_time`): every count
    and time summed, arithmetic intensities from the summed FLOPs and bytes, ``bound`` the bound that
    carries most of the summed time (ties: the first pass's), ``bound_share`` that part of the time.

    Parameters
    ----------
    passes : dict
        ``{op: metrics}`` (any subset of `TRAIN_OPS`), each a dict of `predict_layer`'s keys.
    """
    step = {}
    for values in passes.values():
        for key, value in values.items():
            if key in _NOT_SUMMED or isinstance(value, str) or value is None:
                continue
            step[key] = step.get(key, 0.0) + float(value)
    flops = step.get("flops", 0.0)
    for key in _AI:
        moved = sum(values["flops"] / values[key] for values in passes.values()
                    if key in values and values[key] and math.isfinite(values[key]))
        if any(key in values for values in passes.values()):
            step[key] = flops / moved if moved else math.inf
    by_bound = {}
    for values in passes.values():
        if values.get("bound") is not None:
            by_bound[values["bound"]] = by_bound.get(values["bound"], 0.0) + float(values.get("time_s", 0.0))
    if by_bound:
        bound = max(by_bound, key=by_bound.get)
        step["bound"] = bound
        total = step.get("time_s", 0.0)
        step["bound_share"] = by_bound[bound] / total if total else 1.0
    return step


def predict_step(layer, gpu, kernel=None, factors=None) -> dict:
    """``{"fprop": ..., "dgrad": ..., "wgrad": ..., "step": ...}``: `analytic.predict_layer` of each
    pass of ``layer`` (the forward layer) and their `step_total`."""
    return predict_step_network([layer], gpu, kernel, factors)[0]


def predict_step_network(layers, gpu, kernel=None, factors=None) -> list:
    """`predict_step` of every layer (each pass's kernel and the factors resolved once)."""
    from traces import KernelConfig
    kernels = pass_kernels(KernelConfig() if kernel is None else kernel)
    preds = {op: predict_network(layers, gpu, k, factors) for op, k in kernels.items()}
    out = []
    for i in range(len(layers)):
        row = {op: preds[op][i] for op in TRAIN_OPS}
        row["step"] = step_total(row)
        out.append(row)
    return out


def step_time(layer, gpu, kernel, counts: dict) -> dict:
    """`step_total` of the time model on each pass's traffic ``counts[op]`` (e.g. simulated counts):
    the training step's time, bound and intensities for that traffic."""
    kernels = pass_kernels(kernel)
    passes = {op: dict(counts[op], **layer_time(layer, gpu, kernels[op], counts[op])) for op in counts}
    return step_total(passes)

