"""``resolve_layers(spec, batch=None)``: the conv layers that a CLI's NETWORK argument names.

One place for every CLI (validation.compare, calibrate, accuracy; analytic.scaling, roofline;
traces.dump): a known network name (`NETWORKS`), a JSON layer file (`load_layers`) or an ONNX model
(`load_onnx`).
"""
from __future__ import annotations

import os

from .networks import NETWORKS, _check_batch, load_layers, network
from .onnx_import import load_onnx

__all__ = ["resolve_layers"]


def _kind(spec: str) -> str:
    """'network', 'json' or 'onnx' (by name, extension, then the file's first byte)."""
    if spec.strip().lower() in NETWORKS and os.path.sep not in spec:
        return "network"
    if os.path.isdir(spec):
        raise ValueError(f"{spec}: is a directory, not a layer file or an ONNX model")
    ext = os.path.splitext(spec)[1].lower()
    if ext in (".json", ".onnx"):
        return ext[1:]
    if os.path.isfile(spec):
        try:
            with open(spec, "rb") as fh:
                head = fh.read(64).lstrip()
        except OSError as err:
            raise ValueError(f"{spec}: cannot read: {err}") from None
        return "json" if head[:1] in (b"[", b"{") else "onnx"
    if os.path.sep in spec:
        raise ValueError(f"{spec}: file not found")
    raise ValueError(f"unknown network {spec!r}; known networks: {', '.join(NETWORKS)}; "
                     f"or give a .json layer file or an .onnx model")


def resolve_layers(spec, batch=None) -> list:
    """The conv layers of a network name, a JSON layer file or an ONNX model.

    Parameters
    ----------
    spec : str or os.PathLike
        A name in `NETWORKS` (case and surrounding blanks ignored), a path ending in ``.json``
        (`load_layers`) or ``.onnx`` (`load_onnx`), or another existing file (JSON if it starts with
        ``[`` or ``{``, else ONNX).
    batch : int, optional
        Batch size of every layer. None: 1 for a network, the file's own for a JSON file, the
        model's own for an ONNX file (1 where symbolic).

    Returns
    -------
    list of ConvLayer

    Raises
    ------
    ValueError
        One line: an unknown name (listing the known ones), a missing or unreadable file, a file that
        is not ONNX or not a valid layer file, the onnx package missing, a bad batch.
    TypeError
        ``spec`` is not a string or path.
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise TypeError(f"network must be a name or a file path, got {spec!r}")
    batch = None if batch is None else _check_batch(batch)
    kind = _kind(spec)
    if kind == "network":
        return network(spec, 1 if batch is None else batch)
    if not os.path.isfile(spec):
        raise ValueError(f"{spec}: {'layer' if kind == 'json' else 'ONNX'} file not found")
    try:
        if kind == "onnx":
            return load_onnx(spec, batch)
        layers = load_layers(spec)
    except (ImportError, OSError) as err:
        raise ValueError(str(err)) from None
    return layers if batch is None else [layer.with_batch(batch) for layer in layers]
