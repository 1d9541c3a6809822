"""Dump the exact request stream of one conv layer to an HDF5 trace file.

    python -m traces.dump resnet50 --layer layer2.0.conv2 --gpu v100 -o conv2.h5
    python -m traces.dump my_layers.json --layer mine --batch 4 --tile 128x64x8 -o mine.h5
    python -m traces.dump vgg16 --layer conv3_1 --op dgrad -o conv3_1_dgrad.h5

NETWORK is a network name (``traces.NETWORKS``), a JSON layer file (``traces.load_layers``) or an ONNX model
(``traces.load_onnx``), resolved by ``traces.resolve_layers``.
Bad input exits with status 2 and one ``error: ...`` line on stderr; the output file is written to a
temporary name and renamed only when complete, so a failed or interrupted run leaves nothing behind.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import NamedTuple

import numpy as np
from tqdm import tqdm

from simcore.gpus import GPUS, gpu as lookup_gpu
from simcore.metrics import KIND_ST

from .cli import ArgumentParser, cli_main
from .kernel import DTYPE_BYTES, LAYOUTS, OPS, KernelConfig
from .presets import DEFAULT_KERNEL, KERNELS, kernel_from_options
from .layer import ConvLayer
from .networks import NETWORKS
from .resolve import resolve_layers

__all__ = ["create_parser", "check_arguments", "run", "main"]


class Resolved(NamedTuple):
    layer: ConvLayer
    gpu: object
    kernel: KernelConfig
    output: str


def create_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m traces.dump",
        description="Write the exact warp-request stream of one convolution layer (DESIGN section 3) "
                    "to a compressed HDF5 trace file.")
    parser.add_argument("network", metavar="NETWORK",
                        help=f"network name ({', '.join(NETWORKS)}), a JSON layer file or an .onnx model")
    parser.add_argument("--layer", required=True, metavar="NAME", help="layer name within the network")
    parser.add_argument("--gpu", default="v100", help=f"GPU ({', '.join(GPUS)}; default v100)")
    parser.add_argument("--batch", default=None, metavar="N",
                        help="batch size (default 1; for a JSON file: replaces the file's n)")
    parser.add_argument("--kernel", default=None, metavar="NAME",
                        help=f"named kernel, the base the options below override ({', '.join(KERNELS)}; "
                             f"default {DEFAULT_KERNEL})")
    parser.add_argument("--layout", default=None, help=f"tensor layout ({', '.join(LAYOUTS)}; default nhwc)")
    parser.add_argument("--dtype", default=None, help=f"element type ({', '.join(DTYPE_BYTES)}; default fp32)")
    parser.add_argument("--tile", default=None, metavar="MxNxK", help="CTA tile (default 128x128x8)")
    parser.add_argument("--op", default="fprop", choices=OPS,
                        help="pass: fprop, dgrad (dx) or wgrad (dw) of the forward layer (default fprop)")
    parser.add_argument("--compression", default="lzf", choices=("lzf", "gzip"),
                        help="HDF5 compression (default lzf)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.h5", help="output trace file")
    return parser


def _positive_int(field, text) -> int:
    try:
        value = int(str(text), 10)
    except ValueError:
        raise ValueError(f"--{field} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise ValueError(f"--{field} must be a positive integer, got {text!r}")
    return value


def check_arguments(args) -> Resolved:
    """Resolve and check parsed arguments; raise ValueError (one line) on bad input."""
    batch = 1 if args.batch is None else _positive_int("batch", args.batch)
    source = args.network
    layers = resolve_layers(source, None if args.batch is None else batch)
    by_name = {layer.name: layer for layer in layers}
    if args.layer not in by_name:
        raise ValueError(f"unknown layer {args.layer!r} in {source}; its layers: "
                         f"{', '.join(layer.name or '(unnamed)' for layer in layers)}")
    layer = by_name[args.layer]
    try:
        the_gpu = lookup_gpu(args.gpu)
    except (TypeError, ValueError) as err:
        raise ValueError(str(err)) from None
    try:
        kernel = kernel_from_options(args.kernel, tile=args.tile, op=args.op,
                                     layout=args.layout and args.layout.strip().lower(),
                                     dtype=args.dtype and args.dtype.strip().lower())
    except (TypeError, ValueError) as err:
        raise ValueError(f"bad kernel (--kernel {args.kernel} --tile {args.tile} --layout {args.layout} "
                         f"--dtype {args.dtype} --op {args.op}): {err}") from None
    try:
        kernel.check_layer(layer)
        kernel.l1_config(the_gpu)
    except (TypeError, ValueError) as err:
        raise ValueError(str(err)) from None
    output = args.output
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise ValueError(f"output directory {directory} does not exist")
    if os.path.isdir(output):
        raise ValueError(f"output {output} is a directory")
    return Resolved(layer, the_gpu, kernel, output)


def _with_progress(chunks, plan, layer, enabled):
    """Pass ``chunks`` through, advancing a tqdm bar by CTAs whose output stores have been issued."""
    done = np.zeros(plan.blocks, dtype=bool)        # linear block ids, swizzled grid included
    finished = 0
    with tqdm(total=plan.ctas, unit="CTA", desc=layer.name or "layer", disable=not enabled, file=sys.stderr,
              leave=False) as bar:
        for chunk in chunks:
            if _STOP.is_set():
                raise KeyboardInterrupt
            stores = np.asarray(chunk.cta)[np.asarray(chunk.kind) == KIND_ST]
            if len(stores):
                stores = stores[(stores >= 0) & (stores < len(done))]
                done[stores] = True
                now = int(np.count_nonzero(done))
                bar.update(now - finished)
                finished = now
            yield chunk


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def run(args) -> int:
    """Check ``args``, generate the layer's request stream and write it. Returns 0."""
    resolved = check_arguments(args)
    from .stream import iter_request_chunks, plan_stream
    from .tracefile import write_trace

    layer, the_gpu, kernel, output = resolved
    chunks = _with_progress(iter_request_chunks(layer, the_gpu, kernel), plan_stream(layer, the_gpu, kernel),
                            layer, enabled=not args.no_progress)
    trace = write_trace(output, chunks, layer, kernel, the_gpu, compression=args.compression)
    print(f"{output}: {layer.name} {kernel.op} on {the_gpu.name} ({kernel.tile_m}x{kernel.tile_n}x{kernel.tile_k} "
          f"{kernel.layout} {kernel.dtype}, batch {layer.n}): {trace.n_requests} requests, "
          f"{trace.n_sectors} sectors, {_size(trace.size_bytes)}")
    return 0


def main(argv=None) -> int:
    """CLI entry point: 0 on success, 2 on bad input (one ``error:`` line on stderr), 130 on interrupt."""
    return cli_main(create_parser, lambda args: None, _run_until_stopped, argv)


def _run_until_stopped(args) -> int:
    """`run`, with SIGINT/SIGTERM setting a flag checked between chunks (raising from the handler could
    land in a callback that swallows it); the interrupted write then removes its temporary file. A
    second signal interrupts at once."""
    previous = {}
    _STOP.clear()
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, _request_stop)
    try:
        return run(args)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_STOP = threading.Event()


def _request_stop(signum, frame):
    if _STOP.is_set():
        raise KeyboardInterrupt
    _STOP.set()


if __name__ == "__main__":
    sys.exit(main())
