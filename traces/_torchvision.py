"""Conv layers of torchvision's CNN definitions, built the way torchvision builds the modules.

Each builder takes the batch size ``n`` and returns the network's ``nn.Conv2d`` layers as `ConvLayer`
objects in execution order (the order of the Conv nodes in an ONNX export), named with torchvision's
module names (``layer1.0.conv1``, ``features.1.conv.0.0``): the PyTorch ONNX exporter's node name
``/layer1/layer1.0/conv1/Conv`` is that name's scope path. Pooling, normalisation and linear layers
are not convolutions and are not listed; the spatial sizes they produce are applied (torch's
``floor((size + 2 pad - kernel) / stride) + 1``).

Sources (pytorch/vision, ``torchvision/models/``; 224x224 input unless noted):

[RESNET]    ``resnet.py``: ``conv1`` 7x7/2 pad 3, 3x3/2 pad 1 max-pool, stages ``layer1``..``layer4`` of
            ``BasicBlock`` (``conv1`` 3x3/stride, ``conv2`` 3x3; expansion 1) or ``Bottleneck`` (``conv1``
            1x1, ``conv2`` 3x3/stride with ``groups``, ``conv3`` 1x1; width = int(planes * base_width / 64)
            * groups, expansion 4); ``downsample.0`` = 1x1/stride conv when stride != 1 or the channels
            change, run after the block's own convs. resnet18 [2, 2, 2, 2] BasicBlock; resnet50 [3, 4, 6, 3],
            resnet101 [3, 4, 23, 3] Bottleneck; resnext50_32x4d [3, 4, 6, 3] Bottleneck, groups 32,
            width_per_group 4.
[VGG]       ``vgg.py``: ``cfgs`` "D" (vgg16) and "E" (vgg19); ``make_layers`` appends Conv2d(3x3, pad 1)
            + ReLU per number and MaxPool2d(2, 2) per "M", so a conv is ``features.<index>``.
[INCEPTION] ``inception.py`` (``Inception3``, 299x299 input, ``aux_logits=False``): ``BasicConv2d`` holds
            the conv as ``.conv``; stem Conv2d_1a_3x3 .. Conv2d_4a_3x3 with two 3x3/2 max-pools; Mixed_5b-d
            (``InceptionA``), Mixed_6a (``InceptionB``), Mixed_6b-e (``InceptionC``, channels_7x7 128, 160,
            160, 192), Mixed_7a (``InceptionD``), Mixed_7b-c (``InceptionE``); branches in ``_forward`` order.
[MOBILEV2]  ``mobilenetv2.py``: ``features.0`` 3x3/2 conv 3 -> 32; ``InvertedResidual`` (t, c, n, s)
            settings; ``conv.<i>.0`` for the expand 1x1 (when t != 1) and the depthwise 3x3, ``conv.<j>``
            for the linear 1x1 projection; ``features.18`` 1x1 -> 1280.
[EFFNET]    ``efficientnet.py`` (``efficientnet_b0``: width and depth multipliers 1.0): ``features.0``
            3x3/2 conv 3 -> 32; ``MBConv`` blocks ``features.<stage>.<i>.block``: expand 1x1 (when the
            expanded width differs), depthwise kxk/stride (pad (k - 1) // 2), ``SqueezeExcitation``
            ``fc1``/``fc2`` 1x1 convs on the pooled 1x1 map with max(1, input_channels // 4) squeeze
            channels, projection 1x1; ``features.8`` 1x1 320 -> 1280.
[DENSENET]  ``densenet.py`` (``densenet121``: growth 32, blocks (6, 12, 24, 16), 64 initial features,
            bn_size 4): ``features.conv0`` 7x7/2 pad 3, 3x3/2 pad 1 max-pool; ``denselayer<j>`` = ``conv1``
            1x1 -> 128 and ``conv2`` 3x3 pad 1 -> 32 on the concatenation of all earlier features;
            ``transition<i>`` = ``conv`` 1x1 halving the channels + 2x2/2 average pool.
"""
from __future__ import annotations

