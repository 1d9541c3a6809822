"""traces.load_onnx on small graphs built with onnx.helper (real ONNX files, no download)."""
import subprocess
import sys

import numpy as np
import pytest

from traces import ConvLayer, load_onnx, resolve_layers

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

RNG = np.random.default_rng(7)


def tensor(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def save(path, nodes, inputs, outputs, initializers=(), value_info=(), opset=17, **opsets):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers),
                              value_info=list(value_info))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports)
    onnx.save(model, str(path))
    return model


def conv_file(path, x_shape=(1, 3, 8, 8), k=4, kernel=(3, 3), group=1, weights="input", node_name="c",
              **attrs):
    """One Conv node y = Conv(x, w); the weight a graph input (stripped) or an initializer with data."""
    w_shape = (k, x_shape[1] // group) + tuple(kernel)
    w_value = RNG.standard_normal(w_shape).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name=node_name, group=group, **attrs)
    inputs = [tensor("x", list(x_shape))]
    inits = []
    if weights == "input":
        inputs.append(tensor("w", list(w_shape)))
    else:
        inits.append(numpy_helper.from_array(w_value, "w"))
    model = save(path, [node], inputs, [tensor("y", None)], inits)
    return model, w_value


def naive_conv(x, w, layer):
    """Direct convolution with ConvLayer's parameters (equal pads on both sides)."""
    (ph, pw), (sh, sw), (dh, dw) = layer.pad, layer.stride, layer.dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((layer.n, layer.k, layer.p, layer.q), dtype=np.float64)
    cg, kg = layer.c_per_group, layer.k_per_group
    for k in range(layer.k):
        g = k // kg
        for p in range(layer.p):
            for q in range(layer.q):
                window = xp[:, g * cg:(g + 1) * cg, p * sh:p * sh + dh * (layer.r - 1) + 1:dh,
                            q * sw:q * sw + dw * (layer.s - 1) + 1:dw]
                out[:, k, p, q] = (window * w[k]).sum(axis=(1, 2, 3))
    return out


def assert_exact(model, w_value, layer):
    """The ONNX reference Conv (the node's own pads) equals a direct conv with the layer's pads."""
    x = RNG.standard_normal((layer.n, layer.c, layer.h, layer.w)).astype(np.float32)
    inputs = {"x": x} if any(i.name == "w" for i in model.graph.initializer) else {"x": x, "w": w_value}
    (y,) = ReferenceEvaluator(model).run(None, inputs)
    assert y.shape == (layer.n, layer.k, layer.p, layer.q)
    np.testing.assert_allclose(y, naive_conv(x, w_value, layer), rtol=1e-4, atol=1e-4)


# ---- shapes, attributes, weights ------------------------------------------------------------------
def test_attributes_and_weights_as_input_or_initializer(tmp_path):
    kwargs = dict(x_shape=(2, 6, 11, 9), k=4, kernel=(3, 2), group=2, strides=[2, 1], dilations=[1, 2],
                  pads=[1, 0, 1, 0])
    expected = ConvLayer(2, 6, 11, 9, 4, 3, 2, stride=(2, 1), pad=(1, 0), dilation=(1, 2), groups=2, name="c")
    model, w_value = conv_file(tmp_path / "stripped.onnx", weights="input", **kwargs)
    assert load_onnx(tmp_path / "stripped.onnx") == [expected]
    assert_exact(model, w_value, expected)
    conv_file(tmp_path / "weights.onnx", weights="initializer", **kwargs)
    assert load_onnx(str(tmp_path / "weights.onnx")) == [expected]


def test_symbolic_batch_and_batch_override(tmp_path):
    conv_file(tmp_path / "dyn.onnx", x_shape=("N", 3, 8, 8), pads=[1, 1, 1, 1])
    assert [layer.n for layer in load_onnx(tmp_path / "dyn.onnx")] == [1]
    assert load_onnx(tmp_path / "dyn.onnx", batch=16) == [ConvLayer(16, 3, 8, 8, 4, 3, 3, pad=1, name="c")]
    conv_file(tmp_path / "fixed.onnx", x_shape=(2, 3, 8, 8))
    assert load_onnx(tmp_path / "fixed.onnx")[0].n == 2
    assert load_onnx(tmp_path / "fixed.onnx", batch=5)[0].n == 5
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="batch"):
            load_onnx(tmp_path / "fixed.onnx", batch=bad)


