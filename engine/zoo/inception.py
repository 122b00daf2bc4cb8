"""An Inception-style CNN (GoogLeNet, Szegedy et al., CVPR 2015), reduced in width.

Stem (7x7 stride-2 conv, max pool, 1x1 and 3x3 convs, max pool), then inception modules
of four parallel branches (1x1; 1x1 -> 3x3; 1x1 -> 5x5; 3x3 max pool -> 1x1) joined by a
Concat, with a stride-2 max pool between the two groups. The parallel branches and the
MaxPool/Concat joins are what the partitioning stage works on (hsa_cnn_partition).
"""

from __future__ import annotations

import onnx

from engine.zoo.builder import ModelBuilder

# (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj) per module: GoogLeNet's 3a, 3b, 4a
# at half width
MODULES = [
    [(32, 48, 64, 8, 16, 16), (64, 64, 96, 16, 48, 32)],
    [(96, 48, 104, 8, 24, 32)],
]


def build_inception(seed: int = 0, *, resolution: int = 224) -> onnx.ModelProto:
    """Stem, two inception modules, a max pool, one more module and a classifier."""
    b = ModelBuilder("inception", seed)
    x = b.input("input", [1, 3, resolution, resolution])
    x = b.conv_bn(x, 3, 32, 7, stride=2, act="relu", name="stem1")
    x = _max_pool(b, x, 2, "stem_pool1")
    x = b.conv_bn(x, 32, 32, 1, act="relu", name="stem2")
    x = b.conv_bn(x, 32, 96, 3, act="relu", name="stem3")
    x = _max_pool(b, x, 2, "stem_pool2")
    channels = 96
    for group, modules in enumerate(MODULES):
        if group:
            x = _max_pool(b, x, 2, f"pool{group}")
        for i, widths in enumerate(modules):
            x, channels = _inception_module(b, x, channels, widths, f"mixed{group}{'ab'[i]}")
    return b.build([b.classifier_head(x, channels, 1000)])


def _max_pool(b: ModelBuilder, x: str, stride: int, name: str) -> str:
    return b.op("MaxPool", [x], name=name, kernel_shape=[3, 3], strides=[stride] * 2, pads=[1] * 4)


def _inception_module(b: ModelBuilder, x: str, cin: int, widths, name: str) -> tuple[str, int]:
    c1, r3, c3, r5, c5, pp = widths
    branch1 = b.conv_bn(x, cin, c1, 1, act="relu", name=f"{name}_1x1")
    branch3 = b.conv_bn(x, cin, r3, 1, act="relu", name=f"{name}_3x3_reduce")
    branch3 = b.conv_bn(branch3, r3, c3, 3, act="relu", name=f"{name}_3x3")
    branch5 = b.conv_bn(x, cin, r5, 1, act="relu", name=f"{name}_5x5_reduce")
    branch5 = b.conv_bn(branch5, r5, c5, 5, act="relu", name=f"{name}_5x5")
    pool = _max_pool(b, x, 1, f"{name}_pool")
    pool = b.conv_bn(pool, cin, pp, 1, act="relu", name=f"{name}_pool_proj")
    joined = b.op("Concat", [branch1, branch3, branch5, pool], name=f"{name}_concat", axis=1)
    return joined, c1 + c3 + c5 + pp
