"""Helpers shared by the validation CLIs: argument parsing, atomic writes, versions (parallel runs: executor.py).

Nothing here imports `analytic` or `traces.simulate` at import time, so the CLIs can be imported (and
tested with fakes) before the heavy parts are loaded.
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
import sys
import threading

import numpy as np

from traces.cli import ArgumentParser, CLIError, cli_main  # noqa: F401  (re-exported for the CLIs)
from traces.executor import parse_positive_int  # noqa: F401  (re-exported for the CLIs)
from traces.files import atomic_write, write_text  # noqa: F401  (re-exported for the CLIs)
from traces.simcache import package_version  # noqa: F401  (re-exported for the CLIs)

__all__ = ["CLIError", "ArgumentParser", "package_version", "versions", "atomic_write", "write_text", "check_output_path",
           "add_kernel_arguments", "kernel_from_args", "op_kernels", "resolve_gpu", "cli_main",
           "rel_error", "parse_positive_int", "start_first_run", "finish_first_run", "simulate_layer", "predict_layer",
           "reuse_factors_class"]


def start_first_run(gpu=None, kernels=(), stream=None) -> list:
    """On a first run (the simulator's kernels not in Numba's on-disk cache yet: a fresh clone), say so
    in one line on ``stream`` (default stderr) and start background processes that compile them into
    the cache (``traces.simulate._compile_kernels``: the stream generator, the cache hierarchy), one
    part each, so that both use the machine's cores while this process predicts (the model needs no
    compilation: its first predictions run interpreted, `analytic._tiers`); ``finish_first_run``
    waits for them before the first simulation, which then loads the kernels. For
    ``validation.compare vgg16`` on the 2-core development machine about 12 and 11 CPU seconds
    (stream, hierarchy). ``gpu`` and ``kernels`` (the run's): which generators (ops) and which copy
    of the L1 loop to compile (default: v100, fprop). Later runs: nothing said, nothing started.
    Returns the processes."""
    from simcore._jit import compile_notice, is_cached
    from simcore._phases import _l1_sm
    from traces._generate import _generate
    if not compile_notice((_l1_sm, _generate), sys.stderr if stream is None else stream):
        return []
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["traces"].__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    ops = tuple(dict.fromkeys(kernel.op for kernel in kernels)) or ("fprop",)
    variant = None
    if gpu is not None:
        from simcore import Hierarchy
        from traces import KernelConfig
        first = kernels[0] if kernels else KernelConfig()
        variant = Hierarchy.for_gpu(gpu, first.l1_config(gpu))._l1_variant
    started = []
    for part, telltale, arguments in (("stream", _generate, f"ops={ops!r}"),
                                      ("hierarchy", _l1_sm, f"l1_variant={variant!r}")):
        if is_cached(telltale):
            continue
        code = f"from traces.simulate import _compile_kernels; _compile_kernels({part!r}, {arguments})"
        try:
            started.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except OSError:         # no process to spare: this process compiles them when it gets there
            break
    return started


def finish_first_run(started) -> None:
    """Wait for the processes of ``start_first_run`` (a failed one only means this process compiles what
    it did not)."""
    for process in started:
        process.wait()


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
