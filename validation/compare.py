"""Compare the analytic model with exact cache simulation, layer by layer.

    python -m validation.compare vgg16 --gpu v100 --batch 1 --json vgg16.json --plot vgg16.png

For every layer: simulated (traces.simulate_layer) and predicted (analytic.predict_layer) L1 load
requests and sectors, L1 hit rate, L2 read sectors, L2 hit rate, DRAM read and write sectors, the
relative error of each ((predicted - simulated) / simulated), the predicted time and bound; then
network totals and the mean and worst absolute relative error per metric. ``--ncu-csv`` adds measured
values from an Nsight Compute CSV export. Results files: see ``validation/SCHEMA.md``.

``--op dgrad|wgrad`` compares that pass of every layer; ``--op train`` all three passes of a training
step: per layer, the passes side by side and their sum (the step's traffic per level, predicted time
and bound), then the network's step total and the errors per pass and over all of them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .common import (ArgumentParser, CLIError, add_kernel_arguments, atomic_write, check_kernel_fits, check_output_path,
                     cli_main, finish_first_run, kernel_from_args, op_kernels, parse_positive_int, predict_layer,
                     resolve_gpu, reuse_factors_class, simulate_layer, start_first_run)
from traces.executor import Executor, add_executor_arguments, resolve_executor, timed_call
from .report import (check_matplotlib, format_document, format_header, layer_table, plot_document,
                     step_layer_table)
from .results import layer_steps, make_document, make_entry, write_json, write_h5

__all__ = ["create_parser", "check_arguments", "run", "main", "simulate_layer", "predict_layer",
           "load_factors", "reuse_factors_class"]

EXIT_INTERRUPTED = 130
#: Partial results files are rewritten after a finished layer at most this often (the final write and
#: the write on interrupt always happen).
SAVE_INTERVAL_S = 1.0


# simulate_layer, predict_layer and reuse_factors_class (from .common) are this module's own names:
# tests replace them here (monkeypatch); run() sends the simulate_layer it finds here to the workers.

def load_factors(path):
    """ReuseFactors.load(path); any failure -> one-line ValueError naming the file."""
    if not os.path.exists(path):
        raise CLIError(f"--factors {path}: file not found")
    if os.path.isdir(path):
        raise CLIError(f"--factors {path}: is a directory")
    cls = reuse_factors_class()
    try:
        return cls.load(path)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as err:
        raise CLIError(f"--factors {path}: cannot read reuse factors: {err}") from None


def _factors_dict(factors):
    if factors is None:            # record the model's defaults, for reproducibility
        try:
            factors = reuse_factors_class()()
        except Exception:          # the model package is not importable here: leave it unrecorded
            return None
    if hasattr(factors, "to_dict"):
        return factors.to_dict()
    return dict(factors)


# ---- CLI -----------------------------------------------------------------------------------------
def create_parser() -> argparse.ArgumentParser:
    from traces.networks import NETWORKS
    parser = ArgumentParser(
        prog="python -m validation.compare",
        description="Compare the analytic traffic model with exact cache simulation, layer by layer.",
        epilog="Exit status: 0 done, 2 bad input (one 'error: ...' line on stderr, no output file), "
               "130 interrupted (results files hold the finished layers, marked complete: false).")
    parser.add_argument("network", nargs="?", metavar="NETWORK",
                        help=f"network: {', '.join(NETWORKS)}, a .json layer file or an .onnx model "
                             f"(optional with --layers-file)")
    parser.add_argument("--gpu", default="v100", help="GPU name (default: %(default)s)")
    parser.add_argument("--batch", type=parse_positive_int, default=None,
                        help="batch size (default: 1; with --layers-file: the file's n unless given)")
    parser.add_argument("--layers", metavar="A,B,...", help="only these layers (comma-separated names)")
    parser.add_argument("--layers-file", metavar="FILE.json", help="layers from a JSON file (traces.load_layers)")
    add_kernel_arguments(parser)
    parser.add_argument("--factors", metavar="FILE", help="reuse factors file (validation.calibrate -o)")
    parser.add_argument("--ncu-csv", metavar="FILE", help="measured metrics: an 'ncu --csv' export, one launch per layer")
    out = parser.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write results as JSON (schema: validation/SCHEMA.md)")
    out.add_argument("--h5", metavar="FILE", help="write results as HDF5")
    out.add_argument("--plot", metavar="FILE.png", help="plot predicted vs simulated per metric (needs matplotlib)")
    add_executor_arguments(parser, default_jobs="1: in this process, all Numba threads")
    parser.add_argument("--cache-dir", metavar="DIR",
                        help="reuse simulation results stored in DIR (shared with validation.calibrate "
                             "--cache-dir; keyed by layer shape, GPU, kernel and simulator version)")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar and no per-layer tables (totals and error summary only)")
    return parser


def check_arguments(args) -> None:
    """Check and resolve the arguments; raise ValueError (one clear line) on bad input.

    Sets ``args.layer_list``, ``args.gpu_obj``, ``args.kernel``, ``args.passes`` (``[(op, kernel)]``: one,
    or three with ``--op train``), ``args.factors_obj``, ``args.measured``.
    """
    from traces import NETWORKS, load_layers, resolve_layers
    if args.network is None and not args.layers_file:
        raise CLIError(f"give a NETWORK ({', '.join(NETWORKS)}) or --layers-file FILE")
    if args.network is not None and args.layers_file:
        raise CLIError("give either a NETWORK or --layers-file, not both")
    if args.network is not None:
        layers = resolve_layers(args.network, args.batch)
        args.network = args.network.strip().lower() if args.network.strip().lower() in NETWORKS else args.network
    else:
        layers = load_layers(args.layers_file)
        if args.batch is not None:
            layers = [layer.with_batch(args.batch) for layer in layers]
    if args.layers:
        wanted = [name.strip() for name in args.layers.split(",") if name.strip()]
        known = [layer.name for layer in layers]
        unknown = [name for name in wanted if name not in known]
        if unknown or not wanted:
            raise CLIError(f"--layers: unknown layer(s) {', '.join(unknown) or repr(args.layers)}; "
                           f"layers of {args.network or args.layers_file}: {', '.join(known)}")
        layers = [layer for layer in layers if layer.name in wanted]
    args.layer_list = layers
    resolve_executor(args)
    args.gpu_obj = resolve_gpu(args.gpu)
    args.kernel = kernel_from_args(args)
    args.passes = op_kernels(args, args.kernel)
    for _op, kernel in args.passes:
        check_kernel_fits(kernel, args.gpu_obj, layers)
    args.factors_obj = load_factors(args.factors) if args.factors else None
    cache_dir = getattr(args, "cache_dir", None)
    args.cache_dir = cache_dir
    if cache_dir and not os.path.isdir(cache_dir):
        raise CLIError(f"--cache-dir {cache_dir}: not a directory")
    for option in ("json", "h5", "plot"):
        if getattr(args, option):
            check_output_path(f"--{option}", getattr(args, option))
    if args.plot:
        check_matplotlib()
    if args.ncu_csv and len(args.passes) > 1:
        raise CLIError("--ncu-csv holds one launch per layer: give one --op (fprop, dgrad or wgrad), not train")
    if args.ncu_csv:
        from .ncu import load_measurements
        args.measured = load_measurements(args.ncu_csv, layers)
    else:
        args.measured = [None] * len(layers)
    args.checked = True


def _progress(total, quiet):
    from tqdm import tqdm
    return tqdm(total=total, desc="simulating", unit="pass", file=sys.stderr,
                disable=True if quiet else None, dynamic_ncols=True)


def _cached_results(items, gpu, cache_dir) -> tuple:
    """``(keys, {index: metrics})``: cache keys of every (layer, op, kernel) item and the results
    ``cache_dir`` holds (same layer shape, GPU, kernel, package and simulator version; files shared with
    ``validation.calibrate --cache-dir``). Read and written here, never by a worker."""
    if not cache_dir:
        return [None] * len(items), {}
    from traces.simcache import cache_key, read_cache
    keys = [cache_key(layer, gpu, kernel) for layer, _op, kernel in items]
    found = {i: read_cache(cache_dir, key) for i, key in enumerate(keys)}
    return keys, {i: result for i, result in found.items() if result is not None}


def run(args) -> int:
    """Simulate and predict every layer (every pass of it), print the report, write the requested files.
    Returns the exit status."""
    if not getattr(args, "checked", False):
        check_arguments(args)
    layers, gpu, factors = args.layer_list, args.gpu_obj, args.factors_obj
    passes = getattr(args, "passes", None) or [(args.kernel.op, args.kernel)]
    items = [(layer, op, kernel) for layer in layers for op, kernel in passes]     # layer-major
    compiling = start_first_run(gpu, [kernel for _op, kernel in passes])
    try:
        # The model is cheap: predict everything first so that a model error stops us before any output.
        predicted = [predict_layer(layer, gpu, kernel, factors) for layer, _op, kernel in items]
    finally:
        finish_first_run(compiling)
    batch = args.batch if args.batch is not None else layers[0].n
    meta = dict(network=args.network, gpu=gpu, kernel=args.kernel, factors=_factors_dict(factors), batch=batch,
                op=getattr(args, "op", None) or args.kernel.op)
    done = {}
    last_save = [-float("inf")]
    streaming = not args.quiet and args.jobs == 1 and not args.scheduler   # each layer's table as it finishes
    npass = len(passes)

    def document(complete, error=None):
        return make_document(entries=[done[i] for i in sorted(done)], complete=complete, error=error, **meta)

    def save(doc):
        if args.json:
            write_json(doc, args.json)
        if args.h5:
            write_h5(doc, args.h5)

    def show(index):
        """Print a layer's table once all its passes are done (in layer order when streaming)."""
        first = index - index % npass
        group = [done.get(i) for i in range(first, first + npass)]
        if any(entry is None for entry in group):
            return
        bar.clear()
        if npass == 1:
            print(layer_table(group[0]) + "\n", flush=True)
        else:
            print(step_layer_table(layer_steps(group)[0], group) + "\n", flush=True)

    def on_done(index, outcome):
        result, seconds = outcome
        layer, op, _kernel = items[index]
        done[index] = make_entry(layer, result, predicted[index], args.measured[index // npass], seconds, op=op)
        now = time.monotonic()
        if (args.json or args.h5) and now - last_save[0] >= SAVE_INTERVAL_S:
            save(document(complete=False))
            last_save[0] = time.monotonic()
        if streaming:
            show(index)

    if streaming:
        print(format_header(document(complete=True)) + "\n", flush=True)
    keys, cached = _cached_results(items, gpu, args.cache_dir)
    todo = [i for i in range(len(items)) if i not in cached]
    executor = Executor(args.jobs, args.scheduler, tasks=len(todo))
    tasks = [((simulate_layer, items[i][0], gpu, items[i][2]), {"jobs": executor.task_threads}) for i in todo]

    def on_simulated(task, outcome):
        index = todo[task]
        if args.cache_dir:
            from traces.simcache import write_cache
            write_cache(args.cache_dir, keys[index], {k: int(v) for k, v in outcome[0].items()})
        on_done(index, outcome)

    def label(task):
        layer, op, _kernel = items[todo[task]]
        return layer.name if npass == 1 else f"{layer.name} {op}"

    bar = _progress(len(items), args.quiet)
    try:
        for index in sorted(cached):
            on_done(index, (cached[index], None))
            bar.update(1)
        with executor:
            executor.run(timed_call, tasks, on_done=on_simulated, progress=bar, label=label)
    except KeyboardInterrupt:
        bar.close()
        doc = document(complete=False, error="interrupted")
        save(doc)
        if args.plot and done:
            atomic_write(args.plot, lambda tmp: plot_document(doc, tmp))
        where = ", ".join(p for p in (args.json, args.h5) if p)
        unit = "layers" if npass == 1 else "passes"
        print(f"interrupted: {len(done)} of {len(items)} {unit} done"
              + (f"; finished {unit} saved in {where}" if where else ""), file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:
        bar.close()
        if done:      # keep what finished; the error is reported by main()
            save(document(complete=False, error=" ".join(str(err).split()) or type(err).__name__))
        raise
    bar.close()
    doc = document(complete=True)
    save(doc)
    if args.plot:
        atomic_write(args.plot, lambda tmp: plot_document(doc, tmp))
    sys.stdout.write(format_document(doc, layers=not args.quiet and not streaming, header=not streaming))
    return 0


def main(argv=None) -> int:
    """Entry point; returns the exit status (0 ok, 2 bad input, 130 interrupted)."""
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
