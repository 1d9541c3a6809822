"""The model's side of the SM80 tensor-op kernel (DESIGN section 3a; MODEL.md "Tensor-op kernels"):
which L1 keys each operand's loads count under, and whether B bypasses the L1.

A ``cp.async.ca`` load is looked up and allocated in the L1 exactly like a global load, so the model
predicts it as one and only moves its counts from the ``op_ld`` keys to the ``op_ldgsts_cache_access``
keys (`simcore.metrics.KIND_KEYS`). A ``cp.async.cg`` load (B with 16-byte accesses) is never looked
up: its sectors all go to the L2 (``l1_hit_b`` 0) and it takes no L1 capacity from A
(`bypasses_l1`), counted under the ``_cache_bypass`` keys, which have no hit / miss keys.
"""
from __future__ import annotations

from simcore import metrics as Mx
from traces._tensorop import operand_kinds

__all__ = ["operand_kinds", "bypasses_l1", "relabel_loads"]


def bypasses_l1(kinds) -> bool:
    """True when B's loads (``kinds[1]``) are ``cp.async.cg``."""
    return kinds[1] == Mx.KIND_CP_ASYNC_CG


def relabel_loads(out: dict, kinds) -> dict:
    """Move each loaded operand's ``op_ld`` counts in ``out`` (totals and ``:A`` / ``:B``) to the L1 keys
    of its kind (``kinds``: A's, B's); a kind without hit / miss keys (the bypass) must have no hits, and
    its misses (every sector, already counted as L2 reads) are dropped."""
    loads = Mx.KIND_KEYS[Mx.KIND_LD]
    moved = set()
    for op, kind in zip("AB", kinds):
        if kind == Mx.KIND_LD:
            continue
        target = Mx.KIND_KEYS[kind]
        for i, key in enumerate(loads):
            value = out[f"{key}:{op}"]
            out[f"{key}:{op}"] = 0.0
            if i < len(target):
                out[f"{target[i]}:{op}"] += value
                moved.add(target[i])
            elif key == Mx.L1_LD_HITS and value:      # a bypass has no hits (its misses: every sector)
                raise AssertionError(f"{key}:{op} = {value}: {Mx.KINDS[kind]} loads cannot hit in the L1")
            moved.add(key)
    for key in moved:
        out[key] = sum(out[f"{key}:{op}"] for op in "ABC")
    return out
