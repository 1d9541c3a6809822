"""Hierarchical roofline of a network's conv layers, and its trajectories as the batch or the SM count grows.

    python -m analytic.roofline vgg16 --gpu h100 --batch 1,8,64 [-o roofline.png] [--json FILE] [--top 8]
    python -m analytic.roofline resnet50 --gpu a100 --vary sms [--sms 27,54,108,216] [--batch 1] -o sms.png
           [--layout nhwc|nchw] [--dtype fp32|fp16] [--tile 128x128x8] [--factors FILE]

``--op train`` puts each layer's training step (fprop + dgrad + wgrad: FLOPs, bytes and times summed)
on the roofline. Prints, per layer and value of the varied parameter: FLOPs, arithmetic intensity at L1, L2 and DRAM
(FLOP per byte moved at that level), predicted time, performance and the bounding resource. ``--vary
batch`` (default) takes the batch sizes of ``--batch`` on the GPU as it is; ``--vary sms`` takes the SM
counts of ``--sms`` (default: a quarter, half, once and twice the GPU's) at one batch size, each a GPU
made by ``analytic.scaling.scale_gpu(gpu, {"sms": count / gpu.sms})``, as ``analytic.scaling --scale
sms=X`` makes it (more SMs of the same design). ``-o`` draws the trajectories
(``analytic.plots.roofline_figure``); ``--json`` writes every point (``rows``) and the ceilings of each GPU.
"""
from __future__ import annotations

import sys

from . import _cli
from ._common import compute_peak
from .plots import roofline_figure
from .scaling import scale_gpu

__all__ = ["create_parser", "check_arguments", "run", "main", "roofline_data", "ceilings", "DEFAULT_SMS_FACTORS"]

#: SM counts of ``--vary sms`` without ``--sms``, as multiples of the GPU's.
DEFAULT_SMS_FACTORS = (0.25, 0.5, 1.0, 2.0)


def create_parser():
    p = _cli.Parser(prog="python -m analytic.roofline",
                    description="Hierarchical roofline (L1, L2, DRAM) of a CNN's conv layers, and the trajectory "
                                "of each layer as the batch size or the GPU's SM count grows.",
                    epilog="examples: vgg16 --gpu h100 --batch 1,8,64 -o roofline.png;  resnet50 --gpu a100 "
                           "--vary sms --sms 27,54,108,216 --batch 32 -o sms.png (a100s with 27 ... 216 SMs, each "
                           "made as 'analytic.scaling --scale sms=X' makes it). Exit status 2 on bad input (one 'error: ...' line, no output file).")
    p.add_argument("network", help="network name (traces.NETWORKS), .json layer file or .onnx model")
    p.add_argument("--gpu", default="v100", help="GPU name (default v100)")
    p.add_argument("--vary", default="batch", choices=("batch", "sms"),
                   help="the parameter along the trajectories: batch (the sizes of --batch, default) or sms "
                        "(the SM counts of --sms)")
    p.add_argument("--batch", default="1", metavar="B[,B...]",
                   help="batch sizes, e.g. 1,8,64 (default 1); one size with --vary sms")
    p.add_argument("--sms", default=None, metavar="N[,N...]",
                   help="SM counts, e.g. 33,66,132,264 for an h100 (--vary sms; default a quarter, half, once "
                        "and twice the GPU's own); one count with --vary batch (default the GPU's own)")
    p.add_argument("--top", type=int, default=8, metavar="N",
                   help="colour and name the N layers with the largest predicted time, summed over the values "
                        "(default 8); the others are drawn thin and grey")
    p.add_argument("-o", "--output", default=None, metavar="FILE.png", help="write the plot (PNG) here")
    p.add_argument("--json", default=None, metavar="FILE", help="write every point and the ceilings as JSON here")
    _cli.add_kernel_arguments(p)
    return p


def _values(args):
    """(batches, sm counts) after the checks: the varied one ascending, the other of one value."""
    gpu = args.gpu_obj
    batches = _cli.parse_int_list(args.batch, "--batch")
    if args.sms is not None:
        sms = _cli.parse_int_list(args.sms, "--sms")
    elif args.vary == "sms":
        sms = [max(1, round(gpu.sms * f)) for f in DEFAULT_SMS_FACTORS]
    else:
        sms = [gpu.sms]
    varied, fixed = (batches, ("--sms", sms)) if args.vary == "batch" else (sms, ("--batch", batches))
    if len(fixed[1]) != 1:
        raise _cli.CliError(f"{fixed[0]} takes one value with --vary {args.vary}, got {','.join(map(str, fixed[1]))}")
    if len(set(varied)) != len(varied):
        raise _cli.CliError(f"--{args.vary}: a value is given twice in {','.join(map(str, varied))}")
    return sorted(batches), sorted(sms)


