"""The accuracy table of DESIGN section 8: model vs simulation over networks x GPUs x batch sizes.

    python -m validation.accuracy vgg16 resnet50 alexnet googlenet --gpu v100 a100 h100 --batch 1 32 \\
        --cache-dir .simcache --markdown accuracy.md

For every (network, GPU, batch) group and every metric: the mean and worst absolute relative error
|pred - sim| / sim over the group's conv layers, and whether DESIGN section 8's target holds:

* L1 load requests and sectors: exact (error 0) on every layer whose C x element size is a multiple of
  a 32-byte sector (nhwc), within 1 % on the others;
* L2 read sectors: mean <= 5 %, worst <= 15 %;
* DRAM read sectors: mean <= 10 %, worst <= 25 %.

DRAM write sectors are reported without a target (layers whose simulated count is 0, because their
output is still dirty in L2 at the end, are left out of the mean). Simulations are shared with
``validation.compare`` / ``validation.calibrate`` through ``--cache-dir``.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from simcore import metrics as M

from .calibrate import _cases, simulate_cases
from .common import (ArgumentParser, CLIError, add_kernel_arguments, atomic_write, check_output_path,
                     cli_main, kernel_from_args, op_kernels, parse_positive_int, resolve_gpu, versions, write_text)
from traces.executor import add_executor_arguments, resolve_executor

__all__ = ["TARGETS", "create_parser", "check_arguments", "run", "main", "accuracy_rows"]

#: metric label -> (key or keys summed, target mean, target worst); None: exact-or-1% rule / no target.
#: The L1 rows count loads of every kind (``ld``, and the ``cp.async`` of tensor-op kernels).
TARGETS = {
    "L1 ld requests": ((M.L1_LD_REQUESTS, M.L1_LDGSTS_ACCESS_REQUESTS, M.L1_LDGSTS_BYPASS_REQUESTS), None, None),
    "L1 ld sectors": ((M.L1_LD_SECTORS, M.L1_LDGSTS_ACCESS_SECTORS, M.L1_LDGSTS_BYPASS_SECTORS), None, None),
    "L2 rd sectors": (M.L2_RD_SECTORS, 0.05, 0.15),
    "DRAM rd sectors": (M.DRAM_RD_SECTORS, 0.10, 0.25),
    "DRAM wr sectors": (M.DRAM_WR_SECTORS, None, None),
}
L1_LABELS = ("L1 ld requests", "L1 ld sectors")


def _exact_l1(layer, kernel) -> bool:
    """DESIGN section 8's exact-L1 rule: nhwc, and every tensor the pass reads along its channels
    (fprop: x's C; dgrad and wgrad: dy's K too) a whole number of sectors per pixel."""
    eb = kernel.elem_bytes
    if kernel.layout != "nhwc" or (layer.c * eb) % 32:
        return False
    return getattr(kernel, "op", "fprop") == "fprop" or (layer.k * eb) % 32 == 0


def accuracy_rows(cases, simulated, predicted, kernel=None) -> list:
    """One row per (network, GPU, batch, op) group: errors per metric and whether targets hold.
    ``cases``: ``(label, layer, gpu[, kernel])`` (without a kernel: ``kernel``)."""
    groups = {}
    for case, sim, pred in zip(cases, simulated, predicted):
        label, layer, gpu = case[:3]
        case_kernel = case[3] if len(case) > 3 else kernel
        network = label.split("/")[0]
        groups.setdefault((network, gpu.name, layer.n, case_kernel.op), []).append((layer, sim, pred, case_kernel))
    rows = []
    for (network, gpu_name, batch, op), items in groups.items():
        row = {"network": network, "gpu": gpu_name, "batch": batch, "op": op, "layers": len(items), "metrics": {}}
        for name, (key, mean_target, worst_target) in TARGETS.items():
            errors, l1_ok = [], True
            for layer, sim, pred, case_kernel in items:
                keys = key if isinstance(key, tuple) else (key,)
                s, p = sum(float(sim.get(k, 0)) for k in keys), sum(float(pred.get(k, 0)) for k in keys)
                if s == 0:
                    continue
                err = abs(p - s) / s
                errors.append(err)
                if name in L1_LABELS:
                    l1_ok &= (round(p) == s) if _exact_l1(layer, case_kernel) else err <= 0.01
            mean = float(np.mean(errors)) if errors else None
            worst = float(np.max(errors)) if errors else None
            if name in L1_LABELS:
                ok = l1_ok
            elif mean_target is None:
                ok = None
            else:
                ok = mean is not None and mean <= mean_target and worst <= worst_target
            row["metrics"][name] = {"mean": mean, "worst": worst, "ok": ok, "layers": len(errors)}
        rows.append(row)
    return rows


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown_table(rows) -> str:
    head = "| network | GPU | batch | op | " + " | ".join(f"{n} mean / worst" for n in TARGETS) + " |"
    lines = [head, "|" + " --- |" * (4 + len(TARGETS))]
    for row in rows:
        cells = []
        for name in TARGETS:
            m = row["metrics"][name]
            mark = "" if m["ok"] is None else (" ✓" if m["ok"] else " ✗")
            cells.append(f"{_pct(m['mean'])} / {_pct(m['worst'])}{mark}")
        lines.append(f"| {row['network']} | {row['gpu']} | {row['batch']} | {row.get('op', 'fprop')} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def create_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m validation.accuracy",
        description="Model vs simulation error per network, GPU and batch size, against DESIGN section 8's "
                    "targets (L1 exact, L2 reads <= 5%% mean / 15%% worst, DRAM reads <= 10%% / 25%%).")
    parser.add_argument("networks", nargs="*", metavar="NETWORK",
                        help="networks or layer JSON files (not with --random)")
    parser.add_argument("--gpu", nargs="+", default=["v100", "a100", "h100"], metavar="GPU")
    parser.add_argument("--batch", nargs="+", type=parse_positive_int, default=[1, 32], metavar="N")
    add_kernel_arguments(parser)
    parser.add_argument("--factors", metavar="FILE", help="reuse factors file (default: the model's defaults)")
    parser.add_argument("--cache-dir", metavar="DIR", help="simulation cache shared with compare/calibrate")
    add_executor_arguments(parser)
    parser.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    rnd = parser.add_argument_group("random cases (validation.random_cases; the kernel options above are "
                                    "ignored: each case draws its own kernel and GPU)")
    rnd.add_argument("--random", type=parse_positive_int, metavar="N",
                     help="instead of networks: N random (layer, kernel, GPU) cases")
    rnd.add_argument("--seed", type=int, default=1, metavar="S", help="seed of the random cases (default 1)")
    rnd.add_argument("--case", type=int, metavar="I",
                     help="only case I of the sequence (reproduces one case of a sweep)")
    rnd.add_argument("--max-sectors", type=parse_positive_int, default=None, metavar="X",
                     help="cap on a case's simulated L1 sectors (default: validation.random_cases's)")
    rnd.add_argument("--worst", type=int, default=10, metavar="K", help="worst cases to list (default 10)")
    return parser


def check_arguments(args) -> None:
    import os

    from analytic import ReuseFactors
    args.kernel = kernel_from_args(args)
    args.passes = op_kernels(args, args.kernel)
    resolve_executor(args)
    if args.random is not None:
        if args.networks:
            raise CLIError("give either networks or --random N, not both")
        args.cases = _random_cases(args)
    elif not args.networks:
        raise CLIError("give at least one network (or layer JSON file), or --random N")
    else:
        if args.case is not None:
            raise CLIError("--case needs --random")
        args.gpus = [resolve_gpu(name) for name in args.gpu]
        args.cases = _cases(args.networks, args.gpus, args.batch, args.passes)
    args.factors_obj = ReuseFactors.load(args.factors) if args.factors else None
    if args.cache_dir and not os.path.isdir(args.cache_dir):
        raise CLIError(f"--cache-dir {args.cache_dir}: not a directory")
    for option in ("markdown", "json"):
        if getattr(args, option):
            check_output_path(f"--{option}", getattr(args, option))


def _random_cases(args) -> list:
    from .random_cases import DEFAULT_MAX_SECTORS, random_case
    if args.seed < 0:
        raise CLIError(f"--seed must be a non-negative integer, got {args.seed}")
    cap = args.max_sectors or DEFAULT_MAX_SECTORS
    if args.case is not None:
        if not 0 <= args.case < args.random:
            raise CLIError(f"--case {args.case}: must be in [0, {args.random}) (the --random count)")
        indices = [args.case]
    else:
        indices = range(args.random)
    return [random_case(args.seed, i, cap) for i in indices]


def run_random(args) -> int:
    """--random: simulate and predict every case; print per-metric statistics and the worst cases."""
    from analytic import l1_exact, predict_layer
    from .random_sweep import format_random_report, random_stats
    cases = args.cases
    simulated = simulate_cases([(c.label, c.layer, c.gpu, c.kernel) for c in cases], None, jobs=args.jobs,
                               scheduler=args.scheduler, cache_dir=args.cache_dir, quiet=args.quiet)
    predicted = [predict_layer(c.layer, c.gpu, c.kernel, args.factors_obj) for c in cases]
    exact = [l1_exact(c.layer, c.kernel) for c in cases]
    stats = random_stats(cases, simulated, predicted, exact)
    title = (f"{len(cases)} random cases, seed {args.seed}" if args.case is None
             else f"case {args.case} of seed {args.seed}: {cases[0].describe()}")
    title += f", factors: {args.factors or 'model defaults'}"
    text = format_random_report(stats, worst=args.worst, title=title, factors=args.factors,
                                max_sectors=args.max_sectors)
    sys.stdout.write(text)
    if args.markdown:
        write_text(args.markdown, text)
    if args.json:
        def write_json(tmp):
            doc = {"format": "deltasim-accuracy-random", "version": 1, "versions": versions(),
                   "seed": args.seed, "factors": args.factors,
                   "metrics": {k: {kk: vv for kk, vv in v.items()} for k, v in stats["metrics"].items()},
                   "cases": [{"index": r["case"].index, "description": r["case"].describe(),
                              "command": r["case"].command(args.factors, args.max_sectors), "layer": r["case"].layer.as_dict(),
                              "gpu": r["case"].gpu.name, "gpu_change": r["case"].gpu_change,
                              "kernel": r["case"].kernel.as_dict(), "errors": r["errors"],
                              "simulated": r["sim"], "predicted": {k: v for k, v in r["pred"].items()}}
                             for r in stats["cases"]]}
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=1, default=str)
        atomic_write(args.json, write_json)
    return 0


def run(args) -> int:
    from analytic import predict_layer
    if args.random is not None:
        return run_random(args)
    simulated = simulate_cases(args.cases, args.kernel, jobs=args.jobs, scheduler=args.scheduler,
                               cache_dir=args.cache_dir, quiet=args.quiet)
    predicted = [predict_layer(layer, gpu, kernel, args.factors_obj) for _, layer, gpu, kernel in args.cases]
    rows = accuracy_rows(args.cases, simulated, predicted)
    table = markdown_table(rows)
    sys.stdout.write(table)
    if args.markdown:
        write_text(args.markdown, table)
    if args.json:
        def write_json(tmp):
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"format": "deltasim-accuracy", "version": 1, "versions": versions(),
                           "kernel": args.kernel.as_dict(), "op": args.op, "factors": args.factors, "rows": rows}, fh, indent=1)
        atomic_write(args.json, write_json)
    return 0


def main(argv=None) -> int:
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
