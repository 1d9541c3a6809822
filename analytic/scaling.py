"""Resource-scaling study: predicted speedup of each layer and of the network when GPU resources scale.

    python -m analytic.scaling vgg16 --gpu v100 [--batch 1] --scale sms=2 --scale dram_gbps=1.5 \
           --scale l2_bytes=2,l2_gbps=1.5 [--json FILE] [--plot FILE.png] [--layout/--dtype/--tile]

Each ``--scale`` is one scenario: a set of GPU fields multiplied together (`simcore.scale_gpu`,
which keeps the geometry consistent: a new L2 capacity or slice count keeps the sets per slice and
scales the ways, so any factor works, e.g. ``l2_bytes=1.5``; the L2 chosen is printed). Integer
fields are rounded; a field that is unknown, not numeric, or gives an invalid GPU is an error naming
it. Scaling ``sms`` or ``clock_mhz`` scales the FP32 and tensor peaks with them (same SM design)
unless those are scaled explicitly. Speedup = predicted time on the base GPU / predicted time on the scaled GPU (the network:
sum of layer times). ``--op train`` answers it for a training step: each layer's time is the sum of its
fprop, dgrad and wgrad (`analytic.training`), its bound the one carrying most of that time.

``--check`` also simulates every layer on the base GPU and on each scaled GPU (`traces.simcache`:
deduplicated, kept in ``--cache-dir``, run on ``--jobs`` local workers or a ``--scheduler``) and puts
the simulated traffic through the same time model (`analytic.layer_time`), so beside each predicted
speedup stands the speedup the simulated traffic gives: where they differ, the model's traffic is
what moved the answer.
"""
from __future__ import annotations

import dataclasses
import sys

from simcore import describe_l2

from . import _cli
from .model import layer_time
from .plots import scaling_figure

__all__ = ["create_parser", "check_arguments", "run", "main", "parse_scale", "scale_gpu"]

_NOT_SCALABLE = ("name", "smem_carveouts", "l2_index")


def create_parser():
    p = _cli.Parser(prog="python -m analytic.scaling",
                    description="Predicted speedup of a CNN's conv layers when GPU resources scale.")
    p.add_argument("network", help="network name (traces.NETWORKS), .json layer file or .onnx model")
    p.add_argument("--gpu", default="v100", help="base GPU (default v100)")
    p.add_argument("--batch", type=str, default="1", help="batch size (default 1)")
    p.add_argument("--scale", action="append", default=[], metavar="FIELD=X[,FIELD=Y]",
                   help="one scenario: GPU fields scaled together (repeatable)")
    p.add_argument("--json", default=None, help="write the results as JSON here")
    p.add_argument("--plot", default=None,
                   help="draw each layer's and the network's speedup per scenario, with bounds (PNG)")
    check = p.add_argument_group("checking the answer by simulation")
    check.add_argument("--check", action="store_true",
                       help="also simulate the base and every scaled GPU and print the speedup the simulated "
                            "traffic gives beside each predicted one")
    check.add_argument("--cache-dir", metavar="DIR", help="keep simulations here (shared with validation's CLIs)")
    check.add_argument("--quiet", action="store_true", help="no progress bar")
    from traces.executor import add_executor_arguments
    add_executor_arguments(p)
    _cli.add_kernel_arguments(p)
    return p


def parse_scale(text: str) -> dict:
    """'l2_bytes=2,l2_gbps=1.5' -> {'l2_bytes': 2.0, 'l2_gbps': 1.5}."""
    from simcore.gpus import GPU
    names = {f.name for f in dataclasses.fields(GPU)}
    out = {}
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise _cli.CliError(f"--scale item must look like FIELD=FACTOR, got {part!r}")
        field, value = (x.strip() for x in part.split("=", 1))
        if field not in names:
            raise _cli.CliError(f"--scale: unknown GPU field {field!r}")
        if field in _NOT_SCALABLE:
            raise _cli.CliError(f"--scale: GPU field {field!r} is not numeric and cannot be scaled")
        try:
            factor = float(value)
        except ValueError:
            raise _cli.CliError(f"--scale: factor of {field} must be a number, got {value!r}") from None
        if not factor > 0 or factor != factor or factor == float("inf"):
            raise _cli.CliError(f"--scale: factor of {field} must be positive and finite, got {value!r}")
        if field in out:
            raise _cli.CliError(f"--scale: field {field!r} given twice in {text!r}")
        out[field] = factor
    if not out:
        raise _cli.CliError(f"--scale: empty scenario {text!r}")
    return out


