"""Transformer layers shared by the BERT- and ViT-style zoo models.

Multi-head attention is written as an opset-17 export leaves it: separate Q, K and V
MatMuls reading the same input, Reshape/Transpose to heads, MatMul, scale, Softmax,
MatMul, and back; the feed-forward uses GELU in its Erf form.
"""

from __future__ import annotations

import math

import numpy as np

from engine.zoo.builder import ModelBuilder


def attention(b: ModelBuilder, x: str, width: int, heads: int, *, name: str) -> str:
    """Self-attention over ``x`` [batch, seq, width]; returns the projected output."""
    head = width // heads
    split = b.const(f"{name}_heads_shape", np.array([0, 0, heads, head], np.int64))
    merge = b.const(f"{name}_merge_shape", np.array([0, 0, width], np.int64))

    def heads_of(t: str, perm: list[int], tag: str) -> str:
        shaped = b.op("Reshape", [t, split], name=f"{name}_{tag}_split")
        return b.op("Transpose", [shaped], name=f"{name}_{tag}_heads", perm=perm)

    q = heads_of(b.linear(x, width, width, name=f"{name}_q"), [0, 2, 1, 3], "q")
    k = heads_of(b.linear(x, width, width, name=f"{name}_k"), [0, 2, 3, 1], "k")
    v = heads_of(b.linear(x, width, width, name=f"{name}_v"), [0, 2, 1, 3], "v")
    scores = b.op("MatMul", [q, k], name=f"{name}_scores")
    scaled = b.op("Div", [scores, b.scalar(math.sqrt(head))], name=f"{name}_scale")
    probs = b.op("Softmax", [scaled], name=f"{name}_softmax", axis=-1)
    context = b.op("MatMul", [probs, v], name=f"{name}_context")
    context = b.op("Transpose", [context], name=f"{name}_context_t", perm=[0, 2, 1, 3])
    context = b.op("Reshape", [context, merge], name=f"{name}_merge")
    return b.linear(context, width, width, name=f"{name}_out")


def feed_forward(b: ModelBuilder, x: str, width: int, hidden: int, *, name: str) -> str:
    y = b.gelu(b.linear(x, width, hidden, name=f"{name}_fc1"), name=f"{name}_gelu")
    return b.linear(y, hidden, width, name=f"{name}_fc2")


def post_norm_layer(b: ModelBuilder, x: str, width: int, heads: int, hidden: int, name: str):
    """A BERT encoder layer: LayerNorm after each residual Add."""
    x = b.op("Add", [x, attention(b, x, width, heads, name=f"{name}_attn")], name=f"{name}_res1")
    x = b.layer_norm(x, width, name=f"{name}_ln1")
    x = b.op("Add", [x, feed_forward(b, x, width, hidden, name=f"{name}_ffn")], name=f"{name}_res2")
    return b.layer_norm(x, width, name=f"{name}_ln2")


def pre_norm_layer(b: ModelBuilder, x: str, width: int, heads: int, hidden: int, name: str):
    """A ViT encoder layer: LayerNorm before attention and MLP, residual around each."""
    y = attention(b, b.layer_norm(x, width, name=f"{name}_ln1"), width, heads, name=f"{name}_attn")
    x = b.op("Add", [x, y], name=f"{name}_res1")
    y = feed_forward(
        b, b.layer_norm(x, width, name=f"{name}_ln2"), width, hidden, name=f"{name}_mlp"
    )
    return b.op("Add", [x, y], name=f"{name}_res2")
