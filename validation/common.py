"""Helpers shared by the validation CLIs: argument parsing, atomic writes, versions (parallel runs: executor.py).

Nothing here imports `analytic` or `traces.simulate` at import time, so the CLIs can be imported (and
tested with fakes) before the heavy parts are loaded.
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import threading

import numpy as np

from traces.files import atomic_write  # noqa: F401  (re-exported for the CLIs)
from traces.simcache import package_version  # noqa: F401  (re-exported for the CLIs)

__all__ = ["CLIError", "ArgumentParser", "package_version", "versions", "atomic_write", "check_output_path",
           "add_kernel_arguments", "kernel_from_args", "op_kernels", "resolve_gpu", "cli_main",
           "rel_error", "parse_positive_int", "simulate_layer", "predict_layer", "reuse_factors_class"]


class CLIError(ValueError):
    """Bad command-line input (reported as one ``error: ...`` line, exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise `CLIError` instead of printing usage and exiting."""

    def error(self, message):  # noqa: D401 - argparse API
        raise CLIError(message)


def parse_positive_int(text: str) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


# ---- versions ------------------------------------------------------------------------------------
def versions() -> dict:
    """Versions of deltasim and the libraries that shape its results."""
    out = {"deltasim": package_version(), "python": platform.python_version(), "numpy": np.__version__}
    for name in ("numba", "h5py"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:  # pragma: no cover - optional at this level
            out[name] = None
    return out


# ---- files ---------------------------------------------------------------------------------------
def check_output_path(option: str, path) -> str:
    """Raise CLIError if ``path`` cannot be written (missing directory, a directory itself)."""
    path = os.fspath(path)
    if not path:
        raise CLIError(f"{option}: empty file name")
    if os.path.isdir(path):
        raise CLIError(f"{option} {path}: is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"{option} {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise CLIError(f"{option} {path}: directory {folder} is not writable")
    return path


# ---- the references the CLIs import (tests replace them in each CLI module) -----------------------
_SIMULATION_LOCK = threading.Lock()


def simulate_layer(layer, gpu, kernel, *, jobs=None) -> dict:
    """traces.simulate_layer (looked up at call time), one at a time per process: a Dask worker with
    several threads runs its simulations in turn (Numba's workqueue threading layer does not allow
    parallel kernels launched from two threads at once)."""
    from traces.simulate import simulate_layer as _simulate
    with _SIMULATION_LOCK:
        return _simulate(layer, gpu, kernel, jobs=jobs)


def predict_layer(layer, gpu, kernel, factors=None) -> dict:
    """analytic.predict_layer (looked up at call time)."""
    import analytic
    return analytic.predict_layer(layer, gpu, kernel, factors)


def reuse_factors_class():
    """analytic.ReuseFactors (looked up at call time)."""
    import analytic
    return analytic.ReuseFactors


# ---- kernel / GPU options ------------------------------------------------------------------------
def add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    """The kernel options: ``--kernel NAME`` (a `traces.KERNELS` preset, default simt_128x128x8) is the base,
    every other option given overrides its field."""
    from traces.kernel import DTYPE_BYTES, MATHS
    group = parser.add_argument_group("kernel")
    group.add_argument("--kernel", default=None, metavar="NAME",
                       help="named kernel of traces.KERNELS, the base the options below override "
                            "(default: simt_128x128x8)")
    group.add_argument("--tile", default=None, metavar="MxNxK",
                       help="CTA tile tile_m x tile_n x tile_k (default: the kernel's, 128x128x8)")
    group.add_argument("--layout", default=None, choices=("nhwc", "nchw"),
                       help="tensor layout (default: the kernel's, nhwc)")
    group.add_argument("--dtype", default=None, choices=tuple(DTYPE_BYTES),
                       help="element type (default: the kernel's, fp32)")
    group.add_argument("--vector", default=None, type=parse_positive_int, metavar="V",
                       help="elements per thread access (default: the kernel's, 1)")
    group.add_argument("--threads", default=None, type=parse_positive_int, metavar="T",
                       help="threads per CTA (default: the kernel's, 256)")
    group.add_argument("--math", default=None, choices=MATHS,
                       help="CUDA cores (simt) or SM80 tensor cores (tensorop) (default: the kernel's, simt)")
    group.add_argument("--op", default="fprop", choices=("fprop", "dgrad", "wgrad", "train"),
                       help="convolution pass of the forward layer, or train: all three passes of a training "
                            "step, each layer's and the step's total (default: %(default)s)")


def kernel_from_args(args):
    """Build the KernelConfig from --kernel, then --tile/--layout/--dtype/--vector/--threads/--math/--op
    (CLIError if invalid)."""
    from traces.presets import kernel_from_options
    try:
        return kernel_from_options(getattr(args, "kernel", None), tile=args.tile, layout=args.layout,
                                   dtype=args.dtype, vector=args.vector, threads=args.threads,
                                   math=getattr(args, "math", None), op=_first_op(args))
    except (TypeError, ValueError) as err:
        if "unknown kernel" in str(err):
            raise CLIError(f"--kernel: {err}") from None
        raise CLIError(f"--tile {args.tile}: {err}" if "tile must look like" in str(err) else str(err)) from None


def _first_op(args) -> str:
    op = getattr(args, "op", "fprop")
    return "fprop" if op == "train" else op


def op_kernels(args, kernel) -> list:
    """``[(op, kernel)]`` of ``--op``: one pass, or (train) fprop, dgrad and wgrad (CLIError when the
    kernel's settings do not allow a backward pass)."""
    if getattr(args, "op", "fprop") != "train":
        return [(kernel.op, kernel)]
    from analytic.training import pass_kernels
    try:
        return list(pass_kernels(kernel).items())
    except ValueError as err:
        raise CLIError(f"--op train: {err}") from None


def resolve_gpu(name: str):
    import simcore
    try:
        return simcore.gpu(name)
    except (TypeError, ValueError) as err:
        raise CLIError(str(err)) from None


def check_kernel_fits(kernel, gpu, layers) -> None:
    """Raise CLIError when the kernel cannot run on ``gpu`` or on one of ``layers``."""
    try:
        kernel.l1_config(gpu)
    except (TypeError, ValueError) as err:
        message = str(err)
        raise CLIError(message if "does not fit" in message else f"kernel does not fit on {gpu.name}: {message}") from None
    for layer in layers:
        try:
            kernel.check_layer(layer)
        except ValueError as err:
            raise CLIError(str(err)) from None


# ---- errors --------------------------------------------------------------------------------------
def rel_error(value, reference):
    """``(value - reference) / reference``; 0.0 when both are 0; None when undefined."""
    if value is None or reference is None:
        return None
    try:
        value, reference = float(value), float(reference)
    except (TypeError, ValueError):
        return None
    if not (np.isfinite(value) and np.isfinite(reference)):
        return None
    if reference == 0.0:
        return 0.0 if value == 0.0 else None
    return (value - reference) / reference


# ---- main wrapper --------------------------------------------------------------------------------
def cli_main(create_parser, check_arguments, run, argv=None) -> int:
    """Parse, check and run; bad input -> one ``error: ...`` line on stderr and exit status 2."""
    parser = create_parser()
    try:
        args = parser.parse_args(argv)
        check_arguments(args)
        return run(args)
    except SystemExit as exc:          # --help / --version
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError, OSError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