def scale_gpu(gpu, factors: dict):
    """A new GPU with each field multiplied by its factor, geometry kept consistent
    (`simcore.scale_gpu`: the L2 keeps its sets per slice and scales its ways; SMs and clock scale
    the compute peaks); errors name the field."""
    import simcore
    try:
        return simcore.scale_gpu(gpu, factors)
    except (ValueError, TypeError) as err:
        raise _cli.CliError(f"--scale {','.join(f'{k}={v:g}' for k, v in factors.items())}: "
                            f"invalid GPU: {err}") from None


def check_arguments(args):
    args.batches = _cli.parse_int_list(args.batch, "--batch")
    if len(args.batches) != 1:
        raise _cli.CliError(f"--batch takes one batch size, got {args.batch!r}")
    args.gpu_obj = _cli.resolve_gpu(args.gpu)
    args.kernel = _cli.resolve_kernel(args)
    args.factors_obj = _cli.resolve_factors(args.factors)
    if not args.scale:
        raise _cli.CliError("give at least one --scale FIELD=FACTOR scenario")
    args.scenarios = []
    for text in args.scale:
        factors = parse_scale(text)
        scaled = scale_gpu(args.gpu_obj, factors)
        try:
            args.kernel.resident_ctas(scaled)
            args.kernel.l1_config(scaled)
        except ValueError as err:
            raise _cli.CliError(f"--scale {text}: kernel does not fit the scaled GPU: {err}") from None
        args.scenarios.append((text, factors, scaled))
    _cli.check_output_path(args.json, "--json")
    _cli.check_png_output(args.plot, "--plot")
    args.layers = _cli.checked_layers(args.network, args.batches[0], args.kernel, args.op)
    if args.cache_dir and not args.check:
        raise _cli.CliError("--cache-dir needs --check")
    if args.cache_dir:
        import os
        if not os.path.isdir(args.cache_dir):
            raise _cli.CliError(f"--cache-dir {args.cache_dir}: not a directory")
    from traces.executor import resolve_executor
    resolve_executor(args)


def simulated_times(args) -> list:
    """[base GPU, each scenario's GPU] -> per layer, `layer_time` of the simulated traffic (``--op
    train``: `analytic.training.step_total` of the three passes' `layer_time`)."""
    from traces.simcache import simulate_cases
    from .training import step_total
    gpus = [args.gpu_obj] + [gpu for _text, _factors, gpu in args.scenarios]
    kernels = _cli.pass_kernels_of(args, args.kernel)
    cases = [(f"{layer.name}@{i}/{k.op}", layer, gpu, k) for i, gpu in enumerate(gpus) for layer in args.layers
             for k in kernels]
    sims = iter(simulate_cases(cases, None, jobs=args.jobs, scheduler=args.scheduler,
                               cache_dir=args.cache_dir, quiet=args.quiet))
    out = []
    for gpu in gpus:
        rows = []
        for layer in args.layers:
            times = {k.op: layer_time(layer, gpu, k, next(sims)) for k in kernels}
            rows.append(times[kernels[0].op] if len(kernels) == 1 else step_total(times))
        out.append(rows)
    return out


