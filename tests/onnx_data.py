"""The torchvision ONNX exports in tests/data/onnx and their ground truth (see that folder's README.md)."""
import json
from pathlib import Path

from traces import ConvLayer

DATA = Path(__file__).parent / "data" / "onnx"

#: README.md's table: model -> (Conv nodes, conv weights = sum of K * C/group * R * S).
EXPORTS = {
    "resnet18": (20, 11_166_912), "resnet50": (53, 23_454_912), "resnet50_dynbatch": (53, 23_454_912),
    "resnet101": (104, 42_394_816), "resnext50_32x4d": (53, 22_911_680), "vgg16": (13, 14_710_464),
    "vgg19": (16, 20_018_880), "alexnet": (5, 2_468_544), "googlenet": (57, 5_585_344),
    "inception_v3": (94, 21_751_136), "mobilenet_v2": (52, 2_189_760), "mobilenet_v3_large": (62, 2_942_472),
    "efficientnet_b0": (81, 3_956_192), "densenet121": (120, 6_870_208), "convnext_tiny": (22, 1_877_472),
    "regnet_y_400mf": (85, 3_870_784), "shufflenet_v2_x1_0": (56, 1_237_424), "squeezenet1_1": (26, 1_231_552),
}


def torch_module_name(node_name):
    """``/features/features.1/conv/conv.0/conv.0.0/Conv`` -> ``features.1.conv.0.0``: every scope
    component that the next one repeats as its prefix is dropped (written independently of traces)."""
    scopes = node_name.split("/")[1:-1]
    kept = [s for s, after in zip(scopes, scopes[1:] + [""]) if not after.startswith(s + ".")]
    return ".".join(kept)


def rows(model):
    """The ground-truth rows (one per Conv node, graph order) of ``model``'s export."""
    with open(DATA / f"{model}.convs.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def expected_layers(model, batch=None):
    """The ConvLayers the jsonl rows describe (a symbolic batch, 'N', taken as ``batch`` or 1)."""
    layers = []
    for row in rows(model):
        n, c, h, w = row["input"]
        k, c_per_group, r, s = row["weight"]
        top, left, bottom, right = row["pads"]
        assert (top, left) == (bottom, right), row            # no asymmetric pads in these exports
        assert c == c_per_group * row["group"] and row["output"][1] == k, row
        if batch is not None or not isinstance(n, int):
            n = batch or 1
        layer = ConvLayer(n, c, h, w, k, r, s, stride=tuple(row["strides"]), pad=(top, left),
                          dilation=tuple(row["dilations"]), groups=row["group"], name=torch_module_name(row["name"]))
        assert [layer.p, layer.q] == row["output"][2:], row
        layers.append(layer)
    return layers