def test_missing_value_infos_are_inferred(tmp_path):
    # x -> Conv 3x3/2 -> Relu -> MaxPool -> Conv 1x1: only the graph input has a shape
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="first", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("MaxPool", ["b"], ["c"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["c", "w2"], ["y"], name="second")]
    inputs = [tensor("x", [1, 3, 32, 32]), tensor("w1", [8, 3, 3, 3]), tensor("w2", [16, 8, 1, 1])]
    save(tmp_path / "chain.onnx", nodes, inputs, [tensor("y", None)])
    assert load_onnx(tmp_path / "chain.onnx") == [
        ConvLayer(1, 3, 32, 32, 8, 3, 3, stride=2, pad=1, name="first"),
        ConvLayer(1, 8, 8, 8, 16, 1, 1, name="second")]
    # the same file with its value infos given: the same layers, no inference needed
    save(tmp_path / "given.onnx", nodes, inputs, [tensor("y", [1, 16, 8, 8])],
         value_info=[tensor("a", [1, 8, 16, 16]), tensor("b", [1, 8, 16, 16]), tensor("c", [1, 8, 8, 8])])
    assert load_onnx(tmp_path / "given.onnx") == load_onnx(tmp_path / "chain.onnx")


def test_shape_arithmetic_that_inference_leaves_unknown_is_folded(tmp_path):
    # Conv on the top half of x: Slice ends = Shape(x)[2] / 2 (data propagation stops at Div)
    const = {name: numpy_helper.from_array(np.array(value, dtype=np.int64), name)
             for name, value in (("axis_h", [2]), ("zero", [0]), ("index_h", 2))}
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Constant", [], ["two"], value_int=2),
             helper.make_node("Gather", ["shape", "index_h"], ["h"], axis=0),
             helper.make_node("Div", ["h", "two"], ["half"]),
             helper.make_node("Unsqueeze", ["half", "zero"], ["ends"]),
             helper.make_node("Slice", ["x", "zero", "ends", "axis_h"], ["top"]),
             helper.make_node("Conv", ["top", "w"], ["y"], name="/block/conv/Conv", pads=[1, 1, 1, 1])]
    save(tmp_path / "slice.onnx", nodes, [tensor("x", [1, 4, 10, 6]), tensor("w", [8, 4, 3, 3])],
         [tensor("y", None)], list(const.values()))
    assert load_onnx(tmp_path / "slice.onnx") == [ConvLayer(1, 4, 5, 6, 8, 3, 3, pad=1, name="block.conv")]


def test_weights_in_a_missing_external_file_are_not_needed(tmp_path):
    model, _ = conv_file(tmp_path / "tmp.onnx", weights="initializer", pads=[1, 1, 1, 1])
    onnx.save_model(model, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin",
                    size_threshold=0)
    (tmp_path / "ext.bin").unlink()
    assert load_onnx(tmp_path / "ext.onnx") == [ConvLayer(1, 3, 8, 8, 4, 3, 3, pad=1, name="c")]


def test_names(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="/features/features.0/features.0.0/Conv"),
             helper.make_node("Conv", ["a", "v"], ["b"], name="plain name"),
             helper.make_node("Conv", ["b", "v"], ["c"]),
             helper.make_node("Conv", ["c", "v"], ["y"], name="plain name")]
    save(tmp_path / "names.onnx", nodes, [tensor("x", [1, 3, 4, 4]), tensor("w", [2, 3, 1, 1]),
                                          tensor("v", [2, 2, 1, 1])], [tensor("y", None)])
    assert [layer.name for layer in load_onnx(tmp_path / "names.onnx")] == \
        ["features.0.0", "plain name", "c", "plain name#3"]


# ---- pads ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, kernel, stride, pads, auto_pad, pad", [
    (8, 2, 2, [0, 0, 1, 1], None, 0),          # extra end padding that no output reads
    (8, 3, 2, [1, 1, 0, 0], None, 1),          # less end padding than begin, same outputs
    (7, 3, 1, [1, 2, 1, 2], None, (1, 2)),     # symmetric, different per axis
    (8, 3, 1, None, "SAME_UPPER", 1),
    (8, 3, 2, None, "SAME_LOWER", 1),          # begin 1, end 0
    (8, 2, 2, None, "SAME_UPPER", 0),
    (9, 3, 2, None, "VALID", 0),
])
def test_pads_that_equal_pads_express_exactly(tmp_path, size, kernel, stride, pads, auto_pad, pad):
    attrs = {"strides": [stride, stride]}
    if pads is not None:
        attrs["pads"] = pads
    if auto_pad is not None:
        attrs["auto_pad"] = auto_pad
    model, w_value = conv_file(tmp_path / "p.onnx", x_shape=(1, 2, size, size), kernel=(kernel, kernel), **attrs)
    (layer,) = load_onnx(tmp_path / "p.onnx")
    assert layer == ConvLayer(1, 2, size, size, 4, kernel, kernel, stride=stride, pad=pad, name="c")
    assert_exact(model, w_value, layer)


