"""traces.resolve_layers and the .onnx path on every CLI that takes a network (run in-process via main)."""
import importlib
import json

import pytest

from traces import ConvLayer, load_layers, network, read_trace, resolve_layers

from .onnx_data import DATA

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def save(path, nodes, inputs, **opsets):
    imports = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v) for d, v in opsets.items()]
    graph = helper.make_graph(nodes, "g", inputs, [tensor("y", None)])
    onnx.save(helper.make_model(graph, opset_imports=imports), str(path))
    return str(path)


def tiny_onnx(path):
    """Two small convs, weights stripped (graph inputs), batch symbolic."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="/stem/conv/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["y"], name="/head/Conv", strides=[2, 2])]
    return save(path, nodes, [tensor("x", ["N", 16, 10, 10]), tensor("w1", [32, 16, 3, 3]),
                              tensor("w2", [64, 32, 1, 1])])


TINY = [ConvLayer(1, 16, 10, 10, 32, 3, 3, pad=1, name="stem.conv"),
        ConvLayer(1, 32, 10, 10, 64, 1, 1, stride=2, name="head")]


@pytest.fixture
def bad_files(tmp_path):
    files = {"not_onnx": tmp_path / "garbage.onnx", "no_conv": tmp_path / "noconv.onnx",
             "unknown_shape": tmp_path / "custom.onnx"}
    files["not_onnx"].write_text("definitely not protobuf")
    save(files["no_conv"], [helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [1, 3, 4, 4])])
    save(files["unknown_shape"], [helper.make_node("Mystery", ["x"], ["t"], domain="com.example"),
                                  helper.make_node("Conv", ["t", "w"], ["y"], name="lost")],
         [tensor("x", [1, 3, 8, 8]), tensor("w", [4, 3, 3, 3])], **{"com.example": 1})
    return {key: str(path) for key, path in files.items()}


MESSAGES = {"not_onnx": "garbage.onnx: not an ONNX model", "no_conv": "noconv.onnx: no Conv nodes",
            "unknown_shape": "custom.onnx: Conv node 'lost': shape unknown"}


# ---- resolve_layers ------------------------------------------------------------------------------
def test_resolve_names_and_files(tmp_path):
    assert resolve_layers(" VGG16 ") == network("vgg16")
    assert resolve_layers("resnet18", 4) == network("resnet18", 4)
    spec = tmp_path / "layers.json"
    spec.write_text(json.dumps([dict(TINY[0].as_dict(), n=3)]))
    assert resolve_layers(str(spec))[0].n == 3                      # the file's own batch
    assert resolve_layers(spec, 5) == [TINY[0].with_batch(5)]
    path = tiny_onnx(tmp_path / "tiny.onnx")
    assert resolve_layers(path) == TINY
    assert resolve_layers(path, 8) == [layer.with_batch(8) for layer in TINY]
    # files without a known extension: JSON if the text starts like JSON, else ONNX
    (tmp_path / "json_layers").write_text(spec.read_text())
    (tmp_path / "model").write_bytes((tmp_path / "tiny.onnx").read_bytes())
    assert resolve_layers(str(tmp_path / "json_layers")) == load_layers(spec)
    assert resolve_layers(str(tmp_path / "model")) == TINY


@pytest.mark.parametrize("spec, message", [
    ("vgg13", "unknown network 'vgg13'; known networks: vgg16, resnet50, alexnet, googlenet, resnet18, "),
    ("{tmp}/missing.onnx", "missing.onnx: ONNX file not found"),
    ("{tmp}/missing.json", "missing.json: layer file not found"),
    ("{tmp}", "is a directory"),
])
def test_resolve_errors(tmp_path, spec, message):
    with pytest.raises(ValueError) as info:
        resolve_layers(spec.replace("{tmp}", str(tmp_path)))
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(TypeError):
        resolve_layers(3)


# ---- every CLI: a bad .onnx file is one line, exit status 2, no output ---------------------------
CLIS = {
    "validation.compare": ["--json", "{out}"],
    "validation.calibrate": ["-o", "{out}"],
    "validation.accuracy": ["--markdown", "{out}"],
    "analytic.roofline": ["--json", "{out}"],
    "analytic.scaling": ["--scale", "sms=2", "--json", "{out}"],
    "traces.dump": ["--layer", "lost", "-o", "{out}"],
}


@pytest.mark.parametrize("kind", sorted(MESSAGES))
@pytest.mark.parametrize("module", sorted(CLIS))
def test_cli_bad_onnx_file(module, kind, bad_files, tmp_path, capsys):
    out = tmp_path / "out.file"
    argv = [bad_files[kind]] + [a.replace("{out}", str(out)) for a in CLIS[module]]
    assert importlib.import_module(module).main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and MESSAGES[kind] in err[0], err
    assert not out.exists()


# ---- the CLIs on ONNX files ----------------------------------------------------------------------
def test_compare_on_an_onnx_export(tmp_path, capsys):
    from validation import compare, results
    js = tmp_path / "r.json"
    assert compare.main([str(DATA / "resnet18.onnx"), "--gpu", "a100", "--layers", "layer4.1.conv2", "--quiet",
                         "--json", str(js)]) == 0
    doc = results.load_results(js)
    assert doc["complete"] and [entry["layer"]["name"] for entry in doc["layers"]] == ["layer4.1.conv2"]
    assert doc["layers"][0]["simulated"]["dram__sectors_read.sum"] > 0
    assert "layer4.1.conv2" in capsys.readouterr().out


def test_accuracy_and_dump_on_a_small_onnx_file(tmp_path, capsys):
    from traces.dump import main as dump
    from validation import accuracy
    path = tiny_onnx(tmp_path / "tiny.onnx")
    table = tmp_path / "acc.md"
    assert accuracy.main([path, "--gpu", "v100", "--batch", "2", "--quiet", "--markdown", str(table)]) == 0
    assert "| tiny | v100 | 2 |" in table.read_text()
    h5 = tmp_path / "t.h5"
    assert dump([path, "--layer", "head", "--batch", "2", "--no-progress", "-o", str(h5)]) == 0
    assert read_trace(h5).layer == TINY[1].with_batch(2)


def test_analytic_clis_on_an_onnx_export(tmp_path, capsys):
    from analytic import roofline, scaling
    js = tmp_path / "r.json"
    assert roofline.main([str(DATA / "resnet18.onnx"), "--gpu", "h100", "--batch", "1,8", "--json", str(js)]) == 0
    rows = json.loads(js.read_text())["rows"]
    assert len(rows) == 2 * 20 and rows[0]["layer"] == "conv1"
    js2 = tmp_path / "s.json"
    assert scaling.main([str(DATA / "vgg19.onnx"), "--scale", "l2_bytes=2", "--json", str(js2)]) == 0
    assert [r["layer"] for r in json.loads(js2.read_text())["base"]][:2] == ["features.0", "features.2"]


def test_grouped_layers_run_and_bad_kernels_are_refused_clearly(tmp_path, capsys):
    from analytic import roofline
    out = tmp_path / "r.json"
    assert roofline.main([str(DATA / "mobilenet_v2.onnx"), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 52 and any(row["layer"] == "features.1.conv.0.0" for row in rows)    # depthwise
    bad = tmp_path / "bad.json"
    for argv in (["--op", "dgrad"], ["--layout", "nchw"]):
        assert roofline.main([str(DATA / "mobilenet_v2.onnx"), "--json", str(bad), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "groups=32" in err[0] and not bad.exists()
