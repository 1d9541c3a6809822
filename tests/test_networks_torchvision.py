"""The torchvision networks of traces.network, checked layer by layer against their ONNX exports.

Ground truth: tests/data/onnx/<model>.convs.jsonl (the Conv nodes of torchvision's own exports, shapes
from ONNX shape inference, cross-checked against PyTorch forward hooks; see that folder's README.md)
and README.md's table of conv weight counts, plus torchvision's published parameter totals.
"""
import pytest

from traces import NETWORKS, network

from .onnx_data import EXPORTS, expected_layers, torch_module_name

TORCHVISION = ["resnet18", "resnet101", "vgg19", "inception_v3", "mobilenet_v2", "resnext50_32x4d",
               "efficientnet_b0", "densenet121"]


@pytest.mark.parametrize("name", TORCHVISION + ["resnet50"])
def test_equal_to_the_export_layer_for_layer(name):
    ours = network(name)
    theirs = expected_layers(name)
    assert len(ours) == len(theirs) == EXPORTS[name][0]
    for mine, export in zip(ours, theirs):
        assert mine == export            # shape, stride, pad, dilation, groups and name
    assert sum(layer.params for layer in ours) == EXPORTS[name][1]


@pytest.mark.parametrize("name, paper_names", [
    ("vgg16", [f"conv{s}_{i}" for s, count in ((1, 2), (2, 2), (3, 3), (4, 3), (5, 3)) for i in range(1, count + 1)]),
    ("alexnet", ["conv1", "conv2", "conv3", "conv4", "conv5"]),
])
def test_paper_named_networks_equal_the_export_but_for_names(name, paper_names):
    ours, theirs = network(name), expected_layers(name)
    assert [layer.name for layer in ours] == paper_names
    assert [layer.with_batch(1).as_dict() | {"name": ""} for layer in ours] == \
        [layer.as_dict() | {"name": ""} for layer in theirs]
    assert sum(layer.params for layer in ours) == EXPORTS[name][1]


def test_all_listed():
    assert set(TORCHVISION) <= set(NETWORKS)
    assert NETWORKS[:4] == ("vgg16", "resnet50", "alexnet", "googlenet")


def _bn_channels_resnet(depths, widths, stem=64):
    """BatchNorm channels of a torchvision ResNet: bn1, each block's BNs, the downsample BN of each stage."""
    return stem + sum(blocks * sum(block_bns) + block_bns[-1] for blocks, block_bns in zip(depths, widths))


@pytest.mark.parametrize("name, total, bn_channels, others", [
    # torchvision model cards (Weights meta "num_params"): total parameters. Convs carry no bias; BN has a
    # weight and a bias per channel; fc = 512*1000 + 1000 or 2048*1000 + 1000.
    # resnet18: bn1 64; per stage 2 blocks x 2 BNs; downsample BNs in layer2..4 only (layer1 keeps 64).
    ("resnet18", 11_689_512, 64 + 2 * 128 + (2 * 256 + 128) + (2 * 512 + 256) + (2 * 1024 + 512), 513_000),
    ("resnet101", 44_549_160,
     _bn_channels_resnet((3, 4, 23, 3), ((64, 64, 256), (128, 128, 512), (256, 256, 1024), (512, 512, 2048))),
     2_049_000),
    ("resnext50_32x4d", 25_028_904,
     _bn_channels_resnet((3, 4, 6, 3), ((128, 128, 256), (256, 256, 512), (512, 512, 1024), (1024, 1024, 2048))),
     2_049_000),
    # vgg19: no BN; one bias per conv filter (2*64 + 2*128 + 4*256 + 8*512 = 5,504) and the classifier
    # 25088*4096+4096 + 4096*4096+4096 + 4096*1000+1000.
    ("vgg19", 143_667_240, 0, 5_504 + 25088 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 1000 + 1000),
])
def test_conv_weights_against_torchvision_parameter_totals(name, total, bn_channels, others):
    assert sum(layer.params for layer in network(name)) == total - 2 * bn_channels - others


def test_spot_checks():
    inception = {layer.name: layer for layer in network("inception_v3")}
    stem = inception["Conv2d_1a_3x3.conv"]
    assert (stem.h, stem.p, stem.stride) == (299, 149, (2, 2))
    seven = inception["Mixed_6b.branch7x7_2.conv"]
    assert (seven.r, seven.s, seven.pad, seven.h) == (1, 7, (0, 3), 17)
    assert inception["Mixed_7c.branch_pool.conv"].c == 2048
    mobile = {layer.name: layer for layer in network("mobilenet_v2")}
    depthwise = mobile["features.2.conv.1.0"]
    assert depthwise.groups == depthwise.c == depthwise.k == 96 and depthwise.stride == (2, 2)
    assert mobile["features.1.conv.1"].k == 16 and mobile["features.18.0"].k == 1280
    effnet = {layer.name: layer for layer in network("efficientnet_b0")}
    squeeze = effnet["features.6.0.block.2.fc1"]           # SE on the pooled 1x1 map, 112 // 4 squeeze channels
    assert (squeeze.h, squeeze.w, squeeze.c, squeeze.k) == (1, 1, 672, 28)
    dense = {layer.name: layer for layer in network("densenet121")}
    assert dense["features.denseblock4.denselayer16.conv1"].c == 512 + 15 * 32
    assert dense["features.transition3.conv"].k == 512
    resnext = {layer.name: layer for layer in network("resnext50_32x4d")}
    assert resnext["layer4.0.conv2"].groups == 32 and resnext["layer4.0.conv2"].c_per_group == 32


@pytest.mark.parametrize("name", TORCHVISION)
def test_batch(name):
    layers = network(name, batch=3)
    assert all(layer.n == 3 for layer in layers)
    assert layers == [layer.with_batch(3) for layer in network(name)]


@pytest.mark.parametrize("node, module", [
    ("/conv1/Conv", "conv1"),
    ("/layer1/layer1.0/downsample/downsample.0/Conv", "layer1.0.downsample.0"),
    ("/features/features.1/features.1.0/block/block.1/fc1/Conv", "features.1.0.block.1.fc1"),
    ("/features/denseblock1/denselayer1/conv1/Conv", "features.denseblock1.denselayer1.conv1"),
])
def test_name_mapping_reference(node, module):
    assert torch_module_name(node) == module
