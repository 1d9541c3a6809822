"""Convolution layers of well-known CNNs (every conv layer, named as in the original models).

vgg16, resnet50, alexnet and googlenet follow the sources below (vgg16 and googlenet with the papers'
layer names); resnet18, resnet101, vgg19, inception_v3, mobilenet_v2, resnext50_32x4d, efficientnet_b0
and densenet121 are torchvision's definitions with torchvision's module names (`traces._torchvision`,
which also builds resnet50 and vgg16).

``network(name, batch=1)`` returns the forward-convolution layers of one network as `ConvLayer` objects
in execution order; ``load_layers(path)`` reads user-defined layers from a JSON file through the same
`ConvLayer` checks. Only convolutions are listed: pooling, normalisation and fully-connected layers
are not (they are not implicit-GEMM convolutions), but the spatial sizes they produce are applied.

Sources of the layer tables:

[VGG]  K. Simonyan, A. Zisserman, "Very Deep Convolutional Networks for Large-Scale Image Recognition",
       ICLR 2015, Table 1 configuration D (VGG-16): 224x224 RGB input, 3x3 convolutions with stride 1 and
       padding 1, five 2x2/2 max-pools; 13 convolutions conv1_1 .. conv5_3.
[RES]  K. He et al., "Deep Residual Learning for Image Recognition", CVPR 2016, Table 1 (50-layer), as
       implemented by torchvision ``torchvision/models/resnet.py`` (``resnet50`` = ResNet v1.5: the stride
       of a downsampling bottleneck is on its 3x3 ``conv2``, not on ``conv1``; ``Bottleneck.expansion`` = 4;
       ``downsample`` = conv1x1(inplanes, planes*4, stride) + BatchNorm in the first block of every stage,
       including ``layer1`` because 64 != 256). Stem: ``conv1`` 7x7/2 pad 3, 3 -> 64, then 3x3/2 pad 1
       max-pool. Stages layers=[3, 4, 6, 3], planes 64/128/256/512, strides 1/2/2/2. Module names are
       torchvision's (``layer2.0.downsample.0``).
[ALEX] torchvision ``torchvision/models/alexnet.py`` (the single-tower variant of Krizhevsky et al.,
       "One weird trick for parallelizing convolutional neural networks", 2014): Conv2d(3, 64, 11, stride 4,
       pad 2), MaxPool(3, 2), Conv2d(64, 192, 5, pad 2), MaxPool(3, 2), Conv2d(192, 384, 3, pad 1),
       Conv2d(384, 256, 3, pad 1), Conv2d(256, 256, 3, pad 1); 224x224 input (55 -> 27 -> 13).
[GOOG] C. Szegedy et al., "Going Deeper with Convolutions", CVPR 2015, Table 1 (GoogLeNet): conv 7x7/2 64,
       max-pool 3x3/2, conv 3x3 (reduce 64, 192), max-pool 3x3/2, inception 3a, 3b, max-pool, 4a..4e,
       max-pool, 5a, 5b; each inception module has the branches #1x1, #3x3 reduce -> #3x3, #5x5 reduce ->
       #5x5, and pool proj (1x1 after a 3x3/1 max-pool). Auxiliary classifiers are left out. Layer names
       and paddings follow the Caffe reference model ``models/bvlc_googlenet/train_val.prototxt``
       (``conv1/7x7_s2`` pad 3, ``conv2/3x3_reduce``, ``conv2/3x3`` pad 1, ``inception_3a/1x1``,
       ``inception_3a/3x3`` pad 1, ``inception_3a/5x5`` pad 2, ``inception_3a/pool_proj``, ...).
       Spatial sizes: 224 -> 112 (conv1) -> 56 (pool; conv2) -> 28 (3a, 3b) -> 14 (4a-4e) -> 7 (5a, 5b).
"""
from __future__ import annotations

import json
import numbers
import os

from . import _torchvision
from .layer import ConvLayer

__all__ = ["NETWORKS", "network", "load_layers"]


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral):
        raise TypeError(f"batch must be a positive integer, got {batch!r}")
    if batch <= 0:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    return int(batch)


# ---- AlexNet (torchvision) [ALEX] ----------------------------------------------------------------
# (name, C, input size, K, filter size, stride, pad)
_ALEXNET = (("conv1", 3, 224, 64, 11, 4, 2),      # -> 55, max-pool 3x3/2 -> 27
            ("conv2", 64, 27, 192, 5, 1, 2),      # -> 27, max-pool 3x3/2 -> 13
            ("conv3", 192, 13, 384, 3, 1, 1),
            ("conv4", 384, 13, 256, 3, 1, 1),
            ("conv5", 256, 13, 256, 3, 1, 1))


def _alexnet(n: int) -> list:
    return [ConvLayer(n, c, size, size, k, f, f, stride=stride, pad=pad, name=name)
            for name, c, size, k, f, stride, pad in _ALEXNET]


