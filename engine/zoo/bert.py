"""A small BERT-style encoder (Devlin et al., 2019): token ids in, hidden states out.

Word and position embeddings (Gather), LayerNorm, then post-norm encoder layers with
separate Q/K/V MatMuls, Softmax attention and a GELU feed-forward. Sized for tests on
two cores: 4 layers, width 256, 4 heads, sequence 128, a vocabulary of 8192.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from engine.zoo.builder import ModelBuilder
from engine.zoo.transformer import post_norm_layer


def build_bert(
    seed: int = 0,
    *,
    layers: int = 4,
    width: int = 256,
    heads: int = 4,
    seq: int = 128,
    vocab: int = 8192,
) -> onnx.ModelProto:
    """Input ``input_ids`` [1, seq] int64; output ``last_hidden_state`` [1, seq, width]."""
    b = ModelBuilder("bert_small", seed)
    ids = b.input("input_ids", [1, seq], TensorProto.INT64)
    words = b.op(
        "Gather", [b.weight("word_embeddings", (vocab, width), 0.02), ids], name="word_embed"
    )
    positions = b.const("position_ids", np.arange(seq, dtype=np.int64)[None, :])
    where = b.op(
        "Gather",
        [b.weight("position_embeddings", (seq, width), 0.02), positions],
        name="position_embed",
    )
    x = b.layer_norm(b.op("Add", [words, where], name="embed_add"), width, name="embed_ln")
    for i in range(layers):
        x = post_norm_layer(b, x, width, heads, 4 * width, f"layer{i}")
    x = b.op("Identity", [x], name="last_hidden_state")
    return b.build([x])
