"""MobileNetV2 (Sandler et al., CVPR 2018), width 1.0 at 224x224.

The torchvision layout: a 3x3 stride-2 stem, 17 inverted-residual blocks (1x1 expand,
3x3 depthwise, 1x1 linear projection, each followed by BatchNormalization; ReLU6 after
the first two), a 1x1 conv to 1280 channels and a 1000-way classifier. About 300 M MACs
and 3.5 M parameters (plus the BatchNormalization running statistics, which an ONNX
export without folding stores as weights).
"""

from __future__ import annotations

import onnx

from engine.zoo.builder import ModelBuilder

# (expansion t, output channels c, repeats n, first stride s), Table 2 of the paper
INVERTED_RESIDUALS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def build_mobilenet_v2(seed: int = 0, *, resolution: int = 224) -> onnx.ModelProto:
    """MobileNetV2 with seeded random weights; input ``input`` [1, 3, R, R]."""
    b = ModelBuilder("mobilenet_v2", seed)
    x = b.input("input", [1, 3, resolution, resolution])
    x = b.conv_bn(x, 3, 32, 3, stride=2, act="relu6", name="stem")
    channels = 32
    for stage, (t, c, n, s) in enumerate(INVERTED_RESIDUALS, start=1):
        for i in range(n):
            x = _inverted_residual(b, x, channels, c, t, s if i == 0 else 1, f"s{stage}b{i}")
            channels = c
    x = b.conv_bn(x, channels, 1280, 1, act="relu6", name="last")
    return b.build([b.classifier_head(x, 1280, 1000)])


def _inverted_residual(
    b: ModelBuilder, x: str, cin: int, cout: int, t: int, stride: int, name: str
):
    hidden = cin * t
    y = x if t == 1 else b.conv_bn(x, cin, hidden, 1, act="relu6", name=f"{name}_expand")
    y = b.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden, act="relu6", name=f"{name}_dw")
    y = b.conv_bn(y, hidden, cout, 1, act=None, name=f"{name}_project")
    if stride == 1 and cin == cout:
        y = b.op("Add", [x, y], name=f"{name}_add")
    return y
