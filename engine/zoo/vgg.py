"""VGG-16 (Simonyan and Zisserman, ICLR 2015, configuration D) at 224x224.

138.36 M parameters (553 MB in float32) are too many to materialise for tests on two
cores, so every weight is a ``ConstantOfShape`` fill (as in onnx's bundled light
models): the file is a few kB, and shapes, parameter counts and MACs are exact. The
fully connected layers hold 89.4 % of the parameters and under 1 % of the MACs
(hsa_cnn_partition, L18/L65), the published figure the tests check.
"""

from __future__ import annotations

import onnx

from engine.zoo.builder import ModelBuilder

# Output channels of the 3x3 convs per block; every block ends in a 2x2 stride-2 max pool.
BLOCKS = [(64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512)]
FC_WIDTHS = (4096, 4096, 1000)


def build_vgg16(seed: int = 0) -> onnx.ModelProto:
    """VGG-16 with ConstantOfShape-filled weights; input ``input`` [1, 3, 224, 224]."""
    b = ModelBuilder("vgg16", seed, fill_weights=True)
    x = b.input("input", [1, 3, 224, 224])
    channels = 3
    for block, widths in enumerate(BLOCKS, start=1):
        for layer, width in enumerate(widths, start=1):
            x = b.conv(x, channels, width, 3, bias=True, name=f"conv{block}_{layer}")
            x = b.op("Relu", [x], name=f"relu{block}_{layer}")
            channels = width
        x = b.op("MaxPool", [x], name=f"pool{block}", kernel_shape=[2, 2], strides=[2, 2])
    x = b.op("Flatten", [x], name="flatten")
    features = channels * 7 * 7
    for i, width in enumerate(FC_WIDTHS, start=6):
        x = b.gemm(x, features, width, name=f"fc{i}")
        if width != FC_WIDTHS[-1]:
            x = b.op("Relu", [x], name=f"relu{i}")
        features = width
    return b.build([x])
