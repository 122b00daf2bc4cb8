"""A recurrent sequence classifier built on the ONNX ``LSTM`` op.

A bidirectional LSTM over the input sequence, its two directions concatenated per time
step, a second (forward) LSTM, and a linear classifier on the last hidden state. The
ONNX weight layout: W [directions, 4H, input], R [directions, 4H, H], B [directions, 8H].
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from engine.zoo.builder import ModelBuilder


def build_lstm(
    seed: int = 0, *, steps: int = 32, features: int = 64, hidden: int = 128, classes: int = 10
) -> onnx.ModelProto:
    """Input ``sequence`` [steps, 1, features]; output ``logits`` [1, classes]."""
    b = ModelBuilder("lstm_classifier", seed)
    x = b.input("sequence", [steps, 1, features])
    y = _lstm(b, x, features, hidden, 2, "lstm1")[0]  # [steps, 2, 1, hidden]
    y = b.op("Transpose", [y], name="lstm1_time_major", perm=[0, 2, 1, 3])
    y = b.op(
        "Reshape", [y, b.const("concat_dirs", np.array([0, 0, -1], np.int64))], name="lstm1_concat"
    )
    last = _lstm(b, y, 2 * hidden, hidden, 1, "lstm2")[1]  # Y_h [1, 1, hidden]
    last = b.op(
        "Reshape", [last, b.const("flat", np.array([1, hidden], np.int64))], name="last_hidden"
    )
    return b.build([b.gemm(last, hidden, classes, name="classifier")])


def _lstm(b: ModelBuilder, x: str, features: int, hidden: int, directions: int, name: str):
    std = 1 / math.sqrt(hidden)
    w = b.weight(f"{name}_W", (directions, 4 * hidden, features), std)
    r = b.weight(f"{name}_R", (directions, 4 * hidden, hidden), std)
    bias = b.weight(f"{name}_B", (directions, 8 * hidden), std)
    direction = "bidirectional" if directions == 2 else "forward"
    return b.op_outputs(
        "LSTM", [x, w, r, bias], name=name, outputs=2, hidden_size=hidden, direction=direction
    )
