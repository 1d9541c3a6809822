"""analytic: the closed-form DeLTA-style traffic, timing and roofline model.

``predict_layer(layer, gpu, kernel, factors=None)`` predicts every metric of `simcore.metrics`
(totals and per operand) plus FLOPs, time per resource, the bounding resource and arithmetic
intensity at L1, L2 and DRAM; ``predict_network`` does a list of layers; ``l1_counts_for(layer, kernel)``
gives the exact L1 request and sector counts of any pass (fprop, dgrad, wgrad). Effects not counted
exactly are the named fields of `ReuseFactors` (see analytic/MODEL.md).
"""
from ._counts import l1_counts_for, l1_exact
from .factors import ReuseFactors, resolve_factors
from .model import TIMING_KEYS, predict_layer, predict_network

__all__ = ["ReuseFactors", "TIMING_KEYS", "l1_counts_for", "l1_exact", "predict_layer", "predict_network",
           "resolve_factors"]
