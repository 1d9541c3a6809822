"""Design-space sweeps: networks x GPUs (and scaled variants) x batch sizes, predicted and simulated, on Dask.

    python -m validation.sweep vgg16 resnet50 --gpu v100 a100 --scale l2_bytes=2 --scale sms=2,dram_gbps=1.5 \\
        --batch 1 32 --simulate --out study.h5                       # a local Dask cluster, one worker per core
    python -m validation.sweep ... --scheduler tcp://HOST:8786        # a running cluster

A *case* is one network (or layer JSON file) on one GPU variant (each ``--gpu``, unscaled and scaled by
each ``--scale``, the syntax of ``analytic.scaling``) at one batch size, with the kernel of the kernel
options. Each case's prediction is a task; with ``--simulate`` each layer's simulation is one too
(identical layers on the same GPU variant are simulated once; ``--cache-dir`` keeps simulations
between runs, read and written here, never by the workers). Results come back here: each finished
case is appended to ``OUT.journal`` at once and ``OUT`` (HDF5, ``validation/SCHEMA.md``) is written
from them now and then, at the end and on Ctrl-C. ``--resume`` skips the cases ``OUT`` and its journal
hold. A case that fails (a kernel that does not fit a scaled GPU, a worker that keeps dying) is
recorded with its error and the others go on.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time

from .common import (ArgumentParser, CLIError, add_kernel_arguments, check_kernel_fits, check_output_path, cli_main,
                     kernel_from_args, package_version, parse_positive_int, predict_layer, resolve_gpu,
                     simulate_layer)
from traces.executor import Executor, add_executor_arguments, local_cores, resolve_executor, timed_call
from .sweep_results import (append_journal, journal_path, load_sweep, make_record, read_journal, records_of,
                            write_journal, write_sweep)
from .sweep_table import SweepProgress, simulation_cost, summary_table

__all__ = ["create_parser", "check_arguments", "run", "main", "plan_cases", "simulate_layer", "predict_layer"]

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
#: ``OUT`` is rewritten after a finished case at most this often (and at least 20 writes' time apart).
SAVE_INTERVAL_S = 30.0

# simulate_layer and predict_layer (from .common) are this module's own names: tests replace them here,
# and run() sends the ones it finds here to the workers.


def create_parser() -> argparse.ArgumentParser:
    from traces.networks import NETWORKS
    parser = ArgumentParser(
        prog="python -m validation.sweep",
        description="Predict (and with --simulate, simulate) networks x GPU variants x batch sizes on Dask.",
        epilog="Exit status: 0 every case done, 1 some cases failed (recorded with their error), 2 bad input "
               "(one 'error: ...' line, no output file), 130 interrupted (OUT holds the finished cases; "
               "--resume continues).")
    parser.add_argument("networks", nargs="+", metavar="NETWORK",
                        help=f"networks ({', '.join(NETWORKS)}) or layer JSON files")
    parser.add_argument("--gpu", nargs="+", default=["v100"], metavar="GPU", help="GPUs (default: v100)")
    parser.add_argument("--scale", action="append", default=[], metavar="FIELD=X[,FIELD=Y]",
                        help="a GPU variant: each --gpu with these fields scaled (analytic.scaling's syntax; "
                             "repeatable; the unscaled GPUs are always cases too)")
    parser.add_argument("--batch", nargs="+", type=parse_positive_int, default=None, metavar="N",
                        help="batch sizes (default: 1; layer files: their own n)")
    add_kernel_arguments(parser)
    parser.add_argument("--factors", metavar="FILE", help="reuse factors file (validation.calibrate -o)")
    parser.add_argument("--simulate", action="store_true",
                        help="simulate every layer too (default: the analytic model only)")
    parser.add_argument("--out", metavar="FILE.h5", help="write one row per case x layer here (HDF5)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the sweep in --out: skip the cases it (and OUT.journal) holds")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="reuse simulations stored in DIR (shared with validation.compare and calibrate)")
    add_executor_arguments(parser, default_jobs=f"{local_cores()}, the cores of this machine")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _config(args) -> dict:
    """What every case of an output file shares (a resumed file must have been written with the same)."""
    factors = args.factors_obj.to_dict() if args.factors_obj is not None else None
    return {"kernel": args.kernel.as_dict(), "factors": factors, "simulate": bool(args.simulate)}


def check_arguments(args) -> None:
    """Check and resolve the arguments (one-line CLIError on bad input); plan the cases."""
    from analytic.scaling import parse_scale

    from .calibrate import _layers_of
    from .compare import load_factors
    args.gpu_objs = [resolve_gpu(name) for name in args.gpu]
    args.scales = [(text.strip(), parse_scale(text)) for text in args.scale]
    args.kernel = kernel_from_args(args)
    args.factors_obj = load_factors(args.factors) if args.factors else None
    args.networks_layers = [(os.path.splitext(os.path.basename(item))[0],
                             [_layers_of(item, batch) for batch in args.batch or [None]]) for item in args.networks]
    if args.cache_dir and not os.path.isdir(args.cache_dir):
        raise CLIError(f"--cache-dir {args.cache_dir}: not a directory")
    if args.resume and not args.out:
        raise CLIError("--resume needs --out FILE (the sweep to continue)")
    if args.out:
        check_output_path("--out", args.out)
        if not args.out.lower().endswith((".h5", ".hdf5")):
            raise CLIError(f"--out {args.out}: the results file is HDF5; give a name ending in .h5")
        if not args.resume:
            for path in (args.out, journal_path(args.out)):
                if os.path.exists(path):
                    raise CLIError(f"--out {args.out}: {path} exists; give --resume to continue that sweep, "
                                   f"or remove it")
    resolve_executor(args, default_jobs=local_cores())
    args.config = _config(args)
    args.cases = plan_cases(args.networks_layers, args.gpu_objs, args.scales, args.kernel, args.config)
    args.carried = _carried_records(args) if args.resume else []
    args.checked = True


# ---- cases ---------------------------------------------------------------------------------------
def _gpu_params(gpu) -> dict:
    return {key: list(value) if isinstance(value, tuple) else value for key, value in dataclasses.asdict(gpu).items()}


def plan_cases(networks_layers, gpus, scales, kernel, config) -> list:
    """One dict per case: key, network, gpu, scale, batch, layers, gpu_obj (None when the variant is
    invalid) and error (why the case cannot run, else None)."""
    from analytic.scaling import scale_gpu
    cases = []
    for label, batches in networks_layers:
        for base in gpus:
            for scale_text, factors in [("", None)] + list(scales):
                error, gpu = None, base
                if factors is not None:
                    try:
                        gpu = scale_gpu(base, factors)
                    except ValueError as err:
                        error, gpu = str(err), None
                for layers in batches:
                    case_error = error
                    if gpu is not None:
                        try:
                            check_kernel_fits(kernel, gpu, layers)
                        except ValueError as err:
                            case_error = str(err)
                    params = _gpu_params(gpu) if gpu is not None else {"base": base.name, "scale": scale_text}
                    text = json.dumps({"network": label, "layers": [layer.as_dict() for layer in layers],
                                       "gpu": params, "config": config, "version": package_version()},
                                      sort_keys=True)
                    cases.append({"key": hashlib.sha256(text.encode()).hexdigest()[:32], "network": label,
                                  "gpu": base.name, "scale": scale_text, "batch": layers[0].n,
                                  "gpu_params": params, "layers": layers, "gpu_obj": gpu, "error": case_error})
    return cases


def _carried_records(args) -> list:
    """Records of ``--out`` and its journal (the journal's are newer), after checking their config."""
    records = {}
    sources = []
    if os.path.exists(args.out):
        doc = load_sweep(args.out)
        sources.append((args.out, doc["config"], records_of(doc)))
    if os.path.exists(journal_path(args.out)):
        sources.append((journal_path(args.out), *read_journal(journal_path(args.out))))
    for path, config, found in sources:
        if config != args.config:
            raise CLIError(f"--resume: {path} was written by a sweep with another kernel, --factors or --simulate "
                           f"({json.dumps(config, sort_keys=True)})")
        for record in found:
            records[record["key"]] = record
    return list(records.values())


# ---- tasks (run on the workers) ------------------------------------------------------------------
def _predict_layers(predict, layers, gpu, kernel, factors) -> list:
    return [predict(layer, gpu, kernel, factors) for layer in layers]


def _sim_key(layer, gpu, kernel) -> str:
    from traces.simcache import cache_key
    return cache_key(layer, gpu, kernel)


# ---- the run -------------------------------------------------------------------------------------
class _Sweep:
    """The client's side of a sweep: which tasks feed which case, and what happens as they finish."""

    def __init__(self, args):
        self.args = args
        carried = {record["key"]: record for record in args.carried}
        planned = {case["key"] for case in args.cases}
        self.records = {}                  # case index -> record, for this sweep's cases
        self.extra = [record for key, record in carried.items() if key not in planned]   # kept as they are
        self.todo = []
        for index, case in enumerate(args.cases):
            if carried.get(case["key"], {}).get("status") == "done":
                self.records[index] = carried[case["key"]]
            else:
                self.todo.append(index)
        self.predicted = {}                # case index -> (predictions, seconds)
        self.sim_keys = {}                 # case index -> simulation key of each layer
        self.waiting = {}                  # simulation key -> [(case index, layer position)]
        self.sim_results = {}              # simulation key -> (metrics, seconds or None: from the cache)
        self.kinds, self.cached_layers = [], 0     # per task: ("predict", case) or ("simulate", key)
        self.last_save, self.save_cost = -float("inf"), 0.0

    # -- planning
    def runnable(self) -> list:
        """This sweep's cases still to run that can run."""
        return [index for index in self.todo if self.args.cases[index]["error"] is None]

    def tasks(self, threads) -> tuple:
        """``(tasks, costs)`` for the executor: one prediction per case to run (first: they are quick),
        then one simulation per distinct (layer, GPU variant) not in ``--cache-dir``, case by case,
        the longest first within a case. ``threads``: Numba threads per simulation."""
        args = self.args
        tasks, costs, self.kinds = [], [], []
        submitted, self.cached_layers = set(), 0
        for index in self.todo:
            case = args.cases[index]
            if case["error"] is not None:
                continue
            tasks.append(((_predict_layers, predict_layer, case["layers"], case["gpu_obj"], args.kernel,
                           args.factors_obj), {}))
            costs.append(len(case["layers"]) * 5e3)
            self.kinds.append(("predict", index))
        if not args.simulate:
            return tasks, costs
        for index in self.todo:
            case = args.cases[index]
            if case["error"] is not None:
                continue
            self.sim_keys[index] = [_sim_key(layer, case["gpu_obj"], args.kernel) for layer in case["layers"]]
            order = sorted(range(len(case["layers"])), key=lambda i: -simulation_cost(case["layers"][i], args.kernel))
            for position in order:
                layer, key = case["layers"][position], self.sim_keys[index][position]
                self.waiting.setdefault(key, []).append((index, position))
                if key in self.sim_results:
                    self.cached_layers += 1
                if key in self.sim_results or key in submitted:
                    continue
                found = None
                if args.cache_dir:
                    from traces.simcache import read_cache
                    found = read_cache(args.cache_dir, key)
                if found is not None:
                    self.sim_results[key] = (found, None)
                    self.cached_layers += 1
                    continue
                submitted.add(key)
                tasks.append(((simulate_layer, layer, case["gpu_obj"], args.kernel), {"jobs": threads}))
                costs.append(simulation_cost(layer, args.kernel))
                self.kinds.append(("simulate", key))
        return tasks, costs

    # -- as tasks finish
    def layers_of(self, index) -> int:
        return len(self.args.cases[index]["layers"])

    def complete(self, index) -> bool:
        if index in self.records or index not in self.predicted:
            return False
        return not self.args.simulate or all(key in self.sim_results for key in self.sim_keys[index])

    def finish(self, index, record) -> None:
        self.records[index] = record
        if self.args.out:
            append_journal(journal_path(self.args.out), record)
            now = time.monotonic()
            if now - self.last_save >= max(SAVE_INTERVAL_S, 20 * self.save_cost):
                self.save(complete=False)
                self.save_cost = time.monotonic() - now
                self.last_save = time.monotonic()

    def fail(self, index, error) -> None:
        if index not in self.records:
            self.finish(index, make_record(_params(self.args.cases[index]), status="failed", error=error))

    def build(self, index) -> dict:
        case = self.args.cases[index]
        predicted, seconds = self.predicted.pop(index)
        simulated = sim_seconds = None
        if self.args.simulate:
            simulated = [self.sim_results[key][0] for key in self.sim_keys[index]]
            sim_seconds = [self.sim_results[key][1] for key in self.sim_keys[index]]
            seconds += sum(t for t in sim_seconds if t is not None)
        return make_record(_params(case), layers=case["layers"], predicted=predicted, simulated=simulated,
                           simulation_seconds=sim_seconds, seconds=seconds)

    def ordered(self) -> list:
        return [self.records[i] for i in sorted(self.records)] + self.extra

    def save(self, *, complete, error=None) -> None:
        if self.args.out:
            write_sweep(self.args.out, self.args.config, self.ordered(), complete=complete, error=error)


def _params(case) -> dict:
    return {key: case[key] for key in ("key", "network", "gpu", "scale", "batch", "gpu_params")}


def run(args) -> int:
    """Run the sweep; print one summary row per case. Returns the exit status."""
    if not getattr(args, "checked", False):
        check_arguments(args)
    sweep = _Sweep(args)
    runnable = bool(sweep.runnable())
    with Executor(args.jobs, args.scheduler if runnable else None, tasks=None if runnable else 0) as executor:
        return _run(args, sweep, executor)


def _run(args, sweep, executor) -> int:
    if args.out:
        write_journal(journal_path(args.out), args.config, sweep.ordered())
    tasks, costs = sweep.tasks(executor.task_threads)
    total_layers = sum(sweep.layers_of(i) for i in sweep.runnable())
    progress = SweepProgress(sum(costs), cases=len(args.cases), layers=total_layers, quiet=args.quiet)
    progress.advance(0.0, cases=len(sweep.records), layers=sweep.cached_layers)
    for index in sweep.todo:                       # cases that cannot run: recorded now
        if args.cases[index]["error"] is not None:
            sweep.fail(index, args.cases[index]["error"])
            progress.advance(0.0, cases=1, failed=1)

    def finish_ready(indices):
        for index in indices:
            if sweep.complete(index):
                sweep.finish(index, sweep.build(index))
                progress.advance(0.0, cases=1)

    def on_done(task, outcome):
        kind, what = sweep.kinds[task]
        result, seconds = outcome
        if kind == "predict":
            sweep.predicted[what] = (result, seconds)
            layers = 0 if args.simulate else sweep.layers_of(what)
            progress.advance(costs[task], layers=layers)
            finish_ready([what])
            return
        metrics = {key: int(value) for key, value in result.items()}
        sweep.sim_results[what] = (metrics, seconds)
        if args.cache_dir:
            from traces.simcache import write_cache
            write_cache(args.cache_dir, what, metrics)
        waiting = [index for index, _ in sweep.waiting.get(what, [])]
        progress.advance(costs[task], layers=len(waiting))
        finish_ready(sorted(set(waiting)))

    def on_error(task, error):
        kind, what = sweep.kinds[task]
        message = f"{type(error).__name__}: {' '.join(str(error).split())}"
        if kind == "predict":
            indices, layers = [what], (0 if args.simulate else sweep.layers_of(what))
        else:
            indices = sorted({index for index, _ in sweep.waiting.get(what, [])})
            layers = len(sweep.waiting.get(what, []))
        for index in indices:
            if index not in sweep.records:
                sweep.fail(index, message)
                progress.advance(0.0, cases=1, failed=1)
        progress.advance(costs[task], layers=layers)

    try:
        executor.run(timed_call, tasks, on_done=on_done, on_error=on_error)
    except KeyboardInterrupt:
        progress.close()
        sweep.save(complete=False, error="interrupted")
        done = sum(1 for r in sweep.records.values() if r["status"] == "done")
        print(f"interrupted: {done} of {len(args.cases)} cases done"
              + (f"; finished cases in {args.out} (continue with --resume)" if args.out else ""), file=sys.stderr)
        sys.stdout.write(summary_table(args.cases, sweep.records, simulate=args.simulate))
        return EXIT_INTERRUPTED
    except BaseException as err:
        progress.close()
        sweep.save(complete=False, error=" ".join(str(err).split()) or type(err).__name__)
        raise
    progress.close()
    sweep.save(complete=True)
    if args.out and os.path.exists(journal_path(args.out)):
        os.unlink(journal_path(args.out))
    sys.stdout.write(summary_table(args.cases, sweep.records, simulate=args.simulate))
    failed = sum(1 for r in sweep.records.values() if r["status"] != "done")
    if failed:
        print(f"{failed} of {len(args.cases)} cases failed (their errors are in the table"
              + (f" and in {args.out})" if args.out else ")"), file=sys.stderr)
    return EXIT_FAILED if failed else 0


def main(argv=None) -> int:
    """Entry point; returns the exit status (0 ok, 1 some cases failed, 2 bad input, 130 interrupted)."""
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
