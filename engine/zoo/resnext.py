"""ResNeXt blocks (Xie et al., CVPR 2017): aggregated transforms as one grouped conv.

The ResNeXt-50 32x4d stem and ``conv2`` stage (three bottleneck blocks at 56x56: 1x1
to 128 channels, 3x3 grouped conv with 32 groups of 4, 1x1 to 256), the first block of
``conv3`` (stride 2, projection shortcut) and a 1000-way classifier.
"""

from __future__ import annotations

import onnx

from engine.zoo.builder import ModelBuilder

CARDINALITY = 32


def build_resnext_blocks(seed: int = 0, *, resolution: int = 224) -> onnx.ModelProto:
    """Stem, three conv2 blocks and one conv3 block of ResNeXt-50 32x4d."""
    b = ModelBuilder("resnext_blocks", seed)
    x = b.input("input", [1, 3, resolution, resolution])
    x = b.conv_bn(x, 3, 64, 7, stride=2, act="relu", name="stem")
    x = b.op("MaxPool", [x], name="stem_pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    channels = 64
    for i in range(3):
        x = _bottleneck(b, x, channels, 128, 256, 1, f"conv2_{i}")
        channels = 256
    x = _bottleneck(b, x, channels, 256, 512, 2, "conv3_0")
    return b.build([b.classifier_head(x, 512, 1000)])


def _bottleneck(b: ModelBuilder, x: str, cin: int, width: int, cout: int, stride: int, name: str):
    y = b.conv_bn(x, cin, width, 1, act="relu", name=f"{name}_reduce")
    y = b.conv_bn(
        y, width, width, 3, stride=stride, group=CARDINALITY, act="relu", name=f"{name}_grouped"
    )
    y = b.conv_bn(y, width, cout, 1, act=None, name=f"{name}_expand")
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = b.conv_bn(x, cin, cout, 1, stride=stride, act=None, name=f"{name}_shortcut")
    return b.op("Relu", [b.op("Add", [y, shortcut], name=f"{name}_add")], name=f"{name}_out")
