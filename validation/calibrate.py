"""Fit the analytic model's reuse factors against exact cache simulation.

    python -m validation.calibrate vgg16 resnet50 --gpu v100 a100 --batch 1 32 --holdout alexnet -o factors.json

Every layer of the fit set (networks x GPUs x batch sizes) is simulated once (identical layers are
simulated once per run; ``--cache-dir`` keeps simulated metrics between runs, keyed by layer, GPU,
kernel and package version). The fields of ``analytic.ReuseFactors`` that have bounds in
``ReuseFactors.BOUNDS`` are then fitted to minimise the mean absolute log error
``|ln((pred + 1) / (sim + 1))|`` (or, with ``--objective rel``, the mean absolute relative error) of
the chosen metrics over all layers, by coordinate descent: for each field in turn a grid scan over its
bounds, then a golden-section search in the bracket around the best grid point; sweeps repeat until
the error stops improving. numpy only. The fitted factors are written with ``ReuseFactors.save``
(atomically); errors before and after are printed for the fit set and the held-out set.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys

import numpy as np

from simcore import metrics as M

from .common import (ArgumentParser, CLIError, add_kernel_arguments, atomic_write, check_kernel_fits,
                     check_output_path, cli_main, kernel_from_args, op_kernels, package_version, parse_positive_int,
                     predict_layer, resolve_gpu, reuse_factors_class, simulate_layer)
from traces.executor import add_executor_arguments, resolve_executor
from traces.simcache import simulate_cases as _simulate_cases

__all__ = ["METRIC_ALIASES", "DEFAULT_METRICS", "create_parser", "check_arguments", "run", "main",
           "fit_factors", "error_stats", "simulate_layer", "predict_layer", "reuse_factors_class",
           "coordinate_descent"]

#: Short names accepted by --metrics.
METRIC_ALIASES = {"l1_miss": M.L1_LD_MISSES, "l1_load": M.L1_LD_SECTORS, "l2_read": M.L2_RD_SECTORS,
                  "l2_write": M.L2_WR_SECTORS, "dram_read": M.DRAM_RD_SECTORS, "dram_write": M.DRAM_WR_SECTORS}
DEFAULT_METRICS = ("l1_miss", "l2_read", "dram_read", "dram_write")


# simulate_layer, predict_layer and reuse_factors_class (from .common) are this module's own names:
# tests replace them here (monkeypatch); simulate_cases sends the simulate_layer it finds here to the workers.

# ---- objective and optimiser ---------------------------------------------------------------------
def _rel(pred, sim):
    return (pred - sim) / sim if sim else (0.0 if pred == 0 else math.inf)


def error_stats(cases, simulated, factors, metrics, kernel) -> dict:
    """{metric: {"mean_abs", "worst_abs", "worst_case"}} of (pred - sim) / sim over ``cases``."""
    out = {key: [] for key in metrics}
    for case, sim in zip(cases, simulated):
        label, layer, gpu = case[:3]
        pred = predict_layer(layer, gpu, _case_kernel(case, kernel), factors)
        for key in metrics:
            if sim[key] == 0 and pred[key] == 0:
                err = 0.0
            elif sim[key] == 0:
                continue
            else:
                err = abs(_rel(float(pred[key]), float(sim[key])))
            out[key].append((err, label))
    stats = {}
    for key, values in out.items():
        if values:
            worst = max(values, key=lambda v: v[0])
            stats[key] = {"mean_abs": float(np.mean([v for v, _ in values])), "worst_abs": worst[0],
                          "worst_case": worst[1], "count": len(values)}
    return stats


def make_objective(cases, simulated, metrics, kernel, objective="log"):
    """``f(factors) -> float``: mean absolute log (or relative) error over cases x metrics."""
    sims = np.array([[float(sim[key]) for key in metrics] for sim in simulated], dtype=np.float64)

    def f(factors) -> float:
        preds = np.array([[float(p[key]) for key in metrics]
                          for p in (predict_layer(c[1], c[2], _case_kernel(c, kernel), factors) for c in cases)],
                         dtype=np.float64)
        if not np.all(np.isfinite(preds)):
            return math.inf
        if objective == "log":
            errs = np.abs(np.log((np.maximum(preds, 0.0) + 1.0) / (sims + 1.0)))
        else:
            errs = np.abs(preds - sims) / np.maximum(sims, 1.0)
        return float(errs.mean())
    return f


_GOLD = (math.sqrt(5.0) - 1.0) / 2.0


def _golden(f, a, b, fa_best, x_best, iterations):
    """Golden-section search for a minimum of f on [a, b]; returns the best (x, f(x)) seen."""
    best = (x_best, fa_best)
    c, d = b - _GOLD * (b - a), a + _GOLD * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        if fc < best[1]:
            best = (c, fc)
        if fd < best[1]:
            best = (d, fd)
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - _GOLD * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLD * (b - a)
            fd = f(d)
    for x, fx in ((c, fc), (d, fd)):
        if fx < best[1]:
            best = (x, fx)
    return best


def coordinate_descent(f, x0: dict, bounds: dict, *, sweeps=8, grid=9, golden_iterations=30, tol=1e-7,
                       callback=None):
    """Minimise ``f(dict) -> float`` over the box ``bounds`` ({name: (lo, hi)}), one coordinate at a time.

    Each coordinate: a ``grid``-point scan over its bounds, then golden-section search between the
    neighbours of the best point. Stops after ``sweeps`` sweeps or when a sweep improves f by less
    than ``tol`` (relative). Returns ``(x, f(x), evaluations)``.
    """
    x = {name: float(min(max(value, bounds[name][0]), bounds[name][1])) for name, value in x0.items()}
    evaluations = [0]

    def g(values):
        evaluations[0] += 1
        return f(values)

    fx = g(x)
    for sweep in range(sweeps):
        start = fx
        for name, (lo, hi) in bounds.items():
            if hi <= lo:
                continue

            def line(v, name=name):
                return g({**x, name: float(v)})

            points = np.linspace(lo, hi, grid)
            values = [line(v) for v in points]
            i = int(np.argmin(values))
            cand = (float(points[i]), values[i])
            a, b = points[max(i - 1, 0)], points[min(i + 1, grid - 1)]
            cand = _golden(line, float(a), float(b), cand[1], cand[0], golden_iterations)
            if cand[1] < fx:
                x[name], fx = cand[0], cand[1]
        if callback is not None:
            callback(sweep, x, fx)
        if start - fx <= tol * max(abs(start), 1e-300):
            break
    return x, fx, evaluations[0]


def fit_factors(cases, simulated, kernel, *, metrics, objective="log", initial=None, fields=None,
                sweeps=8, callback=None):
    """Fit ReuseFactors fields (those in ``BOUNDS``, or ``fields``) to the simulated metrics.

    Returns ``(factors, objective_before, objective_after, evaluations)``.
    """
    cls = reuse_factors_class()
    base = initial if initial is not None else cls()
    bounds_all = dict(getattr(cls, "BOUNDS", {}) or {})
    names = [field.name for field in dataclasses.fields(cls) if field.name in bounds_all]
    if fields is not None:
        names = [name for name in names if name in fields]
    if not names:
        raise ValueError("ReuseFactors has no fittable fields (none listed in ReuseFactors.BOUNDS)")
    bounds = {name: (float(bounds_all[name][0]), float(bounds_all[name][1])) for name in names}
    objective_fn = make_objective(cases, simulated, metrics, kernel, objective)

    def f(values):
        try:
            candidate = dataclasses.replace(base, **values)
        except (ValueError, TypeError):      # a combination ReuseFactors rejects (e.g. lo >= hi)
            return math.inf
        return objective_fn(candidate)

    x0 = {name: float(getattr(base, name)) for name in names}
    before = objective_fn(base)
    x, after, evaluations = coordinate_descent(f, x0, bounds, sweeps=sweeps, callback=callback)
    fitted = dataclasses.replace(base, **x)
    if after > before:            # the starting point was better (e.g. outside the bounds)
        fitted, after = base, before
    return fitted, before, after, evaluations


# ---- CLI -----------------------------------------------------------------------------------------
def create_parser() -> argparse.ArgumentParser:
    from traces.networks import NETWORKS
    parser = ArgumentParser(
        prog="python -m validation.calibrate",
        description="Fit analytic.ReuseFactors to exact cache simulation (coordinate descent, numpy only).",
        epilog=f"Metrics (--metrics): {', '.join(f'{k}={v}' for k, v in METRIC_ALIASES.items())}, or any "
               "simcore.metrics key. Exit status: 0 done, 2 bad input (one 'error: ...' line, no output "
               "file), 130 interrupted (no output file).")
    parser.add_argument("networks", nargs="*", metavar="NETWORK",
                        help=f"networks to fit on: {', '.join(NETWORKS)}, a layers JSON file or an ONNX file "
                             "(or --random instead)")
    parser.add_argument("--gpu", nargs="+", default=["v100"], metavar="GPU", help="GPUs (default: v100)")
    parser.add_argument("--batch", nargs="+", type=parse_positive_int, default=None, metavar="N",
                        help="batch sizes (default: 1; layers files: their own n)")
    parser.add_argument("--holdout", nargs="+", default=[], metavar="NETWORK",
                        help="networks (or layers files) to report on but not fit")
    parser.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), metavar="METRIC",
                        help=f"metrics to fit (default: {' '.join(DEFAULT_METRICS)})")
    parser.add_argument("--objective", choices=("log", "rel"), default="log",
                        help="mean absolute log error (default) or mean absolute relative error")
    parser.add_argument("--fields", metavar="A,B", help="fit only these ReuseFactors fields (default: all in BOUNDS)")
    parser.add_argument("--init", metavar="FILE", help="start from these factors (default: ReuseFactors())")
    parser.add_argument("--sweeps", type=parse_positive_int, default=8, help="coordinate-descent sweeps (default: 8)")
    add_kernel_arguments(parser)
    add_executor_arguments(parser, default_jobs="1: in this process, all Numba threads")
    parser.add_argument("--cache-dir", metavar="DIR", help="reuse simulated metrics between runs (JSON per layer)")
    rnd = parser.add_argument_group("random cases (validation.random_cases: each case draws its own layer, "
                                    "kernel and GPU; the kernel options above are then ignored)")
    rnd.add_argument("--random", type=parse_positive_int, metavar="N", help="fit on N random cases")
    rnd.add_argument("--seed", type=int, default=1, metavar="S", help="seed of the fit cases (default 1)")
    rnd.add_argument("--holdout-random", type=parse_positive_int, metavar="M",
                     help="report on M random cases of --holdout-seed, not fitted")
    rnd.add_argument("--holdout-seed", type=int, default=2, metavar="T",
                     help="seed of the held-out cases (default 2; must differ from --seed)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="write the fitted factors here")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _layers_of(item: str, batch: int):
    from traces import resolve_layers
    return resolve_layers(item, batch)


def _cases(items, gpus, batches, passes) -> list:
    """``(label, layer, gpu, kernel)`` of every layer of ``items`` x ``gpus`` x ``batches`` x ``passes``
    (``[(op, kernel)]``, or one kernel); labels ``network/layer@gpu/bN`` (``/op`` for dgrad and wgrad)."""
    if not isinstance(passes, (list, tuple)):
        passes = [(passes.op, passes)]
    cases = []
    for item in items:
        for gpu in gpus:
            for batch in batches or [None]:
                layers = _layers_of(item, batch)
                for _op, kernel in passes:
                    check_kernel_fits(kernel, gpu, layers)
                label = os.path.splitext(os.path.basename(item))[0]
                cases += [(f"{label}/{layer.name}@{gpu.name}/b{layer.n}" + ("" if op == "fprop" else f"/{op}"),
                           layer, gpu, kernel) for layer in layers for op, kernel in passes]
    return cases


def check_arguments(args) -> None:
    """Check and resolve arguments (one-line ValueError on bad input)."""
    args.gpu_objs = [resolve_gpu(name) for name in args.gpu]
    args.kernel = kernel_from_args(args)
    args.passes = op_kernels(args, args.kernel)
    resolve_executor(args)
    known = set(M.all_keys())
    keys = []
    for name in args.metrics:
        key = METRIC_ALIASES.get(name, name)
        if key not in known:
            raise CLIError(f"--metrics: unknown metric {name!r}; use {', '.join(METRIC_ALIASES)} or a "
                           f"simcore.metrics key")
        if key not in keys:
            keys.append(key)
    args.metric_keys = keys
    if args.random is None and not args.networks:
        raise CLIError("give networks (or layer/ONNX files) to fit on, or --random N")
    if args.random is not None and args.networks:
        raise CLIError("give either networks or --random N, not both")
    if args.holdout_random is not None and args.random is None:
        raise CLIError("--holdout-random needs --random")
    if args.random is not None:
        from .random_cases import random_cases
        if args.seed < 0 or args.holdout_seed < 0:
            raise CLIError("--seed and --holdout-seed must be non-negative integers")
        if args.holdout_random is not None and args.holdout_seed == args.seed:
            raise CLIError(f"--holdout-seed {args.holdout_seed} equals --seed: held-out cases must be other cases")
        args.fit_cases = [(c.label, c.layer, c.gpu, c.kernel) for c in random_cases(args.random, args.seed)]
        args.holdout_cases = [(c.label, c.layer, c.gpu, c.kernel)
                              for c in random_cases(args.holdout_random, args.holdout_seed)] \
            if args.holdout_random else []
        args.holdout_cases += _cases(args.holdout, args.gpu_objs, args.batch, args.passes)
    else:
        args.fit_cases = _cases(args.networks, args.gpu_objs, args.batch, args.passes)
        args.holdout_cases = _cases(args.holdout, args.gpu_objs, args.batch, args.passes)
    check_output_path("-o", args.output)
    if args.cache_dir and not os.path.isdir(args.cache_dir):
        raise CLIError(f"--cache-dir {args.cache_dir}: not a directory")
    cls = reuse_factors_class()
    args.initial = None
    if args.init:
        if not os.path.exists(args.init):
            raise CLIError(f"--init {args.init}: file not found")
        try:
            args.initial = cls.load(args.init)
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise CLIError(f"--init {args.init}: cannot read reuse factors: {err}") from None
    bounds = getattr(cls, "BOUNDS", {}) or {}
    fittable = [f.name for f in dataclasses.fields(cls) if f.name in bounds]
    args.field_names = None
    if args.fields:
        wanted = [name.strip() for name in args.fields.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in fittable]
        if unknown or not wanted:
            raise CLIError(f"--fields: unknown or unbounded field(s) {', '.join(unknown) or repr(args.fields)}; "
                           f"fittable: {', '.join(fittable)}")
        args.field_names = wanted
    elif not fittable:
        raise CLIError("ReuseFactors has no fittable fields (none listed in ReuseFactors.BOUNDS)")
    args.checked = True


def simulate_cases(cases, kernel, *, jobs=1, scheduler=None, cache_dir=None, memory=None, quiet=False) -> list:
    """`traces.simcache.simulate_cases` with this module's ``simulate_layer`` (tests replace it here)."""
    return _simulate_cases(cases, kernel, simulate=simulate_layer, jobs=jobs, scheduler=scheduler,
                           cache_dir=cache_dir, memory=memory, quiet=quiet)


