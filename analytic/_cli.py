"""Shared helpers of the analytic CLIs (argument checks, atomic output files, the main wrapper)."""
from __future__ import annotations

import importlib.util
import json
import os

from traces.cli import ArgumentParser as Parser  # noqa: F401  (the analytic CLIs' names for them)
from traces.cli import CLIError as CliError
from traces.cli import cli_main as run_main  # noqa: F401
from traces.files import atomic_write




def parse_int_list(text: str, what: str) -> list:
    items = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise CliError(f"{what} must be a comma-separated list of positive integers, got {text!r}") from None
        if value <= 0:
            raise CliError(f"{what} must be positive, got {value}")
        items.append(value)
    if not items:
        raise CliError(f"{what} is empty")
    return items


def resolve_gpu(name):
    import simcore
    try:
        return simcore.gpu(name)
    except (ValueError, TypeError) as err:
        raise CliError(str(err)) from None


def resolve_kernel(args):
    """The KernelConfig of the kernel options: ``--kernel`` (a `traces.KERNELS` preset) overridden by the
    options given (``--op train``: the fprop kernel; `predict_layers` runs the three passes)."""
    from traces.presets import kernel_from_options
    op = getattr(args, "op", "fprop")
    try:
        kernel = kernel_from_options(args.kernel, tile=args.tile, layout=args.layout, dtype=args.dtype,
                                     vector=args.vector, math=args.math, op="fprop" if op == "train" else op)
        if op == "train":
            from .training import pass_kernels
            pass_kernels(kernel)
        return kernel
    except (ValueError, TypeError) as err:
        if "unknown kernel" in str(err):
            raise CliError(f"--kernel: {err}") from None
        raise CliError(f"--op train: {err}" if op == "train" else str(err)) from None


def pass_kernels_of(args, kernel) -> list:
    """The kernels of ``--op``: ``[kernel]``, or (train) the fprop, dgrad and wgrad kernels."""
    if getattr(args, "op", "fprop") != "train":
        return [kernel]
    from .training import pass_kernels
    return list(pass_kernels(kernel).values())


def predict_layers(args, layers, gpu) -> list:
    """Per layer, the prediction of ``--op`` on ``gpu``: `predict_layer`'s dict, or (train) the step's
    (`analytic.training.step_total` of the three passes) with ``passes``: ``{op: prediction}``."""
    from .model import predict_network
    from .training import predict_step_network
    if getattr(args, "op", "fprop") != "train":
        return predict_network(layers, gpu, args.kernel, args.factors_obj)
    return [dict(row["step"], passes={op: row[op] for op in row if op != "step"})
            for row in predict_step_network(layers, gpu, args.kernel, args.factors_obj)]


def resolve_factors(path):
    from .factors import ReuseFactors
    if path is None:
        return None
    try:
        return ReuseFactors.load(path)
    except ValueError as err:
        raise CliError(str(err)) from None


def network_layers(name, batch):
    import traces
    try:
        return traces.resolve_layers(name, batch)
    except (ValueError, TypeError, KeyError) as err:
        msg = err.args[0] if err.args else str(err)
        raise CliError(str(msg)) from None


def check_output_path(path, what):
    if path is None:
        return
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise CliError(f"{what}: folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise CliError(f"{what}: {path!r} is a folder")


def check_png_output(path, what):
    """``path`` (None: no plot) must be a writable place for a .png file, and matplotlib importable."""
    check_output_path(path, what)
    if path is None:
        return
    if not path.lower().endswith(".png"):
        raise CliError(f"{what} must be a .png file, got {path!r}")
    if importlib.util.find_spec("matplotlib") is None:
        raise CliError(f"{what} needs matplotlib, which is not installed (pip install 'deltasim[plot]')")


def checked_layers(network, batch, kernel, op=None):
    """The conv layers of ``network`` at ``batch``, each checked against ``kernel`` (``op`` train: against
    each pass's kernel)."""
    layers = network_layers(network, batch)
    kernels = [kernel]
    if op == "train":
        from .training import pass_kernels
        kernels = list(pass_kernels(kernel).values())
    for layer in layers:
        for k in kernels:
            try:
                k.check_layer(layer)
            except ValueError as err:
                raise CliError(str(err)) from None
    return layers


def write_outputs(json_path, doc, plot_path, figure):
    """The optional JSON document and PNG figure of an analytic CLI, each written whole or not at all;
    ``figure()`` makes the matplotlib figure (called only when there is a ``plot_path``). A file that
    cannot be written is a `CliError` naming it."""
    def save_plot(path):
        from .plots import save_figure
        save_figure(figure(), path)

    for path, write in ((json_path, lambda path: write_json(path, doc)), (plot_path, save_plot)):
        if path:
            try:
                write(path)
            except OSError as err:
                raise CliError(f"cannot write {path}: {err.strerror or err}") from None


def write_json(path, doc):
    def writer(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=2, default=_json_default)
            fh.write("\n")
    atomic_write(path, writer)


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def clean_json(value):
    """inf/nan -> None (strict JSON)."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    return value


def add_kernel_arguments(parser):
    from traces.kernel import DTYPE_BYTES, MATHS
    parser.add_argument("--kernel", default=None, metavar="NAME",
                        help="named kernel of traces.KERNELS, the base the kernel options override "
                             "(default simt_128x128x8)")
    parser.add_argument("--layout", default=None, choices=("nhwc", "nchw"), help="data layout (default nhwc)")
    parser.add_argument("--dtype", default=None, choices=tuple(DTYPE_BYTES), help="element type (default fp32)")
    parser.add_argument("--tile", default=None, help="CTA tile MxNxK (default 128x128x8)")
    parser.add_argument("--vector", type=int, default=None, help="elements per thread access")
    parser.add_argument("--math", default=None, choices=MATHS, help="simt or tensorop (default simt)")
    parser.add_argument("--op", default="fprop", choices=("fprop", "dgrad", "wgrad", "train"),
                        help="convolution pass of the forward layers, or train: a training step (fprop + dgrad + "
                             "wgrad; each layer's time the sum of its three passes) (default fprop)")
    parser.add_argument("--factors", default=None, help="ReuseFactors JSON file")