def scaling_data(args) -> dict:
    base = _cli.predict_layers(args, args.layers, args.gpu_obj)
    base_total = sum(p["time_s"] for p in base)
    sim = simulated_times(args) if getattr(args, "check", False) else None
    scenarios = []
    for i, (text, factors, gpu) in enumerate(args.scenarios):
        preds = _cli.predict_layers(args, args.layers, gpu)
        total = sum(p["time_s"] for p in preds)
        rows = [{"layer": l.name, "time_s": p["time_s"], "bound": p["bound"],
                 "speedup": b["time_s"] / p["time_s"] if p["time_s"] else 0.0}
                for l, p, b in zip(args.layers, preds, base)]
        scenario = {"scale": text, "factors": factors, "l2": describe_l2(gpu), "layers": rows,
                    "total_time_s": total, "speedup": base_total / total if total else 0.0}
        if sim is not None:
            for row, t0, t1 in zip(rows, sim[0], sim[i + 1]):
                row["speedup_simulated"] = t0["time_s"] / t1["time_s"] if t1["time_s"] else 0.0
                row["bound_simulated"] = t1["bound"]
            sim_total = sum(t["time_s"] for t in sim[i + 1])
            scenario["speedup_simulated"] = sum(t["time_s"] for t in sim[0]) / sim_total if sim_total else 0.0
        scenarios.append(scenario)
    data = {"network": args.network, "gpu": args.gpu_obj.name, "batch": args.batches[0], "op": args.op,
            "kernel": args.kernel.as_dict(), "l2": describe_l2(args.gpu_obj),
            "base": [{"layer": l.name, "time_s": p["time_s"], "bound": p["bound"]}
                     for l, p in zip(args.layers, base)],
            "base_total_time_s": base_total, "scenarios": scenarios, "checked": sim is not None}
    if sim is not None:
        for row, t0 in zip(data["base"], sim[0]):
            row["time_s_simulated"] = t0["time_s"]
            row["bound_simulated"] = t0["bound"]
    return data


def print_table(data, out=None):
    out = sys.stdout if out is None else out
    checked = data.get("checked")
    names = [s["scale"] for s in data["scenarios"]]
    what = "predicted (simulated) speedup" if checked else "predicted speedup"
    op = data.get("op", "fprop")
    what += " of a training step (fprop + dgrad + wgrad)" if op == "train" else f" ({op})"
    print(f"# {data['network']} batch {data['batch']} on {data['gpu']} ({data['l2']}): {what} per scenario",
          file=out)
    for s in data["scenarios"]:
        if "l2_bytes" in s["factors"] or "l2_slices" in s["factors"] or "l2_ways" in s["factors"]:
            print(f"#   {s['scale']}: {s['l2']}", file=out)
    cell_w = 22 if checked else 14
    width = max(cell_w, *(len(n) for n in names))
    print(f"{'layer':24s} {'base_us':>9s} {'bound':>7s} " + " ".join(f"{n:>{width}s}" for n in names), file=out)

    def cell(pred, bound, simulated):
        text = f"{pred:.3f}x"
        if simulated is not None:
            text += f" ({simulated:.3f}x)"
        return f"{text} {bound:>7s}".rjust(width)
    for i, row in enumerate(data["base"]):
        cells = " ".join(cell(s["layers"][i]["speedup"], s["layers"][i]["bound"],
                              s["layers"][i].get("speedup_simulated")) for s in data["scenarios"])
        print(f"{row['layer'][:24]:24s} {row['time_s'] * 1e6:9.1f} {row['bound']:>7s} {cells}", file=out)
    cells = " ".join(cell(s["speedup"], "", s.get("speedup_simulated")) for s in data["scenarios"])
    print(f"{'network':24s} {data['base_total_time_s'] * 1e6:9.1f} {'':>7s} {cells}", file=out)
    if checked:
        worst = max(((abs(l["speedup"] - l["speedup_simulated"]) / l["speedup_simulated"], l["layer"], s["scale"])
                     for s in data["scenarios"] for l in s["layers"] if l.get("speedup_simulated")),
                    default=None)
        if worst:
            print(f"# largest difference between predicted and simulated speedup: {100 * worst[0]:.1f}% "
                  f"({worst[1]}, {worst[2]})", file=out)


def run(args) -> int:
    data = scaling_data(args)
    _cli.write_outputs(args.json, data, args.plot, lambda: scaling_figure(data))
    print_table(data)
    return 0


def main(argv=None) -> int:
    return _cli.run_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