def _case_kernel(case, kernel):
    """The kernel of a case: its 4th item if it has one (random cases), else ``kernel``."""
    return case[3] if len(case) > 3 else kernel


def _stats_table(title, before, after, metrics) -> str:
    names = {key: alias for alias, key in METRIC_ALIASES.items()}
    width = max([len(names.get(key, key)) for key in metrics] + [12]) + 2
    lines = [title, f"  {'metric':<{width}}{'mean before':>12}{'mean after':>12}{'worst before':>14}"
                    f"{'worst after':>13}  worst case after"]
    for key in metrics:
        b, a = before.get(key), after.get(key)
        if not b or not a:
            continue
        lines.append(f"  {names.get(key, key):<{width}}{100 * b['mean_abs']:>11.1f}%{100 * a['mean_abs']:>11.1f}%"
                     f"{100 * b['worst_abs']:>13.1f}%{100 * a['worst_abs']:>12.1f}%  {a['worst_case']}")
    return "\n".join(lines)


def _save(factors, path, meta) -> None:
    """factors.save(path), with ``meta`` when its save accepts one."""
    import inspect
    try:
        accepts_meta = "meta" in inspect.signature(factors.save).parameters
    except (TypeError, ValueError):
        accepts_meta = False
    if accepts_meta:
        factors.save(path, meta=meta)
    else:
        factors.save(path)


