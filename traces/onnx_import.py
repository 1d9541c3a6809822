"""``load_onnx(path, batch=None)``: the 2-D convolutions of an ONNX model as `ConvLayer` objects.

Every ``Conv`` node of the main graph (default domain), in graph order, becomes one layer: input
(N, C, H, W), weight (K, C / group, R, S), ``strides``, ``dilations``, ``group`` and ``pads`` /
``auto_pad`` from the node. Shapes come from the graph's value infos, its initializers and its inputs;
where some are missing, ``onnx.shape_inference`` (with data propagation) supplies them, and where even
that leaves a Conv's shape unknown (shape arithmetic that the inference does not propagate, e.g.
``Shape -> Gather -> Div -> Slice``), shape computations whose inputs are all known integer constants
are evaluated with ``onnx.reference`` and inference is run again, until every Conv is known or nothing
more can be folded. Weights are never read: files whose weights were stripped (initializers turned into
graph inputs) work the same, and float initializers' data is dropped right after loading.

Only the ``onnx`` package is needed (the ``onnx`` extra); it is imported when a file is read, so
`traces` imports without it.
"""
from __future__ import annotations

import dataclasses
import numbers
import os

import numpy as np

from .layer import ConvLayer

__all__ = ["load_onnx"]

_INSTALL_HINT = "reading .onnx files needs the onnx package: pip install -e '.[onnx]' (or pip install onnx)"
#: Folding rounds for shape arithmetic (each round folds every node that has become constant).
_MAX_FOLD_ROUNDS = 200
#: Integer constants up to this many elements are folded (shape vectors, never tensors).
_MAX_FOLD_ELEMENTS = 64


def _import_onnx():
    try:
        import onnx
        import onnx.shape_inference  # noqa: F401
    except ImportError as err:
        raise ImportError(_INSTALL_HINT) from err
    return onnx


def _check_batch(batch):
    if batch is None:
        return None
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch <= 0:
        raise ValueError(f"batch must be a positive integer or None, got {batch!r}")
    return int(batch)


def _one_line(err) -> str:
    return " ".join(str(err).split()) or type(err).__name__


# ---- reading -------------------------------------------------------------------------------------
def _read_model(onnx, path: str):
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:              # protobuf DecodeError and friends: not an ONNX file
        raise ValueError(f"{path}: not an ONNX model ({type(err).__name__}: {_one_line(err)})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ValueError(f"{path}: not an ONNX model (no IR version or no graph)")
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                   onnx.TensorProto.DOUBLE}
    for tensor in model.graph.initializer:          # weights: only their shapes matter
        if tensor.data_type in float_types:
            for field in ("raw_data", "float_data", "double_data", "int32_data"):
                tensor.ClearField(field)
    return model


def _dims(value_info):
    """A ValueInfo's shape: a tuple of int (known), str (symbolic) or None (unknown); None if no shape."""
    kind = value_info.type.WhichOneof("value")
    if kind != "tensor_type" or not value_info.type.tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                 for d in value_info.type.tensor_type.shape.dim)


def _shape_table(graph) -> dict:
    table = {tensor.name: tuple(tensor.dims) for tensor in graph.initializer}
    for info in list(graph.input) + list(graph.value_info) + list(graph.output):
        dims = _dims(info)
        if dims is not None:
            table[info.name] = dims
    return table


def _known(dims) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims[1:])


def _convs(graph):
    return [node for node in graph.node if node.op_type == "Conv" and node.domain in ("", "ai.onnx")]


def _all_known(graph, shapes) -> bool:
    return all(_known(shapes.get(node.input[0])) and _known(shapes.get(node.output[0]))
               and len(node.input) > 1 and _known(shapes.get(node.input[1])) for node in _convs(graph))


def _infer(onnx, model, path):
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as err:              # onnx raises its own InferenceError / ValidationError
        raise ValueError(f"{path}: ONNX shape inference failed: {_one_line(err)}") from None


# ---- folding shape arithmetic that inference leaves symbolic ---------------------------------------
def _constants(onnx, graph) -> dict:
    values = {}
    for tensor in graph.initializer:
        if tensor.data_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            values[tensor.name] = onnx.numpy_helper.to_array(tensor)
    for node in graph.node:
        if node.op_type != "Constant" or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        if attr.name == "value":
            values[node.output[0]] = onnx.numpy_helper.to_array(attr.t)
        elif attr.name in ("value_int", "value_ints"):
            values[node.output[0]] = np.array(onnx.helper.get_attribute_value(attr), dtype=np.int64)
    return values