def check_arguments(args):
    args.gpu_obj = _cli.resolve_gpu(args.gpu)
    args.batches, args.sm_counts = _values(args)
    if args.top < 1:
        raise _cli.CliError(f"--top must be a positive integer, got {args.top}")
    args.kernel = _cli.resolve_kernel(args)
    args.factors_obj = _cli.resolve_factors(args.factors)
    _cli.check_png_output(args.output, "-o/--output")
    _cli.check_output_path(args.json, "--json")
    args.gpus = {}
    for count in args.sm_counts:
        gpu = args.gpu_obj if count == args.gpu_obj.sms else scale_gpu(args.gpu_obj, {"sms": count / args.gpu_obj.sms})
        if gpu.sms != count:
            raise _cli.CliError(f"--sms {count}: the scaled {args.gpu_obj.name} has {gpu.sms} SMs")
        args.gpus[count] = gpu
    args.layers = {b: _cli.checked_layers(args.network, b, args.kernel, args.op) for b in args.batches}


def ceilings(gpu, kernel):
    """Peak FLOP/s and bandwidths (B/s) used by the timing model."""
    return {"compute": compute_peak(gpu, kernel), "l1": gpu.l1_gbps * 1e9, "l2": gpu.l2_gbps * 1e9,
            "dram": gpu.dram_gbps * 1e9}


def roofline_data(args) -> dict:
    """Every (layer, value) point: the model's prediction on the GPU and batch of that value."""
    cases = [(b, args.sm_counts[0]) for b in args.batches] if args.vary == "batch" else \
        [(args.batches[0], n) for n in args.sm_counts]
    rows, ceiling_list = [], []
    for batch, sms in cases:
        value = batch if args.vary == "batch" else sms
        gpu = args.gpus[sms]
        ceiling_list.append(dict(value=value, sms=sms, **ceilings(gpu, args.kernel)))
        preds = _cli.predict_layers(args, args.layers[batch], gpu)
        for index, (layer, pred) in enumerate(zip(args.layers[batch], preds)):
            rows.append({"index": index, "layer": layer.name, "value": value, "batch": batch, "sms": sms,
                         "flops": pred["flops"], "ai_l1": pred["ai_l1"], "ai_l2": pred["ai_l2"],
                         "ai_dram": pred["ai_dram"], "time_s": pred["time_s"], "bound": pred["bound"],
                         "time_compute_s": pred["time_compute_s"], "time_l1_s": pred["time_l1_s"],
                         "time_l2_s": pred["time_l2_s"], "time_dram_s": pred["time_dram_s"],
                         "gflops_per_s": pred["flops"] / pred["time_s"] / 1e9 if pred["time_s"] else 0.0})
    return {"network": args.network, "gpu": args.gpu_obj.name, "kernel": args.kernel.as_dict(), "op": args.op,
            "vary": args.vary, "values": [c["value"] for c in ceiling_list], "batch": args.batches,
            "sms": args.sm_counts, "ceilings": ceiling_list, "rows": rows}


def print_table(data, out=None):
    out = sys.stdout if out is None else out
    head = (f"{'layer':24s} {'batch':>5s} {'SMs':>4s} {'GFLOP':>9s} {'AI_L1':>7s} {'AI_L2':>7s} {'AI_DRAM':>8s} "
            f"{'time_us':>9s} {'GFLOP/s':>9s} bound")
    op = data.get("op", "fprop")
    what = "training step (fprop + dgrad + wgrad)" if op == "train" else op
    print(f"# {data['network']} {what} on {data['gpu']} (AI in FLOP/byte)", file=out)
    print(head, file=out)
    for row in data["rows"]:
        print(f"{row['layer'][:24]:24s} {row['batch']:5d} {row['sms']:4d} {row['flops'] / 1e9:9.3f} "
              f"{row['ai_l1']:7.2f} {row['ai_l2']:7.2f} {row['ai_dram']:8.2f} {row['time_s'] * 1e6:9.1f} "
              f"{row['gflops_per_s']:9.0f} {row['bound']}", file=out)
    for value in data["values"]:
        total = sum(r["time_s"] for r in data["rows"] if r["value"] == value)
        flops = sum(r["flops"] for r in data["rows"] if r["value"] == value)
        print(f"# {'batch' if data['vary'] == 'batch' else 'SMs'} {value}: total {total * 1e3:.3f} ms, "
              f"{flops / total / 1e12:.2f} TFLOP/s", file=out)


def run(args) -> int:
    data = roofline_data(args)
    doc = dict(data, rows=[{k: _cli.clean_json(v) for k, v in r.items()} for r in data["rows"]])
    _cli.write_outputs(args.json, doc, args.output, lambda: roofline_figure(data, top=args.top))
    print_table(data)
    return 0


def main(argv=None) -> int:
    return _cli.run_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
