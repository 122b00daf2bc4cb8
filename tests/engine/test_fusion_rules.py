"""Our fusion rules as ONNX rewrites: what they merge, and that the model computes the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from engine.fusion.rules import horizontal, layer_norm, sink_reshape, sum_to_add


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


def test_horizontal_leaves_convs_as_they_are():
    """Merged, their channel slices ran in NCHW between blocked convs (Inception: 29 layout
    transforms against 17, 2.53 against 2.34 ms)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="c1"),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], name="c2"),
    ]
    inits = [
        _random("w1", (4, 3, 1, 1), 1),
        _random("b1", (4,), 2),
        _random("w2", (6, 3, 1, 1), 3),
        _random("b2", (6,), 4),
    ]
    model = build(nodes, [("x", [1, 3, 8, 8])], [("a", [1, 4, 8, 8]), ("b", [1, 6, 8, 8])], inits)
    same, rewrites = horizontal(model)
    assert rewrites == [] and [n.name for n in same.graph.node] == ["c1", "c2"]


def test_horizontal_merges_same_shaped_convs_but_not_different_kernels(monkeypatch):
    monkeypatch.setattr("engine.fusion.rules.horizontal_merge.MERGE_CONVS", True)
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


def ffn_model():
    """BERT's FFN as the importer writes it: Reshape -> Gemm -> Reshape, then GELU from
    scalar constants and a residual Add of a same-shaped tensor."""
    make = helper.make_node
    scalars = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in (("sqrt2", 1.4142135), ("one", 1.0), ("half", 0.5))
    ]
    shapes = [
        numpy_helper.from_array(np.array(s, np.int64), n)
        for n, s in (("flat", [8, 16]), ("seq", [1, 8, 16]))
    ]
    nodes = [
        make("Reshape", ["x", "flat"], ["x2"], name="pre"),
        make("Gemm", ["x2", "w", "b"], ["g"], name="gemm"),
        make("Reshape", ["g", "seq"], ["h"], name="post"),
        make("Div", ["h", "sqrt2"], ["d"], name="div"),
        make("Erf", ["d"], ["e"], name="erf"),
        make("Add", ["e", "one"], ["a"], name="add1"),
        make("Mul", ["h", "a"], ["m"], name="mul"),
        make("Mul", ["m", "half"], ["gelu"], name="half_mul"),
        make("Add", ["gelu", "x"], ["y"], name="residual"),
    ]
    inits = [_random("w", (16, 16), 1), _random("b", (16,), 2), *scalars, *shapes]
    return build(nodes, [("x", [1, 8, 16])], [("y", [1, 8, 16])], inits)


def test_sink_reshape_moves_the_gelu_and_residual_before_the_reshape():
    model = ffn_model()
    moved, rewrites = sink_reshape(model)
    assert len(rewrites) == 1
    assert set(rewrites[0]["nodes"]) == {
        "post",
        "div",
        "erf",
        "add1",
        "mul",
        "half_mul",
        "residual",
    }
    order = [n.op_type for n in moved.graph.node]
    # The elementwise chain now reads the Gemm's output directly; the Reshape comes after
    # it, and the residual operand is reshaped (a view) to the Gemm's layout.
    gemm = order.index("Gemm")
    assert order[gemm + 1 : gemm + 6] == ["Div", "Erf", "Add", "Mul", "Mul"]
    assert order[-1] == "Reshape" and order.count("Reshape") == 3  # pre, residual, y
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)}
    np.testing.assert_allclose(_run(moved, feeds)[0], _run(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_sink_reshape_leaves_ops_with_other_shaped_operands_alone():
    make = helper.make_node
    shape = numpy_helper.from_array(np.array([4, 4], np.int64), "s")
    model = build(
        [make("Reshape", ["x", "s"], ["r"], name="r"), make("Add", ["r", "bias"], ["y"], name="a")],
        [("x", [16])],
        [("y", [4, 4])],
        [shape, _random("bias", (4,), 3)],  # broadcasts over rows: layout-dependent
    )
    assert sink_reshape(model) == (model, [])


def decomposed_layer_norm(opset=13, *, square="Pow", affine=True, axes_input=False, tap=False):
    """x[2,5,16] + r -> LayerNorm as exporters below opset 17 write it -> y (and with
    ``tap`` the centred value as a second output, which forbids the rewrite)."""
    width = 16
    axes = {} if axes_input else {"axes": [-1]}
    reduce_inputs = ["axes"] if axes_input else []
    nodes = [
        helper.make_node("Add", ["x", "r"], ["h"], name="residual"),
        helper.make_node("ReduceMean", ["h", *reduce_inputs], ["mu"], name="mean", **axes),
        helper.make_node("Sub", ["h", "mu"], ["d"], name="centre"),
        helper.make_node("Pow", ["d", "two"], ["sq"], name="square")
        if square == "Pow"
        else helper.make_node("Mul", ["d", "d"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq", *reduce_inputs], ["var"], name="variance", **axes),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="sqrt"),
        helper.make_node("Div", ["d", "std"], ["n" if affine else "y"], name="normalize"),
    ]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    if axes_input:
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
    if affine:
        nodes += [
            helper.make_node("Mul", ["n", "gamma"], ["g"], name="scale"),
            helper.make_node("Add", ["g", "beta"], ["y"], name="shift"),
        ]
        inits += [_random("gamma", (width,), 1), _random("beta", (width,), 2)]
    outputs = [("y", [2, 5, width])] + ([("d", [2, 5, width])] if tap else [])
    inputs = [("x", [2, 5, width]), ("r", [2, 5, width])]
    return build(nodes, inputs, outputs, inits, opset=opset)


LN_FEEDS = {
    "x": np.random.default_rng(3).standard_normal((2, 5, 16)).astype(np.float32) * 3 + 1,
    "r": np.random.default_rng(4).standard_normal((2, 5, 16)).astype(np.float32),
}


@pytest.mark.parametrize(
    "opset, options",
    [(13, {}), (17, {}), (13, {"square": "Mul"}), (18, {"axes_input": True}), (13, {"affine": False})],
)  # fmt: skip
def test_a_decomposed_layer_norm_becomes_one_node_computing_the_same(opset, options):
    model = decomposed_layer_norm(opset, **options)
    fused, rewrites = layer_norm(model)
    onnx.checker.check_model(fused, full_check=True)
    chain = ["mean", "centre", "square", "variance", "add_eps", "sqrt", "normalize"]
    chain += ["scale", "shift"] if options.get("affine", True) else []
    assert [r["nodes"] for r in rewrites] == [chain]
    assert [n.op_type for n in fused.graph.node] == ["Add", "LayerNormalization"]
    assert max(o.version for o in fused.opset_import if o.domain in ("", "ai.onnx")) >= 17
    (expected,) = _run(model, LN_FEEDS)
    (got,) = _run(fused, LN_FEEDS)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_layer_norm_whose_intermediate_is_read_elsewhere_is_left_alone():
    model = decomposed_layer_norm(tap=True)
    assert layer_norm(model) == (model, [])


def test_a_model_without_the_pattern_is_returned_as_it_is():
    model = qkv_model()
    assert layer_norm(model) == (model, [])
