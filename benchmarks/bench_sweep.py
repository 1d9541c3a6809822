"""A simulated sweep on 1 and on 2 local Dask workers (DESIGN section 8 target: 2 workers >= 1.7x faster).

    python benchmarks/bench_sweep.py [--networks vgg16 alexnet] [--gpu v100 a100] [--batch 4]
                                     [--scale l2_bytes=2 sms=2] [--noop-tasks 300] [--in-process]

For 1 and then 2 workers: a LocalCluster as ``--jobs`` starts it (one process per worker, one thread
and one Numba thread each), every worker warmed up (imports, Numba cache load) by one tiny simulation,
then the same ``python -m validation.sweep ... --simulate`` timed against it through ``--scheduler``
(cluster start-up and warm-up are printed apart). Overhead per task: (wall time x workers - the
tasks' own time) / tasks for the sweep, and the wall time per task of no-op tasks through
``validation.executor.Executor.run`` on a connected client. The machine's load average is printed before and after: other
work on the cores shows in the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from validation import sweep  # noqa: E402
from validation.executor import Executor, local_cluster  # noqa: E402
from validation.sweep_results import SHAPE_FIELDS, load_sweep  # noqa: E402

TARGET = 1.7


def _noop(x):
    return x


def _warm_up():
    """One tiny simulation and prediction in this worker (imports, Numba's cache)."""
    import simcore
    from traces import ConvLayer, KernelConfig
    from validation.common import predict_layer, simulate_layer
    layer, gpu, kernel = ConvLayer(1, 16, 10, 10, 32, 3, 3, pad=1), simcore.gpu("v100"), KernelConfig()
    simulate_layer(layer, gpu, kernel, jobs=1)
    predict_layer(layer, gpu, kernel)
    return os.getpid()


def _sweep_argv(args, out):
    argv = [*args.networks, "--gpu", *args.gpu, "--batch", *map(str, args.batch), "--simulate",
            "--quiet", "--out", out]
    for scale in args.scale:
        argv += ["--scale", scale]
    return argv


def _run_sweep(argv):
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        status = sweep.main(argv)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"sweep failed with exit status {status}")
    doc = load_sweep(argv[argv.index("--out") + 1])
    return wall, doc, _simulation_seconds(doc)


def _simulation_seconds(doc) -> list:
    """The time of each simulation task (identical layers on one GPU variant share one task)."""
    layers, seconds = doc["layers"], {}
    for row, case in enumerate(layers["case"].tolist()):
        gpu = str(sorted(doc["cases"][case]["gpu_params"].items()))
        shape = tuple(int(layers[field][row]) for field in SHAPE_FIELDS)
        seconds[(gpu, shape)] = float(layers["simulation_seconds"][row])
    return list(seconds.values())


def measure(args, workers: int, folder: str) -> dict:
    from distributed import Client
    start = time.perf_counter()
    cluster = local_cluster(workers)
    client = Client(cluster, set_as_default=False)
    started = time.perf_counter()
    client.run(_warm_up)
    warmed = time.perf_counter()
    try:
        out = os.path.join(folder, f"sweep{workers}.h5")
        wall, doc, seconds = _run_sweep(_sweep_argv(args, out) + ["--scheduler", cluster.scheduler_address])
        tasks = len(doc["cases"]) + len(seconds)       # one prediction per case + the simulations
        with Executor(scheduler=cluster.scheduler_address) as executor:      # connected before the clock starts
            start_noop = time.perf_counter()
            executor.run(_noop, [((i,), {}) for i in range(args.noop_tasks)])
            noop = (time.perf_counter() - start_noop) / args.noop_tasks
    finally:
        client.close()
        cluster.close()
    return {"workers": workers, "start": started - start, "warm": warmed - started, "wall": wall,
            "task_seconds": sum(seconds), "tasks": tasks, "noop": noop, "doc": doc}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", nargs="+", default=["vgg16", "alexnet"])
    p.add_argument("--gpu", nargs="+", default=["v100", "a100"])
    p.add_argument("--batch", nargs="+", type=int, default=[4])
    p.add_argument("--scale", nargs="+", default=["l2_bytes=2", "sms=2"])
    p.add_argument("--noop-tasks", type=int, default=300)
    p.add_argument("--in-process", action="store_true", help="also time --jobs 1 (this process, all Numba threads)")
    args = p.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for workers in (1, 2):
            r = measure(args, workers, folder)
            results.append(r)
            per_task = (r["wall"] * workers - r["task_seconds"]) / r["tasks"]
            print(f"{workers} worker{'s' if workers > 1 else ' '}: sweep {r['wall']:6.1f} s wall, "
                  f"{len(r['doc']['cases'])} cases, {r['tasks']} tasks, {r['task_seconds']:6.1f} s inside the "
                  f"simulation tasks; overhead {1e3 * per_task:6.1f} ms/task (idle included); no-op task "
                  f"{1e3 * r['noop']:5.2f} ms; cluster start {r['start']:.1f} s, warm-up {r['warm']:.1f} s")
        if args.in_process:
            wall, _, seconds = _run_sweep(_sweep_argv(args, os.path.join(folder, "serial.h5")) + ["--jobs", "1"])
            print(f"in process (--jobs 1, all Numba threads per simulation): {wall:.1f} s wall, "
                  f"{sum(seconds):.1f} s inside the simulations")
    one, two = results
    same = (one["doc"]["simulated"] is not None and all(
        (one["doc"]["simulated"][k] == two["doc"]["simulated"][k]).all() for k in one["doc"]["simulated"]))
    speedup = one["wall"] / two["wall"]
    print(f"speedup 2 workers vs 1: {speedup:.2f}x (target >= {TARGET}x) {'OK' if speedup >= TARGET else 'BELOW TARGET'}"
          f"; results identical: {same}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
