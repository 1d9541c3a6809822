"""Analytic model throughput: layer predictions per second (DESIGN section 8 target: >= 10,000/s).

    python benchmarks/bench_analytic.py [--seconds 3] [--op fprop,dgrad,wgrad,grouped]

Predicts every conv layer of vgg16, resnet50, alexnet and googlenet (batch 1 and 64) on v100, a100
and h100 with the default kernel of each op (issue 14: the target holds for each op); "grouped": every
conv layer of mobilenet_v2, resnext50_32x4d and efficientnet_b0 (grouped, depthwise and dense; fprop,
the only op grouped layers run), the same GPUs and batches. Repeatedly, on
one core, after a warm-up pass over the whole workload, with the model's kernels compiled
(`analytic.set_model_kernels`: a process's first predictions otherwise run interpreted). The warm-up
takes the process's one-time costs: loading the compiled kernels, the L2 cliff tables of strided
windows (`analytic._l2.pattern_cliff`, per GPU geometry and line pattern, about 15 ms each; the fprop
workload has 48 over its three GPUs, 0.6-0.7 s in all), which a study pays once per GPU, and the re-fetch
windows' set tables of the layers whose later waves re-read A near the L2's capacity
(`analytic._refetch_window`, 10-110 ms a layer shape and GPU), which a study pays once per layer and GPU, and
dgrad's L1 hits counted on its own request stream (`analytic._l1_sampled`, 0.05-0.5 s a layer shape, kernel and
GPU: the dgrad workload's first pass 3.4 -> 69.5 s on the twenty-first session's VM), whose samples run on
Numba's thread count since the twenty-fourth session (`analytic._threads`; 2-core VM, the same run alternating with
the code before: dgrad first pass 151.3 -> 82.9 s, grouped 103.1 -> 71.9 s) (the "first pass" line times the
warm-up). Each timed pass
over the workload starts with the model's memo of GPU-independent figures cleared (`analytic._memo`):
within a pass the three GPUs share each layer's exact counts and geometry, as a user's study of a
network on three GPUs does, and so do a network's layers of one shape (the memo is keyed by shape:
resnet50's 53 conv layers have 23, the grouped networks' 186 have 100), but no pass finds the last one's.
Layers of one shape on one GPU share the whole prediction (`analytic.model._predict_shape`); the "distinct
shapes" line times each (shape, GPU) of the workload once a pass, the cost of a prediction that shares nothing
but the GPU-independent figures.
"""
from __future__ import annotations

import argparse
import time

import simcore
import traces
from analytic import predict_layer, predict_network, set_model_kernels
from analytic._memo import clear_memo
from traces.kernel import OPS

TARGET = 10_000.0


GROUPED_NETWORKS = ("mobilenet_v2", "resnext50_32x4d", "efficientnet_b0")


def workload(op="fprop"):
    grouped = op == "grouped"
    kernel = traces.KernelConfig(op="fprop" if grouped else op)
    cases = []
    for gname in ("v100", "a100", "h100"):
        gpu = simcore.gpu(gname)
        for net in GROUPED_NETWORKS if grouped else ("vgg16", "resnet50", "alexnet", "googlenet"):
            for batch in (1, 64):
                cases.append((traces.network(net, batch), gpu, kernel))
    return cases


def distinct_shapes(cases):
    """The workload with each layer shape once a GPU (batch 1 and 64 stay apart: their shapes differ)."""
    seen, out = set(), []
    for layers, gpu, kernel in cases:
        keep = []
        for layer in layers:
            if (layer.shape, gpu.name) not in seen:
                seen.add((layer.shape, gpu.name))
                keep.append(layer)
        out.append((keep, gpu, kernel))
    return out


def measure(seconds: float = 3.0, network_api: bool = False, op: str = "fprop", distinct: bool = False,
            timings: dict | None = None) -> float:
    set_model_kernels("compiled")
    cases = workload(op)
    if distinct:
        cases = distinct_shapes(cases)
    warm = time.perf_counter()
    for layers, gpu, kernel in cases:            # warm-up: one pass
        predict_network(layers, gpu, kernel)
    if timings is not None:
        timings["first pass s"] = time.perf_counter() - warm
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        clear_memo()
        for layers, gpu, kernel in cases:
            if network_api:
                predict_network(layers, gpu, kernel)
            else:
                for layer in layers:
                    predict_layer(layer, gpu, kernel)
            count += len(layers)
    return count / (time.perf_counter() - start)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--op", default="fprop,dgrad,wgrad,grouped",
                   help="comma-separated ops, or 'grouped' for the grouped networks (default: all four)")
    args = p.parse_args(argv)
    ops = [o.strip() for o in args.op.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS + ("grouped",)]
    if unknown or not ops:
        p.error(f"--op: expected fprop, dgrad, wgrad or grouped, got {args.op!r}")
    for op in ops:
        timings = {}
        rate = measure(args.seconds, op=op, timings=timings)
        first = sum(len(layers) for layers, _gpu, _kernel in workload(op))
        print(f"{op:7s} first pass:      {timings['first pass s']:10.1f} s for the workload's {first} predictions "
              f"(one-time costs: kernels loaded, L2 pattern and re-fetch window tables; information)")
        rate_net = measure(args.seconds, network_api=True, op=op)
        print(f"{op:7s} predict_layer:   {rate:10.0f} layer predictions/s (target >= {TARGET:.0f}) "
              f"{'OK' if rate >= TARGET else 'BELOW TARGET'}")
        print(f"{op:7s} predict_network: {rate_net:10.0f} layer predictions/s (target >= {TARGET:.0f}) "
              f"{'OK' if rate_net >= TARGET else 'BELOW TARGET'}")
        rate_distinct = measure(args.seconds, op=op, distinct=True)
        print(f"{op:7s} distinct shapes: {rate_distinct:10.0f} layer predictions/s (each shape once a GPU; "
              f"information)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
