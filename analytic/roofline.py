"""Hierarchical roofline of a network's conv layers, with trajectories as the batch grows.

    python -m analytic.roofline vgg16 --gpu h100 --batch 1,8,64 [-o roofline.png] [--json FILE]
           [--layout nhwc|nchw] [--dtype fp32|fp16] [--tile 128x128x8] [--factors FILE]

Prints, per layer and batch: FLOPs, arithmetic intensity at L1, L2 and DRAM (FLOP per byte moved at
that level), predicted time and the bounding resource. With ``-o`` draws the compute ceiling and the
L1, L2 and DRAM bandwidth ceilings, each layer's point at each level (marker per level) and the
trajectory of each layer as the batch grows (lines joining its points of increasing batch).
"""
from __future__ import annotations

import math
import sys

from . import _cli
from .model import predict_network

__all__ = ["create_parser", "check_arguments", "run", "main", "roofline_data"]

LEVELS = (("l1", "L1", "o"), ("l2", "L2", "s"), ("dram", "DRAM", "^"))


def create_parser():
    p = _cli.Parser(prog="python -m analytic.roofline",
                    description="Hierarchical roofline (L1, L2, DRAM) of a CNN's conv layers.")
    p.add_argument("network", help="network name (traces.NETWORKS), .json layer file or .onnx model")
    p.add_argument("--gpu", default="v100", help="GPU name (default v100)")
    p.add_argument("--batch", default="1", help="comma-separated batch sizes (default 1)")
    p.add_argument("-o", "--output", default=None, help="write the plot (PNG) here")
    p.add_argument("--json", default=None, help="write the table as JSON here")
    _cli.add_kernel_arguments(p)
    return p


def check_arguments(args):
    args.batches = _cli.parse_int_list(args.batch, "--batch")
    args.gpu_obj = _cli.resolve_gpu(args.gpu)
    args.kernel = _cli.resolve_kernel(args)
    args.factors_obj = _cli.resolve_factors(args.factors)
    _cli.check_png_output(args.output, "-o/--output")
    _cli.check_output_path(args.json, "--json")
    args.layers = {b: _cli.checked_layers(args.network, b, args.kernel) for b in args.batches}


def ceilings(gpu, kernel):
    """Peak FLOP/s and bandwidths (B/s) used by the timing model."""
    if kernel.dtype == "fp16":
        peak = gpu.tensor_tflops * 1e12 if gpu.tensor_tflops > 0 else 2 * gpu.fp32_tflops * 1e12
    else:
        peak = gpu.fp32_tflops * 1e12
    return {"compute": peak, "l1": gpu.l1_gbps * 1e9, "l2": gpu.l2_gbps * 1e9, "dram": gpu.dram_gbps * 1e9}


def roofline_data(args) -> dict:
    rows = []
    for batch in args.batches:
        preds = predict_network(args.layers[batch], args.gpu_obj, args.kernel, args.factors_obj)
        for layer, pred in zip(args.layers[batch], preds):
            rows.append({"layer": layer.name, "batch": batch, "flops": pred["flops"],
                         "ai_l1": pred["ai_l1"], "ai_l2": pred["ai_l2"], "ai_dram": pred["ai_dram"],
                         "time_s": pred["time_s"], "bound": pred["bound"],
                         "time_compute_s": pred["time_compute_s"], "time_l1_s": pred["time_l1_s"],
                         "time_l2_s": pred["time_l2_s"], "time_dram_s": pred["time_dram_s"],
                         "gflops_per_s": pred["flops"] / pred["time_s"] / 1e9 if pred["time_s"] else 0.0})
    return {"network": args.network, "gpu": args.gpu_obj.name, "kernel": args.kernel.as_dict(),
            "batches": args.batches, "ceilings": ceilings(args.gpu_obj, args.kernel), "rows": rows}


def print_table(data, out=None):
    out = sys.stdout if out is None else out
    head = (f"{'layer':24s} {'batch':>5s} {'GFLOP':>9s} {'AI_L1':>7s} {'AI_L2':>7s} {'AI_DRAM':>8s} "
            f"{'time_us':>9s} {'GFLOP/s':>9s} bound")
    print(f"# {data['network']} on {data['gpu']} (AI in FLOP/byte)", file=out)
    print(head, file=out)
    for row in data["rows"]:
        print(f"{row['layer'][:24]:24s} {row['batch']:5d} {row['flops'] / 1e9:9.3f} {row['ai_l1']:7.2f} "
              f"{row['ai_l2']:7.2f} {row['ai_dram']:8.2f} {row['time_s'] * 1e6:9.1f} "
              f"{row['gflops_per_s']:9.0f} {row['bound']}", file=out)
    for batch in data["batches"]:
        total = sum(r["time_s"] for r in data["rows"] if r["batch"] == batch)
        flops = sum(r["flops"] for r in data["rows"] if r["batch"] == batch)
        print(f"# batch {batch}: total {total * 1e3:.3f} ms, {flops / total / 1e12:.2f} TFLOP/s", file=out)


def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ceil = data["ceilings"]
    fig, ax = plt.subplots(figsize=(9, 6))
    ais = [r[f"ai_{lv}"] for r in data["rows"] for lv, _, _ in LEVELS if math.isfinite(r[f"ai_{lv}"])]
    lo = max(1e-2, min(ais) / 2) if ais else 1e-2
    hi = max(ais) * 2 if ais else 1e3
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    colors = {"l1": "tab:blue", "l2": "tab:green", "dram": "tab:red"}
    for lv, label, _ in LEVELS:
        ax.plot(xs, [min(ceil["compute"], ceil[lv] * x) / 1e9 for x in xs], color=colors[lv], lw=1.5,
                label=f"{label} {ceil[lv] / 1e9:.0f} GB/s")
    ax.axhline(ceil["compute"] / 1e9, color="k", lw=1.5, ls="--", label=f"compute {ceil['compute'] / 1e12:.1f} TFLOP/s")
    layers = list(dict.fromkeys(r["layer"] for r in data["rows"]))
    cmap = plt.get_cmap("viridis", max(2, len(layers)))
    for i, name in enumerate(layers):
        pts = sorted((r for r in data["rows"] if r["layer"] == name), key=lambda r: r["batch"])
        for lv, _, marker in LEVELS:
            x = [r[f"ai_{lv}"] for r in pts if math.isfinite(r[f"ai_{lv}"])]
            y = [r["gflops_per_s"] for r in pts if math.isfinite(r[f"ai_{lv}"])]
            ax.plot(x, y, marker=marker, color=cmap(i), ms=4, lw=0.8, alpha=0.8)
    for lv, label, marker in LEVELS:
        ax.plot([], [], marker=marker, color="gray", ls="", label=f"layer @ {label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("predicted performance (GFLOP/s)")
    ax.set_title(f"{data['network']} on {data['gpu']}: hierarchical roofline, batch "
                 f"{','.join(str(b) for b in data['batches'])}")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    _cli.atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    plt.close(fig)


def run(args) -> int:
    data = roofline_data(args)
    doc = dict(data, rows=[{k: _cli.clean_json(v) for k, v in r.items()} for r in data["rows"]])
    _cli.write_outputs(args.json, doc, args.output, plot, data)
    print_table(data)
    return 0


def main(argv=None) -> int:
    return _cli.run_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