# ---- GoogLeNet [GOOG] Table 1 --------------------------------------------------------------------
# (module, spatial size, #1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj); input channels follow
# from the previous module's output (sum of #1x1, #3x3, #5x5, pool proj).
_GOOGLENET_INCEPTION = (
    ("inception_3a", 28, 64, 96, 128, 16, 32, 32),
    ("inception_3b", 28, 128, 128, 192, 32, 96, 64),
    ("inception_4a", 14, 192, 96, 208, 16, 48, 64),
    ("inception_4b", 14, 160, 112, 224, 24, 64, 64),
    ("inception_4c", 14, 128, 128, 256, 24, 64, 64),
    ("inception_4d", 14, 112, 144, 288, 32, 64, 64),
    ("inception_4e", 14, 256, 160, 320, 32, 128, 128),
    ("inception_5a", 7, 256, 160, 320, 32, 128, 128),
    ("inception_5b", 7, 384, 192, 384, 48, 128, 128),
)


def _googlenet(n: int) -> list:
    layers = [ConvLayer(n, 3, 224, 224, 64, 7, 7, stride=2, pad=3, name="conv1/7x7_s2"),   # -> 112
              # max-pool 3x3/2 -> 56 (and LRN)
              ConvLayer(n, 64, 56, 56, 64, 1, 1, name="conv2/3x3_reduce"),
              ConvLayer(n, 64, 56, 56, 192, 3, 3, pad=1, name="conv2/3x3")]
    c = 192                                                                                  # pool -> 28
    for name, size, n1, r3, n3, r5, n5, proj in _GOOGLENET_INCEPTION:
        layers += [ConvLayer(n, c, size, size, n1, 1, 1, name=f"{name}/1x1"),
                   ConvLayer(n, c, size, size, r3, 1, 1, name=f"{name}/3x3_reduce"),
                   ConvLayer(n, r3, size, size, n3, 3, 3, pad=1, name=f"{name}/3x3"),
                   ConvLayer(n, c, size, size, r5, 1, 1, name=f"{name}/5x5_reduce"),
                   ConvLayer(n, r5, size, size, n5, 5, 5, pad=2, name=f"{name}/5x5"),
                   ConvLayer(n, c, size, size, proj, 1, 1, name=f"{name}/pool_proj")]
        c = n1 + n3 + n5 + proj
    return layers


def _vgg16(n: int) -> list:
    return _torchvision.vgg(n, _torchvision.VGG_CFG_D, paper_names=True)


#: Networks built from torchvision's definitions, named with its module names (see `_torchvision`).
TORCHVISION_NETWORKS = ("resnet18", "resnet101", "vgg19", "inception_v3", "mobilenet_v2", "resnext50_32x4d",
                        "efficientnet_b0", "densenet121")

_BUILDERS = {"vgg16": _vgg16, "resnet50": _torchvision.resnet50, "alexnet": _alexnet, "googlenet": _googlenet,
             **{name: getattr(_torchvision, name) for name in TORCHVISION_NETWORKS}}
NETWORKS = tuple(_BUILDERS)


def network(name: str, batch: int = 1) -> list:
    """Every convolution layer of network ``name`` (see `NETWORKS`) at batch size ``batch``, in order.

    >>> [l.name for l in network("alexnet")]
    ['conv1', 'conv2', 'conv3', 'conv4', 'conv5']
    """
    if not isinstance(name, str):
        raise TypeError(f"network name must be a string, got {name!r}")
    key = name.strip().lower()
    if key not in _BUILDERS:
        raise ValueError(f"unknown network {name!r}; known networks: {', '.join(NETWORKS)}")
    return list(_BUILDERS[key](_check_batch(batch)))


# ---- user-defined layers from JSON ---------------------------------------------------------------
_REQUIRED = ("n", "c", "h", "w", "k", "r", "s")
_OPTIONAL = ("stride", "pad", "dilation", "name", "groups")


def load_layers(path) -> list:
    """Read convolution layers from a JSON file.

    The file holds a list of objects, or ``{"layers": [...]}``; each object has the integer fields
    ``n, c, h, w, k, r, s`` and optionally ``stride``, ``pad``, ``dilation`` (an int or ``[h, w]``),
    ``groups`` and ``name``. Every layer goes through the `ConvLayer` checks; an error names the file, the layer
    index and the field.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: layer file not found")
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read layer file: {err}") from None
    if isinstance(data, dict):
        extra = sorted(set(data) - {"layers"})
        if "layers" not in data or extra:
            raise ValueError(f"{path}: expected a list of layers or an object with only the key 'layers'"
                             f"{f', got unknown keys {extra}' if extra else ''}")
        data = data["layers"]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of layer objects, got {type(data).__name__}")
    if not data:
        raise ValueError(f"{path}: no layers in file")
    layers = []
    for index, item in enumerate(data):
        where = f"{path}: layer {index}"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: expected an object, got {type(item).__name__}")
        if "name" in item:
            where += f" ({item['name']!r})"
        unknown = sorted(set(item) - set(_REQUIRED) - set(_OPTIONAL))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: "
                             f"{', '.join(_REQUIRED + _OPTIONAL)}")
        missing = [f for f in _REQUIRED if f not in item]
        if missing:
            raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
        kwargs = dict(item)
        for field in ("stride", "pad", "dilation"):
            if isinstance(kwargs.get(field), list):
                kwargs[field] = tuple(kwargs[field])
        try:
            layers.append(ConvLayer(**kwargs))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None
    return layers
