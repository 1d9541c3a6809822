"""analytic: the closed-form DeLTA-style traffic, timing and roofline model.

``predict_layer(layer, gpu, kernel, factors=None)`` predicts every metric of `simcore.metrics`
(totals and per operand) plus FLOPs, time per resource, the bounding resource and arithmetic
intensity at L1, L2 and DRAM; ``predict_network`` does a list of layers. ``predict_step`` predicts the
three passes of a training step (fprop, dgrad, wgrad) of a layer and their sum;
``l1_counts_for(layer, kernel)`` gives the exact L1 request and sector counts of any pass. Effects not counted
exactly are the named fields of `ReuseFactors` (see analytic/MODEL.md). A process's first predictions
run the model's kernels interpreted, later ones compiled, with the same results (`set_model_kernels`,
`analytic._tiers`).
"""
from ._counts import l1_counts_for, l1_exact
from .factors import ReuseFactors, resolve_factors
from ._tiers import model_kernels, set_model_kernels
from .model import TIMING_KEYS, layer_time, predict_layer, predict_network
from .training import TRAIN_OPS, pass_kernels, predict_step, predict_step_network, step_total

__all__ = ["ReuseFactors", "TIMING_KEYS", "l1_counts_for", "l1_exact", "layer_time", "predict_layer", "predict_network",
           "resolve_factors", "model_kernels", "set_model_kernels", "TRAIN_OPS", "pass_kernels", "predict_step", "predict_step_network", "step_total"]
