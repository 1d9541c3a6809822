"""Where the time of one layer's simulation goes, phase by phase, on one thread.

    python benchmarks/bench_phases.py [--network vgg16] [--layer conv2_2] [--gpu v100] [--reps 5] [--op fprop]

The layer's request stream is generated once and kept in memory (this is a benchmark: the real
pipeline never holds more than one chunk), then replayed through a fresh hierarchy ``--reps`` times;
each phase's best time is reported in ns per L1 load sector:

  generate   the Numba stream generator (timed once, while the chunks are made)
  bucket     requests bucketed by SM
  l1         every SM's L1 in turn (also: slice and key of each L2-bound sector, slice histogram)
  l2bucket   L2-bound sectors copied into slice order
  l2         every L2 slice in turn

The sum is the serial pipeline's cost per L1 sector; DESIGN section 8 asks for 20 ns (50 M/s).
"""
from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from simcore import gpu as get_gpu
from simcore import hierarchy as H
from simcore import metrics as M
from traces import ConvLayer, KernelConfig, network
from traces.stream import _Generator, plan_stream

_FIELDS = ("sm", "operand", "kind", "first", "count", "sectors")


def make_chunks(layer, g, kernel):
    gen = _Generator(plan_stream(layer, g, kernel), 1 << 20, lean=True)
    bufs = gen.new_buffers()
    chunks, elapsed = [], 0.0
    while True:
        t0 = time.perf_counter()
        chunk = gen.fill(bufs)
        elapsed += time.perf_counter() - t0
        if chunk is None:
            return chunks, elapsed
        chunks.append(tuple(np.array(getattr(chunk, f)) for f in _FIELDS))


def replay(chunks, g, kernel, times):
    h = H.Hierarchy.for_gpu(g, kernel.l1_config(g))
    xor_hash = h.slice_hash == "xor"
    h._maps_cover(max(int(c[-1].max()) + 1 for c in chunks))      # the line -> slot map, one row
    maps = h._map_rows(1)

    def timed(key, fn, *args):
        t0 = time.perf_counter()
        fn(*args)
        times[key] = times.get(key, 0.0) + time.perf_counter() - t0

    for req_sm, req_op, req_st, req_first, req_count, sectors in chunks:
        n_req, n_sec = req_sm.shape[0], sectors.shape[0]
        keys = np.empty(n_sec, np.int16)
        packed = np.empty(n_sec, np.int64)
        reqs = np.empty(n_req, np.int64)
        timed("bucket", H._bucket_requests, req_sm, req_op, req_st, req_first, req_count, h.sms, h._starts_sm,
              reqs)
        timed("l1", H._l1_phase_serial, h._l1, h._g1, h._l1c, h.sms, h._starts_sm, reqs, sectors, h._shifts,
              h.l2_slices, xor_hash, keys, h._hist, maps, *h._l1_variant)
        timed("l2bucket", H._l2_bucket_counted, keys, sectors, req_op, req_st, req_first, req_count, h._hist,
              h._starts_slice, packed, h._shifts, h.l2_slices, h._slice_shift, h._g2)
        timed("l2", H._l2_phase_serial, h._l2, h.l2_slice.ways, h._tags, h._l2c, h.l2_slices, h._starts_slice,
              packed, h.l2_slice.sectors_per_line, maps)
    return h.metrics()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--network", default="vgg16")
    ap.add_argument("--layer", default="conv2_2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--gpu", default="v100")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--op", default="fprop", choices=("fprop", "dgrad", "wgrad"))
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    g, kernel = get_gpu(args.gpu), KernelConfig(op=args.op)
    layers = {x.name: x for x in network(args.network, batch=args.batch)}
    if args.layer not in layers:
        ap.error(f"--layer: {args.layer!r} is not a layer of {args.network} (one of {', '.join(layers)})")
    layer = layers[args.layer]
    make_chunks(ConvLayer(1, 8, 8, 8, 8, 3, 3, pad=1), g, kernel)      # warm the JIT
    chunks, gen_s = make_chunks(layer, g, kernel)
    best, metrics = {}, None
    for rep in range(args.reps + 1):
        times = {}
        metrics = replay(chunks, g, kernel, times)
        if rep:                                    # the first replay warms the JIT and the caches
            for key, value in times.items():
                best[key] = min(best.get(key, float("inf")), value)
    n = metrics[M.L1_LD_SECTORS]
    phases = {"generate": gen_s, **best}
    total = sum(phases.values())
    print(f"{args.network} {args.layer} {args.op} batch {args.batch} on {g.name}, one thread, load average "
          f"{os.getloadavg()[0]:.1f}: {n / 1e6:.2f} M L1 load sectors, L1 hit rate "
          f"{metrics[M.L1_LD_HITS] / n:.3f}, L2 read hit rate "
          f"{metrics[M.L2_RD_HITS] / max(1, metrics[M.L2_RD_SECTORS]):.3f}")
    print("  " + ", ".join(f"{k} {v * 1e9 / n:.1f}" for k, v in phases.items())
          + f" ns per L1 load sector; total {total * 1e9 / n:.1f} ns = {n / total / 1e6:.1f} M/s "
          f"(target: >= 50 M/s, 20 ns)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
