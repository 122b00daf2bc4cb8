"""Our fusion rules as ONNX rewrites: what they merge, and that the model computes the same."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.fusion.rules import horizontal, sum_to_add


def _random(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def qkv_model():
    """x[1,8,16] -> Q, K, V projections (MatMul + bias Add) -> three outputs."""
    nodes, inits = [], []
    for k, name in enumerate("qkv"):
        nodes.append(helper.make_node("MatMul", ["x", f"w{name}"], [f"m{name}"], name=name))
        nodes.append(
            helper.make_node("Add", [f"m{name}", f"b{name}"], [name.upper()], name=f"{name}_bias")
        )
        inits += [_random(f"w{name}", (16, 16), k), _random(f"b{name}", (16,), 10 + k)]
    outputs = [(n, [1, 8, 16]) for n in "QKV"]
    return build(nodes, [("x", [1, 8, 16])], outputs, inits)


def test_horizontal_merges_qkv_projections_into_one_matmul_and_a_split():
    model = qkv_model()
    merged, rewrites = horizontal(model)
    assert [r["nodes"] for r in rewrites] == [["q", "k", "v"]]
    ops = [n.op_type for n in merged.graph.node]
    assert ops.count("MatMul") == 1 and ops.count("Slice") == 3 and ops.count("Add") == 3
    weight = next(t for t in merged.graph.initializer if t.name.endswith("_weight"))
    assert list(weight.dims) == [16, 48]
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    for before, after in zip(_run(model, {"x": x}), _run(merged, {"x": x}), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_horizontal_merges_same_shaped_convs_but_not_different_kernels():
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="c1"),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], name="c2"),
        helper.make_node("Conv", ["x", "w3"], ["c"], name="c3", pads=[1, 1, 1, 1]),
    ]
    inits = [
        _random("w1", (4, 3, 1, 1), 1),
        _random("b1", (4,), 2),
        _random("w2", (6, 3, 1, 1), 3),
        _random("b2", (6,), 4),
        _random("w3", (5, 3, 3, 3), 5),
    ]
    model = build(
        nodes,
        [("x", [1, 3, 8, 8])],
        [("a", [1, 4, 8, 8]), ("b", [1, 6, 8, 8]), ("c", [1, 5, 8, 8])],
        inits,
    )
    merged, rewrites = horizontal(model)
    assert [r["nodes"] for r in rewrites] == [["c1", "c2"]]
    assert [n.op_type for n in merged.graph.node] == ["Conv", "Slice", "Slice", "Conv"]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    for before, after in zip(_run(model, {"x": x}), _run(merged, {"x": x}), strict=True):
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5)


def test_horizontal_leaves_a_model_without_siblings_unchanged():
    model = build(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [("x", [2, 4])],
        [("y", [2, 3])],
        [_random("w", (4, 3), 0)],
    )
    same, rewrites = horizontal(model)
    assert rewrites == [] and same is model


@pytest.mark.parametrize("inputs", [2, 3])
def test_sum_becomes_a_chain_of_adds(inputs):
    names = [f"x{i}" for i in range(inputs)]
    model = build(
        [helper.make_node("Sum", names, ["y"], name="s")],
        [(n, [2, 3]) for n in names],
        [("y", [2, 3])],
    )
    rewritten, rewrites = sum_to_add(model)
    assert [n.op_type for n in rewritten.graph.node] == ["Add"] * (inputs - 1)
    assert rewrites[0]["nodes"] == ["s"] and len(rewrites[0]["into"]) == inputs - 1
    feeds = {n: np.full((2, 3), i + 1, np.float32) for i, n in enumerate(names)}
    np.testing.assert_array_equal(_run(rewritten, feeds)[0], _run(model, feeds)[0])
