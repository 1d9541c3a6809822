"""Developer check: model vs simulation error per layer (python -m analytic._devcheck vgg16 v100 1)."""
from __future__ import annotations

import json
import os
import sys
import time

import simcore
import traces
from simcore import metrics as M

from . import predict_layer

KEYS = (("L1 ld sectors", M.L1_LD_SECTORS), ("L1 ld requests", M.L1_LD_REQUESTS),
        ("L2 read sectors", M.L2_RD_SECTORS), ("DRAM read sectors", M.DRAM_RD_SECTORS),
        ("DRAM write sectors", M.DRAM_WR_SECTORS), ("L2 dirty at end", M.L2_DIRTY_AT_END))


def simulate(net, batch, gpu_name, kernel, cache_dir=None):
    fn = None
    if cache_dir:
        fn = os.path.join(cache_dir, f"sim_{net}_{batch}_{gpu_name}_default.json")
        if os.path.exists(fn):
            return json.load(open(fn))
    out = []
    for layer in traces.network(net, batch):
        r = traces.simulate_layer(layer, simcore.gpu(gpu_name), kernel)
        r["_name"] = layer.name
        out.append(r)
    if fn:
        json.dump(out, open(fn, "w"))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    net = argv[0] if argv else "vgg16"
    gname = argv[1] if len(argv) > 1 else "v100"
    batch = int(argv[2]) if len(argv) > 2 else 1
    verbose = "-v" in argv
    cache = os.environ.get("DELTASIM_SIMCACHE")
    kernel = traces.KernelConfig()
    gpu = simcore.gpu(gname)
    t0 = time.time()
    sims = simulate(net, batch, gname, kernel, cache)
    t1 = time.time()
    layers = traces.network(net, batch)
    preds = [predict_layer(l, gpu, kernel) for l in layers]
    errs = {label: [] for label, _ in KEYS}
    for layer, sim, pred in zip(layers, sims, preds):
        row = []
        for label, key in KEYS:
            s, p = sim[key], pred[key]
            e = (p - s) / s if s else (0.0 if p == 0 else float("inf"))
            errs[label].append(abs(e))
            row.append(f"{e * 100:+7.1f}%")
        if verbose:
            print(f"{layer.name[:24]:24s} " + " ".join(row))
    print(f"{net} batch {batch} on {gname}: simulation {t1 - t0:.1f} s")
    for label, _ in KEYS:
        v = errs[label]
        print(f"  {label:20s} mean {100 * sum(v) / len(v):6.2f}%  worst {100 * max(v):6.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