def run(args) -> int:
    if not getattr(args, "checked", False):
        check_arguments(args)
    cls = reuse_factors_class()
    kernel, metrics = args.kernel, args.metric_keys
    memory = {}
    try:
        fit_sim = simulate_cases(args.fit_cases, kernel, jobs=args.jobs, scheduler=args.scheduler,
                                 cache_dir=args.cache_dir, memory=memory, quiet=args.quiet)
        distinct = len(memory)
        hold_sim = simulate_cases(args.holdout_cases, kernel, jobs=args.jobs, scheduler=args.scheduler,
                                  cache_dir=args.cache_dir, memory=memory, quiet=args.quiet)
    except KeyboardInterrupt:
        print("interrupted while simulating; no factors written", file=sys.stderr)
        return 130
    initial = args.initial if args.initial is not None else cls()

    def progress(sweep, x, fx):
        if not args.quiet:
            print(f"sweep {sweep + 1}: objective {fx:.6g}", file=sys.stderr, flush=True)

    try:
        fitted, before, after, evaluations = fit_factors(
            args.fit_cases, fit_sim, kernel, metrics=metrics, objective=args.objective, initial=initial,
            fields=args.field_names, sweeps=args.sweeps, callback=progress)
    except KeyboardInterrupt:
        print("interrupted while fitting; no factors written", file=sys.stderr)
        return 130
    if args.random is not None:
        fit_desc = {"random": args.random, "seed": args.seed}
        hold_desc = {"random": args.holdout_random, "seed": args.holdout_seed, "networks": args.holdout}
        kernel_desc = "per case (random)"
    else:
        fit_desc, hold_desc = args.networks, args.holdout
        kernel_desc = dict(kernel.as_dict(), op=getattr(args, "op", kernel.op))
    meta = {"fit": fit_desc, "holdout": hold_desc, "gpus": args.gpu, "batches": args.batch or "default",
            "kernel": kernel_desc, "metrics": metrics, "objective": args.objective,
            "objective_before": before, "objective_after": after, "package_version": package_version()}
    atomic_write(args.output, lambda tmp: _save(fitted, tmp, meta))

    out = [f"fit set: {len(args.fit_cases)} {'random cases' if args.random else 'layers'} ({distinct} distinct); "
           f"held out: {len(args.holdout_cases)} layers; objective ({args.objective}) "
           f"{before:.4g} -> {after:.4g} in {evaluations} evaluations", ""]
    init_d, fit_d = initial.to_dict(), fitted.to_dict()
    bounds = getattr(cls, "BOUNDS", {}) or {}
    out.append(f"  {'factor':<28}{'initial':>12}{'fitted':>12}   bounds")
    for name in fit_d:
        if name in bounds:
            out.append(f"  {name:<28}{init_d.get(name, float('nan')):>12.4g}{fit_d[name]:>12.4g}   "
                       f"[{bounds[name][0]:g}, {bounds[name][1]:g}]")
    out.append("")
    out.append(_stats_table("fit set: |relative error| per metric",
                            error_stats(args.fit_cases, fit_sim, initial, metrics, kernel),
                            error_stats(args.fit_cases, fit_sim, fitted, metrics, kernel), metrics))
    if args.holdout_cases:
        out.append("")
        out.append(_stats_table("held-out set: |relative error| per metric",
                                error_stats(args.holdout_cases, hold_sim, initial, metrics, kernel),
                                error_stats(args.holdout_cases, hold_sim, fitted, metrics, kernel), metrics))
    out.append("")
    out.append(f"factors written to {args.output}")
    print("\n".join(out))
    return 0


def main(argv=None) -> int:
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
