"""Fixtures for engine tests. They run in a plain Python process: no Django settings."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper
from onnx_builders import build, weight


@pytest.fixture
def save(tmp_path):
    """Write a model (or raw bytes) to a file and return its path."""

    def write(model: onnx.ModelProto | bytes, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
        return path

    return write


@pytest.fixture
def conv_model() -> onnx.ModelProto:
    """x[1,3,32,32] -> Conv(16, 3x3, pad 1, bias) -> Relu -> y[1,16,32,32]."""
    return build(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        [("x", [1, 3, 32, 32])],
        [("y", [1, 16, 32, 32])],
        [weight("w", (16, 3, 3, 3)), weight("b", (16,))],
    )
