"""EfficientNet-B0 (Tan and Le, ICML 2019) at 224x224: MBConv blocks with SE and Swish.

Each MBConv block: 1x1 expansion (skipped when the ratio is 1), a depthwise kxk conv,
squeeze-and-excitation (global pool, 1x1 reduce to a quarter of the block's input
channels, Swish, 1x1 expand, Sigmoid, channel-wise Mul) and a 1x1 linear projection,
with a residual Add when shape allows. Swish is exported as ``x * Sigmoid(x)`` (opset 17
has no Swish op). About 0.39 G MACs and 5.3 M parameters.
"""

from __future__ import annotations

import onnx

from engine.zoo.builder import ModelBuilder

# (expansion, kernel, first stride, output channels, repeats), Table 1 of the paper
MBCONV_STAGES = [
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
]
SE_RATIO = 0.25


def build_efficientnet_b0(seed: int = 0, *, resolution: int = 224) -> onnx.ModelProto:
    """EfficientNet-B0 with seeded random weights; input ``input`` [1, 3, R, R]."""
    b = ModelBuilder("efficientnet_b0", seed)
    x = b.input("input", [1, 3, resolution, resolution])
    x = b.conv_bn(x, 3, 32, 3, stride=2, act="swish", name="stem")
    channels = 32
    for stage, (e, k, s, c, n) in enumerate(MBCONV_STAGES, start=1):
        for i in range(n):
            x = _mbconv(b, x, channels, c, e, k, s if i == 0 else 1, f"s{stage}b{i}")
            channels = c
    x = b.conv_bn(x, channels, 1280, 1, act="swish", name="head")
    return b.build([b.classifier_head(x, 1280, 1000)])


def _mbconv(b: ModelBuilder, x: str, cin: int, cout: int, e: int, k: int, stride: int, name: str):
    hidden = cin * e
    y = x if e == 1 else b.conv_bn(x, cin, hidden, 1, act="swish", name=f"{name}_expand")
    y = b.conv_bn(y, hidden, hidden, k, stride=stride, group=hidden, act="swish", name=f"{name}_dw")
    y = _squeeze_excite(b, y, hidden, max(1, int(cin * SE_RATIO)), f"{name}_se")
    y = b.conv_bn(y, hidden, cout, 1, act=None, name=f"{name}_project")
    if stride == 1 and cin == cout:
        y = b.op("Add", [x, y], name=f"{name}_add")
    return y


def _squeeze_excite(b: ModelBuilder, x: str, channels: int, reduced: int, name: str) -> str:
    s = b.op("GlobalAveragePool", [x], name=f"{name}_pool")
    s = b.activation(
        b.conv(s, channels, reduced, 1, bias=True, name=f"{name}_reduce"),
        "swish",
        name=f"{name}_swish",
    )
    s = b.op(
        "Sigmoid",
        [b.conv(s, reduced, channels, 1, bias=True, name=f"{name}_expand")],
        name=f"{name}_gate",
    )
    return b.op("Mul", [x, s], name=f"{name}_scale")
