"""Builders for tiny ONNX test graphs, and where the bundled light models are.

A uniquely named module (not ``conftest``) so that test files can import it next to
other test packages' conftests.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT_DIR.glob("light_*.onnx"))


def value(name: str, shape, dtype: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def weight(name: str, shape, dtype=np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ones(shape, dtype=dtype), name)


def build(nodes, inputs, outputs, initializers=(), opset: int = 17, domains=()) -> onnx.ModelProto:
    """A model from nodes and ``(name, shape)`` inputs/outputs (float32 unless a ValueInfo)."""

    def as_value(v):
        return v if isinstance(v, onnx.ValueInfoProto) else value(*v)

    graph = helper.make_graph(
        nodes,
        "test",
        [as_value(v) for v in inputs],
        [as_value(v) for v in outputs],
        list(initializers),
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=10)


@functools.cache
def zoo_model(name: str) -> onnx.ModelProto:
    """A zoo model, built once per test session (do not modify it)."""
    from engine.zoo import build as build_zoo

    return build_zoo(name)


@functools.cache
def analysis_of(source: str | Path):
    """``analyze_model`` of a zoo model name or a model path, once per test session."""
    from engine.graph import analyze_model

    return analyze_model(source if isinstance(source, Path) else zoo_model(source))


def overflow_model(seed: int = 0, weight_std: float = 300.0) -> onnx.ModelProto:
    """An MLP whose activations pass fp16's 65504 on unit-normal inputs: two 64-wide
    MatMul + bias layers with weights of std ``weight_std`` (outputs around 1e6)."""
    rng = np.random.default_rng(seed)

    def tensor(name, shape, std):
        return numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
        helper.make_node("Add", ["h1", "b1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "b2"], ["y"], name="add2"),
    ]
    weights = [
        tensor("w1", (64, 64), weight_std),
        tensor("b1", (64,), 10.0),
        tensor("w2", (64, 16), weight_std),
        tensor("b2", (16,), 10.0),
    ]
    return build(nodes, [("x", [4, 64])], [("y", [4, 16])], weights)
