"""A small Vision Transformer (Dosovitskiy et al., ICLR 2021).

Patch embedding as a stride-p convolution, a class token and learned position
embeddings, pre-norm encoder layers (Q/K/V MatMuls, Softmax attention, GELU MLP), a final
LayerNorm and a linear head on the class token. Default: 64x64 images, 8x8 patches (64
tokens + class token), width 192, 3 heads, 4 layers, 100 classes.
"""

from __future__ import annotations

import numpy as np
import onnx

from engine.zoo.builder import ModelBuilder
from engine.zoo.transformer import pre_norm_layer


def build_vit(
    seed: int = 0,
    *,
    resolution: int = 64,
    patch: int = 8,
    width: int = 192,
    heads: int = 3,
    layers: int = 4,
    classes: int = 100,
) -> onnx.ModelProto:
    """Input ``input`` [1, 3, R, R]; output ``logits`` [1, classes]."""
    b = ModelBuilder("vit_small", seed)
    x = b.input("input", [1, 3, resolution, resolution])
    tokens = (resolution // patch) ** 2
    x = b.conv(x, 3, width, patch, stride=patch, bias=True, pad=0, name="patch_embed")
    x = b.op(
        "Reshape",
        [x, b.const("flat", np.array([0, width, tokens], np.int64))],
        name="patch_flatten",
    )
    x = b.op("Transpose", [x], name="patch_tokens", perm=[0, 2, 1])
    cls = b.weight("cls_token", (1, 1, width), 0.02)
    x = b.op("Concat", [cls, x], name="prepend_cls", axis=1)
    x = b.op("Add", [x, b.weight("pos_embed", (1, tokens + 1, width), 0.02)], name="add_pos")
    for i in range(layers):
        x = pre_norm_layer(b, x, width, heads, 4 * width, f"block{i}")
    x = b.layer_norm(x, width, name="final_ln")
    x = b.op("Gather", [x, b.const("cls_index", np.array(0, np.int64))], name="take_cls", axis=1)
    return b.build([b.gemm(x, width, classes, name="head")])
