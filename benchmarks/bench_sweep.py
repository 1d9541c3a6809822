"""A simulated sweep on 1 and on 2 local Dask workers (DESIGN section 8 target: 2 workers >= 1.7x faster).

    python benchmarks/bench_sweep.py [--networks vgg16] [--gpu v100 a100] [--batch 16] [--scale l2_bytes=2]
                                     [--reps 2] [--noop-tasks 300] [--in-process]

The default sweep: vgg16 at batch 16 on v100 and a100, each also with twice the L2: 4 cases, 40
tasks (4 predictions and 36 simulations: vgg16's 13 layers have 9 distinct shapes), about 30 s of
simulation on one core. Two LocalClusters as ``--jobs`` starts them (1 and 2 worker processes, one
thread and one Numba thread each), every worker warmed up (imports, Numba cache load) by one tiny
simulation; then the same ``python -m validation.sweep ... --simulate`` through ``--scheduler``,
alternately on 1 and 2 workers, ``--reps`` times; the speedup compares the best run of each. Cluster
start-up and warm-up are printed apart. Overhead per task: (wall time x workers - the tasks' own
time) / tasks for the sweep, and the wall time per no-op task through ``Executor.run`` on a connected
client. Each run also prints the CPU time of the workers and of this process (the client and the
local cluster's scheduler and nannies) and how many cores other processes used meanwhile
(/proc/stat): on a shared machine that, not the code, is what moves the figures.
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
from traces.executor import Executor, local_cluster  # noqa: E402
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


def _busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (all processes, /proc/stat)."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def start_cluster(workers: int) -> dict:
    from distributed import Client
    start = time.perf_counter()
    cluster = local_cluster(workers)
    client = Client(cluster, set_as_default=False)
    started = time.perf_counter()
    client.run(_warm_up)
    return {"workers": workers, "cluster": cluster, "client": client, "start": started - start,
            "warm": time.perf_counter() - started}


def timed_sweep(args, entry, out) -> dict:
    """The sweep against ``entry``'s cluster, with the CPU time its workers and everything else used."""
    client, address = entry["client"], entry["cluster"].scheduler_address
    cpu_before, busy_before, own_before = client.run(time.process_time), _busy_seconds(), time.process_time()
    wall, doc, seconds = _run_sweep(_sweep_argv(args, out) + ["--scheduler", address])
    cpu_after, busy_after, own_after = client.run(time.process_time), _busy_seconds(), time.process_time()
    workers_cpu = sum(cpu_after[w] - cpu_before[w] for w in cpu_after if w in cpu_before)
    others = (busy_after - busy_before) - workers_cpu - (own_after - own_before)
    return {"wall": wall, "doc": doc, "task_seconds": sum(seconds), "tasks": len(doc["cases"]) + len(seconds),
            "workers_cpu": workers_cpu, "client_cpu": own_after - own_before, "others": others}


def noop_seconds(entry, tasks: int) -> float:
    """Wall time per no-op task through Executor.run on a connected client."""
    with Executor(scheduler=entry["cluster"].scheduler_address) as executor:
        start = time.perf_counter()
        executor.run(_noop, [((i,), {}) for i in range(tasks)])
        return (time.perf_counter() - start) / tasks


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", nargs="+", default=["vgg16"])
    p.add_argument("--gpu", nargs="+", default=["v100", "a100"])
    p.add_argument("--batch", nargs="+", type=int, default=[16])
    p.add_argument("--scale", nargs="+", default=["l2_bytes=2"])
    p.add_argument("--reps", type=int, default=2, help="alternating runs on 1 and 2 workers (default 2)")
    p.add_argument("--noop-tasks", type=int, default=300)
    p.add_argument("--in-process", action="store_true", help="also time --jobs 1 (this process, all Numba threads)")
    args = p.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    clusters = {workers: start_cluster(workers) for workers in (1, 2)}
    for entry in clusters.values():
        print(f"{entry['workers']} worker(s): cluster start {entry['start']:.1f} s, warm-up {entry['warm']:.1f} s")
    runs = {1: [], 2: []}
    try:
        with tempfile.TemporaryDirectory() as folder:
            for rep in range(args.reps):
                for workers, entry in clusters.items():
                    r = timed_sweep(args, entry, os.path.join(folder, f"sweep{workers}_{rep}.h5"))
                    runs[workers].append(r)
                    per_task = (r["wall"] * workers - r["task_seconds"]) / r["tasks"]
                    print(f"run {rep + 1}, {workers} worker{'s' if workers > 1 else ' '}: {r['wall']:6.1f} s wall, "
                          f"{len(r['doc']['cases'])} cases, {r['tasks']} tasks, {r['task_seconds']:6.1f} s in the "
                          f"simulation tasks, CPU of the workers {r['workers_cpu']:5.1f} s and of the client and "
                          f"scheduler {r['client_cpu']:4.1f} s; overhead {1e3 * per_task:6.1f} "
                          f"ms/task (idle included); other processes used {r['others'] / r['wall']:.2f} cores")
            if args.in_process:
                wall, _, seconds = _run_sweep(_sweep_argv(args, os.path.join(folder, "serial.h5")) + ["--jobs", "1"])
                print(f"in process (--jobs 1, all Numba threads per simulation): {wall:.1f} s wall, "
                      f"{sum(seconds):.1f} s in the simulations")
        for workers, entry in clusters.items():
            print(f"{workers} worker(s): no-op task {1e3 * noop_seconds(entry, args.noop_tasks):.2f} ms wall each "
                  f"({args.noop_tasks} tasks)")
    finally:
        for entry in reversed(clusters.values()):      # the first one restores the log level on closing
            entry["client"].close()
            entry["cluster"].close()
    first = runs[1][0]["doc"]["simulated"]
    same = all((r["doc"]["simulated"][k] == first[k]).all() for rs in runs.values() for r in rs for k in first)
    best = {workers: min(r["wall"] for r in rs) for workers, rs in runs.items()}
    speedup = best[1] / best[2]
    print(f"speedup 2 workers vs 1 (best of {args.reps} each): {speedup:.2f}x (target >= {TARGET}x) "
          f"{'OK' if speedup >= TARGET else 'BELOW TARGET'}; results identical in every run: {same}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