@pytest.mark.parametrize("size, kernel, stride, pads, auto_pad", [
    (8, 3, 2, [1, 1, 2, 2], None),             # end padding read by an extra output
    (8, 3, 2, [0, 0, 1, 1], None),
    (7, 3, 2, [2, 2, 1, 1], None),             # equal begin pads would add an output
    (8, 3, 2, None, "SAME_UPPER"),             # begin 0, end 1
])
def test_asymmetric_pads_that_change_the_output_are_rejected(tmp_path, size, kernel, stride, pads, auto_pad):
    attrs = {"strides": [stride, stride]}
    if pads is not None:
        attrs["pads"] = pads
    if auto_pad is not None:
        attrs["auto_pad"] = auto_pad
    conv_file(tmp_path / "p.onnx", x_shape=(1, 2, size, size), kernel=(kernel, kernel), node_name="odd", **attrs)
    with pytest.raises(ValueError, match=r"p\.onnx: Conv node 'odd': asymmetric pads .* pads both sides equally"):
        load_onnx(tmp_path / "p.onnx")


# ---- bad input -----------------------------------------------------------------------------------
def _one_line_error(path, match, exc=ValueError):
    with pytest.raises(exc, match=match) as info:
        load_onnx(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("x_shape, w_shape, what", [
    ([1, 3, 16], [4, 3, 3], "its input \\[1, 3, 16\\] makes it a 1-D convolution"),
    ([1, 3, 4, 8, 8], [4, 3, 3, 3, 3], "its input \\[1, 3, 4, 8, 8\\] makes it a 3-D convolution"),
])
def test_not_2d_rejected(tmp_path, x_shape, w_shape, what):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1d")
    save(tmp_path / "nd.onnx", [node], [tensor("x", x_shape), tensor("w", w_shape)], [tensor("y", None)])
    _one_line_error(tmp_path / "nd.onnx", "Conv node 'conv1d': only 2-D convolutions .*" + what)


def test_not_onnx_files(tmp_path):
    (tmp_path / "text.onnx").write_text("this is not a protobuf\n")
    _one_line_error(tmp_path / "text.onnx", "not an ONNX model")
    (tmp_path / "empty.onnx").write_bytes(b"")
    _one_line_error(tmp_path / "empty.onnx", "not an ONNX model")
    with pytest.raises(FileNotFoundError, match="missing.onnx: ONNX file not found"):
        load_onnx(tmp_path / "missing.onnx")


def test_no_conv_nodes(tmp_path):
    save(tmp_path / "relu.onnx", [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [1, 3, 4, 4])],
         [tensor("y", None)])
    _one_line_error(tmp_path / "relu.onnx", r"no Conv nodes in the ONNX graph \(1 nodes: Relu\)")


def test_unknown_shape_names_the_node(tmp_path):
    nodes = [helper.make_node("Mystery", ["x"], ["t"], domain="com.example"),
             helper.make_node("Conv", ["t", "w"], ["y"], name="after_custom_op")]
    save(tmp_path / "custom.onnx", nodes, [tensor("x", [1, 3, 8, 8]), tensor("w", [4, 3, 3, 3])],
         [tensor("y", None)], **{"com.example": 1})
    _one_line_error(tmp_path / "custom.onnx", "Conv node 'after_custom_op': shape unknown .*input 't'")


def test_inconsistent_shapes(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="liar")
    save(tmp_path / "liar.onnx", [node], [tensor("x", [1, 3, 8, 8]), tensor("w", [4, 3, 3, 3])],
         [tensor("y", [1, 4, 8, 8])])                 # 3x3 without padding gives 6x6
    _one_line_error(tmp_path / "liar.onnx", r"Conv node 'liar': output shape \[4, 8, 8\] does not match .*\[4, 6, 6\]")


def test_without_the_onnx_package(tmp_path, monkeypatch):
    conv_file(tmp_path / "m.onnx")
    monkeypatch.setitem(sys.modules, "onnx", None)          # what `import onnx` sees when it is not installed
    with pytest.raises(ImportError, match=r"needs the onnx package: pip install -e '\.\[onnx\]'"):
        load_onnx(tmp_path / "m.onnx")
    with pytest.raises(ValueError, match="needs the onnx package"):
        resolve_layers(str(tmp_path / "m.onnx"))


def test_packages_import_without_onnx():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import traces, traces.dump, analytic.roofline, analytic.scaling, validation.compare, validation.calibrate\n"
            "print(len(traces.network('resnet18')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "20"
