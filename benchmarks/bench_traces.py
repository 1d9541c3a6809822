"""Benchmark the request-stream generator and the whole simulation pipeline (DESIGN section 8).

    python benchmarks/bench_traces.py [--batch 32] [--train 32] [--gpu v100] [--skip-rss]

Prints, each next to its target:
  * generator-only throughput (M sectors/s) over vgg16's conv layers,
  * simulate_layer throughput with 1 and 2 threads (M L1 load sector lookups/s),
  * time for all 13 vgg16 conv layers at batch 1 (and at --batch N if given),
  * with --train N: a simulated training step of vgg16 at batch N (fprop, dgrad and wgrad of every
    conv layer, 2 threads) and its time over fprop's (target at batch 32: <= 3),
  * peak RSS of one simulation at batch 1, 4 and 16 (fresh processes).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time

import numba

from simcore import gpu as get_gpu
from simcore import hierarchy
from simcore import metrics as M
from traces import ConvLayer, KernelConfig, iter_request_chunks, simulate_layer


def vgg16_layers(batch: int = 1) -> list:
    try:
        from traces import network
        return network("vgg16", batch=batch)
    except ImportError:  # traces.networks not there: the 13 convs of VGG-16 (224x224, 3x3, pad 1)
        layers, size, c, i = [], 224, 3, 0
        for block, (k, reps) in enumerate([(64, 2), (128, 2), (256, 3), (512, 3), (512, 3)], 1):
            for rep in range(1, reps + 1):
                layers.append(ConvLayer(batch, c, size, size, k, 3, 3, pad=1, name=f"conv{block}_{rep}"))
                c = k
                i += 1
            size //= 2
        return layers


def generator_throughput(layers, g, kernel):
    total = 0
    t0 = time.perf_counter()
    for layer in layers:
        for chunk in iter_request_chunks(layer, g, kernel):
            total += len(chunk.sectors)
    dt = time.perf_counter() - t0
    return total, dt


def pipeline(layers, g, kernel, jobs):
    sectors = 0
    t0 = time.perf_counter()
    for layer in layers:
        sectors += simulate_layer(layer, g, kernel, jobs=jobs)[M.L1_LD_SECTORS]
    return sectors, time.perf_counter() - t0


def training_step(layers, g, jobs, base=None, per_layer=None):
    """Seconds of simulate_layer over ``layers`` for each op (fprop, dgrad, wgrad), and L1 load sectors.
    The three ops of a layer run one after the other, so a change in the machine's load during the run
    weighs on them alike. ``per_layer``: called with (layer, {op: seconds}) after each layer."""
    base = KernelConfig() if base is None else base
    seconds = dict.fromkeys(("fprop", "dgrad", "wgrad"), 0.0)
    sectors = dict.fromkeys(seconds, 0)
    for layer in layers:
        this = {}
        for op in seconds:
            n, this[op] = pipeline([layer], g, dataclasses.replace(base, op=op), jobs)
            sectors[op] += n
            seconds[op] += this[op]
        if per_layer is not None:
            per_layer(layer, this)
    return seconds, sectors


def _rss_child(batch: int, gpu_name: str) -> None:
    """Run in a fresh process: simulate one vgg16 layer at `batch`, print peak RSS (MiB)."""
    g, kernel = get_gpu(gpu_name), KernelConfig()
    layer = [x for x in vgg16_layers(batch) if x.name == "conv3_1"][0]
    simulate_layer(layer, g, kernel, jobs=1)
    print(json.dumps({"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def peak_rss(batch: int, gpu_name: str) -> float:
    out = subprocess.run([sys.executable, __file__, "--rss-child", str(batch), "--gpu", gpu_name],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["rss_mib"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=None, help="also time vgg16 at this batch (target 32: <= 60 s)")
    ap.add_argument("--train", type=int, default=None, metavar="BATCH",
                    help="also time a training step (fprop + dgrad + wgrad) of vgg16 at this batch "
                         "(target 32: <= 3x fprop)")
    ap.add_argument("--gpu", default="v100")
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--rss-child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rss_child is not None:
        _rss_child(args.rss_child, args.gpu)
        return 0
    g, kernel = get_gpu(args.gpu), KernelConfig()
    layers = vgg16_layers(1)
    print(f"machine: {os.cpu_count()} cores, numba threads available {numba.config.NUMBA_NUM_THREADS}; "
          f"gpu {g.name}, kernel {kernel.tile_m}x{kernel.tile_n}x{kernel.tile_k} {kernel.layout} {kernel.dtype}")
    # warm the JIT caches: a small layer for the serial path, then conv5_1 in chunks of 128 Ki sectors
    # (above the hierarchy's 64 Ki-sector threshold, so that its serial-or-parallel probe runs both
    # paths) to compile or load the parallel kernels; the probe's verdict is then forgotten, so that
    # the timed runs probe as a fresh process does
    small = ConvLayer(1, 8, 8, 8, 8, 3, 3, pad=1)
    for jobs in (1, 2):
        simulate_layer(small, g, kernel, jobs=jobs)
    if args.train:
        # the training step's dgrad and wgrad generators too, so that no compilation (or loading from
        # Numba's cache) falls inside the timed passes: one run had 7.9 and 7.6 s of it in conv1_1's
        # dgrad and wgrad
        for op in ("dgrad", "wgrad"):
            simulate_layer(small, g, dataclasses.replace(kernel, op=op), jobs=2)
    simulate_layer(layers[-3], g, kernel, jobs=2, max_sectors=1 << 17)
    hierarchy._VERDICTS.clear()
    for _ in iter_request_chunks(small, g, kernel):
        pass

    n, dt = generator_throughput(layers, g, kernel)
    print(f"generator only, vgg16 b1: {n / 1e6:.1f} M sectors in {dt:.2f} s = {n / dt / 1e6:.0f} M sectors/s "
          f"(no target; must be well above the pipeline's)")
    rates = {}
    for jobs in (1, 2):
        n, dt = pipeline(layers, g, kernel, jobs)
        rates[jobs] = n / dt / 1e6
        extra = "" if jobs == 1 else f", {'faster' if rates[2] > rates[1] else 'NOT faster'} than 1 thread"
        print(f"simulate_layer jobs={jobs}, vgg16 b1: {n / 1e6:.1f} M L1 load sector lookups in {dt:.2f} s = "
              f"{rates[jobs]:.1f} M/s (target >= 50 M/s on one core{extra})")
        if jobs == 2:
            print(f"vgg16 batch 1 on {g.name}, 13 conv layers, warm: {dt:.2f} s (target <= 5 s)")
    if args.batch:
        n, dt = pipeline(vgg16_layers(args.batch), g, kernel, 2)
        target = " (target <= 60 s)" if args.batch == 32 else ""
        print(f"vgg16 batch {args.batch} on {g.name}: {dt:.1f} s, {n / 1e6:.0f} M L1 sector lookups, "
              f"{n / dt / 1e6:.1f} M/s{target}")
    if args.train:
        def show(layer, secs):
            print(f"  {layer.name}: " + ", ".join(f"{op} {t:.2f} s" for op, t in secs.items()), flush=True)
        seconds, sectors = training_step(vgg16_layers(args.train), g, 2, per_layer=show)
        ratio = sum(seconds.values()) / seconds["fprop"]
        target = " (target <= 3)" if args.train == 32 else ""
        print(f"training step, vgg16 batch {args.train} on {g.name}, 2 threads, load average "
              f"{os.getloadavg()[0]:.1f}: " + ", ".join(f"{op} {seconds[op]:.1f} s ({sectors[op] / 1e6:.0f} M L1 "
                                                         f"load sectors)" for op in seconds)
              + f"; (fprop + dgrad + wgrad) / fprop = {ratio:.2f}{target}")
    if not args.skip_rss:
        r1, r4, r16 = (peak_rss(b, args.gpu) for b in (1, 4, 16))
        print(f"peak RSS, vgg16 conv3_1 alone: batch 1 {r1:.0f} MiB, batch 4 {r4:.0f} MiB, batch 16 {r16:.0f} MiB "
              f"(target: independent of batch; ratio {r16 / r1:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
