"""traces.load_onnx reads every torchvision export in tests/data/onnx exactly (see that folder's README.md)."""
import pytest

from traces import load_onnx, network

from .onnx_data import DATA, EXPORTS, expected_layers

pytest.importorskip("onnx")

FILES = sorted(path.name[:-len(".onnx")] for path in DATA.glob("*.onnx"))


def test_all_exports_present():
    assert set(FILES) == set(EXPORTS) | {"shufflenet_v2_x1_0_unfolded"}


@pytest.mark.parametrize("model", FILES)
def test_reads_every_file_exactly(model):
    # the unfolded shufflenet has the folded file's Conv nodes (its shape arithmetic is left to the reader)
    truth = model.replace("_unfolded", "")
    layers = load_onnx(DATA / f"{model}.onnx")
    assert layers == expected_layers(truth)
    assert (len(layers), sum(layer.params for layer in layers)) == EXPORTS[truth]


def test_symbolic_batch_takes_the_batch():
    path = DATA / "resnet50_dynbatch.onnx"
    assert load_onnx(path) == network("resnet50")
    assert load_onnx(path, batch=32) == network("resnet50", 32) == expected_layers("resnet50_dynbatch", batch=32)


@pytest.mark.parametrize("model", ["resnet18", "resnet101", "vgg19", "inception_v3", "mobilenet_v2",
                                   "resnext50_32x4d", "efficientnet_b0", "densenet121", "resnet50"])
def test_import_equals_the_builder(model):
    assert load_onnx(DATA / f"{model}.onnx", batch=2) == network(model, 2)