def _evaluate(onnx, model, node, inputs):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for name, value in inputs.items()],
        [helper.make_value_info(name, onnx.TypeProto()) for name in node.output])
    tiny = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    return ReferenceEvaluator(tiny).run(None, inputs)


def _fold_round(onnx, model, shapes) -> bool:
    """Replace each node whose value is a known small integer constant by Constant nodes."""
    from onnx import helper, numpy_helper
    values = _constants(onnx, model.graph)
    changed, nodes = False, []
    for node in model.graph.node:
        outputs = None
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx") and _fully_static(shapes.get(node.input[0])):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            dims = shapes[node.input[0]]
            outputs = [np.array(dims[slice(attrs.get("start", 0), attrs.get("end"))], dtype=np.int64)]
        elif _foldable(node, values):
            try:
                outputs = _evaluate(onnx, model, node, {name: values[name] for name in node.input if name})
            except Exception:             # an op the reference evaluator cannot run: leave it
                outputs = None
        if outputs is None:
            nodes.append(node)
            continue
        changed = True
        for name, value in zip(node.output, outputs):
            values[name] = np.asarray(value)
            nodes.append(helper.make_node("Constant", [], [name], name=node.name,
                                          value=numpy_helper.from_array(np.asarray(value), name)))
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return changed


def _foldable(node, values) -> bool:
    """A default-domain node whose inputs are all small known integer constants (shape arithmetic)."""
    inputs = [name for name in node.input if name]
    return (node.domain in ("", "ai.onnx") and node.op_type not in ("Constant", "Conv") and bool(inputs)
            and all(name in values and values[name].dtype.kind in "iu"
                    and values[name].size <= _MAX_FOLD_ELEMENTS for name in inputs))


def _fully_static(dims) -> bool:
    return dims is not None and all(isinstance(d, int) and d > 0 for d in dims)


def _resolve_shapes(onnx, model, path):
    """The model (shape-inferred and folded where needed) and its shape table."""
    shapes = _shape_table(model.graph)
    if _all_known(model.graph, shapes):
        return model, shapes
    given = list(model.graph.value_info)           # the file's own value infos, kept on every round
    model = _infer(onnx, model, path)
    shapes = _shape_table(model.graph)
    for _ in range(_MAX_FOLD_ROUNDS):
        if _all_known(model.graph, shapes) or not _fold_round(onnx, model, shapes):
            break
        del model.graph.value_info[:]                # drop the symbolic dims of the previous round
        model.graph.value_info.extend(given)
        model = _infer(onnx, model, path)
        shapes = _shape_table(model.graph)
    return model, shapes


# ---- one Conv node -> ConvLayer ------------------------------------------------------------------
def module_path(node_name: str) -> str:
    """``/layer1/layer1.0/conv1/Conv`` (a PyTorch exporter scope) -> ``layer1.0.conv1``; other names unchanged."""
    parts = node_name.split("/")
    if len(parts) < 3 or parts[0] != "" or not all(parts[1:-1]):
        return node_name
    path = []
    for part in parts[1:-1]:
        if path and part.startswith(path[-1] + "."):
            path[-1] = part               # "features" then "features.1": the child's full name
        else:
            path.append(part)
    return ".".join(path)