from .layer import ConvLayer


def _pool(size: int, kernel: int, stride: int, pad: int = 0) -> int:
    return (size + 2 * pad - kernel) // stride + 1


class _Layers(list):
    """The conv layers of one network at batch ``n``, appended in execution order."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n

    def conv(self, name: str, c: int, size: int, k: int, kernel, stride: int = 1, pad=0,
             groups: int = 1) -> int:
        """Append a conv on a ``size`` x ``size`` input and return its output size."""
        r, s = kernel if isinstance(kernel, tuple) else (kernel, kernel)
        layer = ConvLayer(self.n, c, size, size, k, r, s, stride=stride, pad=pad, name=name, groups=groups)
        assert layer.p == layer.q, name
        self.append(layer)
        return layer.p


# ---- [RESNET] ------------------------------------------------------------------------------------
_RESNET_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))      # planes, stride of the stage's first block


def _resnet(n: int, depths, bottleneck: bool, groups: int = 1, width_per_group: int = 64) -> list:
    layers = _Layers(n)
    size = _pool(layers.conv("conv1", 3, 224, 64, 7, stride=2, pad=3), 3, 2, 1)
    inplanes = 64
    for stage, (blocks, (planes, first_stride)) in enumerate(zip(depths, _RESNET_STAGES), 1):
        for b in range(blocks):
            stride, prefix = (first_stride if b == 0 else 1), f"layer{stage}.{b}"
            if bottleneck:
                width, out = planes * width_per_group // 64 * groups, planes * 4
                layers.conv(f"{prefix}.conv1", inplanes, size, width, 1)
                out_size = layers.conv(f"{prefix}.conv2", width, size, width, 3, stride=stride, pad=1,
                                       groups=groups)
                layers.conv(f"{prefix}.conv3", width, out_size, out, 1)
            else:
                out = planes
                out_size = layers.conv(f"{prefix}.conv1", inplanes, size, out, 3, stride=stride, pad=1)
                layers.conv(f"{prefix}.conv2", out, out_size, out, 3, pad=1)
            if stride != 1 or inplanes != out:
                layers.conv(f"{prefix}.downsample.0", inplanes, size, out, 1, stride=stride)
            inplanes, size = out, out_size
    return layers


def resnet18(n):
    return _resnet(n, (2, 2, 2, 2), bottleneck=False)


def resnet50(n):
    return _resnet(n, (3, 4, 6, 3), bottleneck=True)


def resnet101(n):
    return _resnet(n, (3, 4, 23, 3), bottleneck=True)


def resnext50_32x4d(n):
    return _resnet(n, (3, 4, 6, 3), bottleneck=True, groups=32, width_per_group=4)


# ---- [VGG] ---------------------------------------------------------------------------------------
VGG_CFG_D = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")
VGG_CFG_E = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
             512, 512, 512, 512, "M")


def vgg(n: int, cfg, paper_names: bool = False) -> list:
    """VGG convs of ``cfg``; named ``features.<index>`` or, with ``paper_names``, ``conv<stage>_<i>``."""
    layers, c, size, index, stage, i = _Layers(n), 3, 224, 0, 1, 1
    for item in cfg:
        if item == "M":
            size, index, stage, i = _pool(size, 2, 2), index + 1, stage + 1, 1
            continue
        layers.conv(f"conv{stage}_{i}" if paper_names else f"features.{index}", c, size, item, 3, pad=1)
        c, index, i = item, index + 2, i + 1              # Conv2d, ReLU
    return layers


def vgg19(n):
    return vgg(n, VGG_CFG_E)


# ---- [INCEPTION] ---------------------------------------------------------------------------------
def _inception_a(layers, name, c, size, pool_features):
    layers.conv(f"{name}.branch1x1.conv", c, size, 64, 1)
    layers.conv(f"{name}.branch5x5_1.conv", c, size, 48, 1)
    layers.conv(f"{name}.branch5x5_2.conv", 48, size, 64, 5, pad=2)
    layers.conv(f"{name}.branch3x3dbl_1.conv", c, size, 64, 1)
    layers.conv(f"{name}.branch3x3dbl_2.conv", 64, size, 96, 3, pad=1)
    layers.conv(f"{name}.branch3x3dbl_3.conv", 96, size, 96, 3, pad=1)
    layers.conv(f"{name}.branch_pool.conv", c, size, pool_features, 1)    # after a 3x3/1 pad 1 avg-pool
    return 64 + 64 + 96 + pool_features


def _inception_b(layers, name, c, size):
    out = layers.conv(f"{name}.branch3x3.conv", c, size, 384, 3, stride=2)
    layers.conv(f"{name}.branch3x3dbl_1.conv", c, size, 64, 1)
    layers.conv(f"{name}.branch3x3dbl_2.conv", 64, size, 96, 3, pad=1)
    layers.conv(f"{name}.branch3x3dbl_3.conv", 96, size, 96, 3, stride=2)
    return 384 + 96 + c, out                                              # + the 3x3/2 max-pool branch


def _inception_c(layers, name, c, size, c7):
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))                        # (kernel, pad) of 1x7 and 7x1
    layers.conv(f"{name}.branch1x1.conv", c, size, 192, 1)
    layers.conv(f"{name}.branch7x7_1.conv", c, size, c7, 1)
    layers.conv(f"{name}.branch7x7_2.conv", c7, size, c7, row[0], pad=row[1])
    layers.conv(f"{name}.branch7x7_3.conv", c7, size, 192, col[0], pad=col[1])
    layers.conv(f"{name}.branch7x7dbl_1.conv", c, size, c7, 1)
    for j, ((kernel, pad), k) in enumerate(((col, c7), (row, c7), (col, c7), (row, 192)), 2):
        layers.conv(f"{name}.branch7x7dbl_{j}.conv", c7, size, k, kernel, pad=pad)
    layers.conv(f"{name}.branch_pool.conv", c, size, 192, 1)
    return 4 * 192


def _inception_d(layers, name, c, size):
    layers.conv(f"{name}.branch3x3_1.conv", c, size, 192, 1)
    out = layers.conv(f"{name}.branch3x3_2.conv", 192, size, 320, 3, stride=2)
    layers.conv(f"{name}.branch7x7x3_1.conv", c, size, 192, 1)
    layers.conv(f"{name}.branch7x7x3_2.conv", 192, size, 192, (1, 7), pad=(0, 3))
    layers.conv(f"{name}.branch7x7x3_3.conv", 192, size, 192, (7, 1), pad=(3, 0))
    layers.conv(f"{name}.branch7x7x3_4.conv", 192, size, 192, 3, stride=2)
    return 320 + 192 + c, out                                             # + the 3x3/2 max-pool branch


def _inception_e(layers, name, c, size):
    layers.conv(f"{name}.branch1x1.conv", c, size, 320, 1)
    layers.conv(f"{name}.branch3x3_1.conv", c, size, 384, 1)
    layers.conv(f"{name}.branch3x3_2a.conv", 384, size, 384, (1, 3), pad=(0, 1))
    layers.conv(f"{name}.branch3x3_2b.conv", 384, size, 384, (3, 1), pad=(1, 0))
    layers.conv(f"{name}.branch3x3dbl_1.conv", c, size, 448, 1)
    layers.conv(f"{name}.branch3x3dbl_2.conv", 448, size, 384, 3, pad=1)
    layers.conv(f"{name}.branch3x3dbl_3a.conv", 384, size, 384, (1, 3), pad=(0, 1))
    layers.conv(f"{name}.branch3x3dbl_3b.conv", 384, size, 384, (3, 1), pad=(1, 0))
    layers.conv(f"{name}.branch_pool.conv", c, size, 192, 1)
    return 320 + 2 * 384 + 2 * 384 + 192


def inception_v3(n):
    layers = _Layers(n)
    size = layers.conv("Conv2d_1a_3x3.conv", 3, 299, 32, 3, stride=2)        # 149
    size = layers.conv("Conv2d_2a_3x3.conv", 32, size, 32, 3)                 # 147
    size = _pool(layers.conv("Conv2d_2b_3x3.conv", 32, size, 64, 3, pad=1), 3, 2)      # 73
    size = layers.conv("Conv2d_3b_1x1.conv", 64, size, 80, 1)
    size = _pool(layers.conv("Conv2d_4a_3x3.conv", 80, size, 192, 3), 3, 2)            # 71 -> 35
    c = 192
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        c = _inception_a(layers, name, c, size, pool_features)
    c, size = _inception_b(layers, "Mixed_6a", c, size)                        # 17
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        c = _inception_c(layers, name, c, size, c7)
    c, size = _inception_d(layers, "Mixed_7a", c, size)                        # 8
    for name in ("Mixed_7b", "Mixed_7c"):
        c = _inception_e(layers, name, c, size)
    return layers


# ---- [MOBILEV2] ----------------------------------------------------------------------------------
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))                          # t, c, n, s


def mobilenet_v2(n):
    layers = _Layers(n)
    size, c, index = layers.conv("features.0.0", 3, 224, 32, 3, stride=2, pad=1), 32, 1
    for t, out, blocks, first_stride in _MOBILENET_V2:
        for b in range(blocks):
            prefix, hidden, j = f"features.{index}.conv", c * t, 0
            if t != 1:
                layers.conv(f"{prefix}.0.0", c, size, hidden, 1)
                j = 1
            size = layers.conv(f"{prefix}.{j}.0", hidden, size, hidden, 3, stride=first_stride if b == 0 else 1,
                               pad=1, groups=hidden)
            layers.conv(f"{prefix}.{j + 1}", hidden, size, out, 1)
            c, index = out, index + 1
    layers.conv(f"features.{index}.0", c, size, 1280, 1)
    return layers


# ---- [EFFNET] ------------------------------------------------------------------------------------
_EFFICIENTNET_B0 = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))
# expand ratio, kernel, stride, input channels, output channels, blocks


def efficientnet_b0(n):
    layers = _Layers(n)
    size = layers.conv("features.0.0", 3, 224, 32, 3, stride=2, pad=1)
    for stage, (expand, kernel, first_stride, c, out, blocks) in enumerate(_EFFICIENTNET_B0, 1):
        for b in range(blocks):
            prefix, hidden, j = f"features.{stage}.{b}.block", c * expand, 0
            if hidden != c:
                layers.conv(f"{prefix}.0.0", c, size, hidden, 1)
                j = 1
            size = layers.conv(f"{prefix}.{j}.0", hidden, size, hidden, kernel,
                               stride=first_stride if b == 0 else 1, pad=(kernel - 1) // 2, groups=hidden)
            squeeze = max(1, c // 4)
            layers.conv(f"{prefix}.{j + 1}.fc1", hidden, 1, squeeze, 1)      # on the global average pool
            layers.conv(f"{prefix}.{j + 1}.fc2", squeeze, 1, hidden, 1)
            layers.conv(f"{prefix}.{j + 2}.0", hidden, size, out, 1)
            c = out
    layers.conv(f"features.{len(_EFFICIENTNET_B0) + 1}.0", c, size, 1280, 1)
    return layers


# ---- [DENSENET] ----------------------------------------------------------------------------------
def densenet121(n, growth=32, blocks=(6, 12, 24, 16), features=64, bn_size=4):
    layers = _Layers(n)
    size = _pool(layers.conv("features.conv0", 3, 224, features, 7, stride=2, pad=3), 3, 2, 1)
    for i, count in enumerate(blocks, 1):
        for j in range(count):
            prefix = f"features.denseblock{i}.denselayer{j + 1}"
            layers.conv(f"{prefix}.conv1", features + j * growth, size, bn_size * growth, 1)
            layers.conv(f"{prefix}.conv2", bn_size * growth, size, growth, 3, pad=1)
        features += count * growth
        if i < len(blocks):
            layers.conv(f"features.transition{i}.conv", features, size, features // 2, 1)
            features, size = features // 2, _pool(size, 2, 2)
    return layers