def _pads(where, attrs, sizes, kernel, strides, dilations):
    """Begin pads per axis, checking that asymmetric or auto pads can be written as ConvLayer's."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    begins, ends = [], []
    for axis, (size, filt, stride, dil) in enumerate(zip(sizes, kernel, strides, dilations)):
        span = dil * (filt - 1) + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, (-(-size // stride) - 1) * stride + span - size)
            small = total // 2
            begin, end = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            begin = end = 0
        elif auto == "NOTSET":
            pads = list(attrs.get("pads", [0, 0, 0, 0]))
            if len(pads) != 4 or min(pads) < 0:
                raise ValueError(f"{where}: pads must be 4 non-negative numbers, got {pads}")
            begin, end = pads[axis], pads[axis + 2]
        else:
            raise ValueError(f"{where}: unknown auto_pad {auto!r}")
        begins.append(begin)
        ends.append(end)
        if begin != end:
            real = (size + begin + end - span) // stride + 1
            even = (size + 2 * begin - span) // stride + 1
            if real != even:
                raise ValueError(
                    f"{where}: asymmetric pads{'' if auto == 'NOTSET' else ' (auto_pad ' + auto + ')'} "
                    f"(begin {begin}, end {end} along {'hw'[axis]}) give {real} "
                    f"outputs, not the {even} of equal pads; ConvLayer pads both sides equally")
    return tuple(begins), tuple(ends)


def _layer(path, index, node, shapes, batch, helper) -> ConvLayer:
    where = f"{path}: Conv node {node.name or '#' + str(index)!r}"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = shapes.get(node.input[0])
    w = shapes.get(node.input[1]) if len(node.input) > 1 else None
    y = shapes.get(node.output[0])
    kernel_attr = attrs.get("kernel_shape")
    for source, dims in (("input", x), ("weight", w), ("kernel_shape", kernel_attr)):
        rank = None if dims is None else len(dims) + (2 if source == "kernel_shape" else 0)
        if rank is not None and rank != 4:
            raise ValueError(f"{where}: only 2-D convolutions (input N, C, H, W) are supported; its {source} "
                             f"{_show(dims)} makes it a {rank - 2}-D convolution")
    group = int(attrs.get("group", 1))

    def dim(dims, i):
        return dims[i] if dims is not None and isinstance(dims[i], int) and dims[i] > 0 else None

    c = dim(x, 1) or (dim(w, 1) * group if dim(w, 1) else None)
    k = dim(w, 0) or dim(y, 1)
    kernel = tuple(kernel_attr) if kernel_attr else (dim(w, 2), dim(w, 3))
    h, wd = dim(x, 2), dim(x, 3)
    missing = [f for f, v in (("C", c), ("H", h), ("W", wd), ("K", k), ("R", kernel[0]), ("S", kernel[1]))
               if v is None]
    if missing:
        raise ValueError(f"{where}: shape unknown ({', '.join(missing)} of input {node.input[0]!r} "
                         f"{_show(x)}, weight {_show(w)}, output {_show(y)}) even after ONNX shape inference")
    n = batch if batch is not None else (dim(x, 0) or 1)
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    pads, _ = _pads(where, attrs, (h, wd), kernel, strides, dilations)
    try:
        layer = ConvLayer(n, c, h, wd, k, kernel[0], kernel[1], stride=strides, pad=pads, dilation=dilations,
                          groups=group)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None
    expected = {"weight": ((k, c // group) + kernel, w), "output": ((k, layer.p, layer.q), y and y[1:])}
    for what, (ours, theirs) in expected.items():
        if theirs is not None and any(isinstance(t, int) and t > 0 and t != o for o, t in zip(ours, theirs)):
            raise ValueError(f"{where}: {what} shape {_show(theirs)} does not match the node's attributes "
                             f"(expected {_show(ours)})")
    return layer


def _show(dims) -> str:
    return "unknown" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


# ---- public --------------------------------------------------------------------------------------
def load_onnx(path, batch=None) -> list:
    """Every 2-D ``Conv`` node of an ONNX model, in graph order, as `ConvLayer` objects.

    Parameters
    ----------
    path : str or os.PathLike
        An ``.onnx`` file (weights may be stripped; external weight data is not read).
    batch : int, optional
        The batch size of every layer. None: the model's own batch dimension, and 1 where it is
        symbolic (e.g. ``N``).

    Returns
    -------
    list of ConvLayer
        Named after their nodes: a PyTorch exporter scope name (``/layer1/layer1.0/conv1/Conv``)
        becomes the module path (``layer1.0.conv1``); other names are kept; an unnamed node gets its
        output tensor's name, and a name that repeats gets ``#<index>`` appended.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    ImportError
        The onnx package is not installed.
    ValueError
        One line naming the file (and the node): not an ONNX model, no Conv nodes, a Conv that is not
        2-D, a Conv whose shape cannot be inferred, asymmetric pads that equal pads cannot express
        (extra padding at the end that no output reads is accepted), inconsistent shapes.
    """
    path = os.fspath(path)
    batch = _check_batch(batch)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: ONNX file not found")
    onnx = _import_onnx()
    model = _read_model(onnx, path)
    if not _convs(model.graph):
        ops = sorted({node.op_type for node in model.graph.node})
        raise ValueError(f"{path}: no Conv nodes in the ONNX graph ({len(model.graph.node)} nodes"
                         f"{': ' + ', '.join(ops[:12]) + (', ...' if len(ops) > 12 else '') if ops else ''})")
    model, shapes = _resolve_shapes(onnx, model, path)
    layers, seen = [], set()
    for index, node in enumerate(_convs(model.graph)):
        layer = _layer(path, index, node, shapes, batch, onnx.helper)
        name = module_path(node.name) or node.output[0]
        if name in seen:
            name = f"{name}#{index}"
        seen.add(name)
        layers.append(dataclasses.replace(layer, name=name))
    return layers
