"""GDPNPU operator substitution: each rewrite is exact, kept only where it times faster,
and shows up in the compile result and the CLI."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from onnx_builders import build

from cli.main import main
from engine.fusion import CompileConfig, compile_model, stage
from engine.fusion.options import CompileOptions
from engine.fusion.substitution import MeasuredBench, PredictedBench, substitute
from engine.fusion.substitution_rules import Context, apply, rewrite_node
from engine.graph.prepare import prepare_model
from engine.targets.catalog import get_target


def _run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _check_exact(model, rule, s):
    model = onnx.shape_inference.infer_shapes(model)
    node = model.graph.node[0]
    rewrite = rewrite_node(rule, node, Context(model), s)
    assert rewrite is not None
    rewritten = apply(model, [rewrite])
    onnx.checker.check_model(rewritten)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": np.random.default_rng(s).standard_normal(shape).astype(np.float32)}
    (want,), (got,) = _run(model, feeds), _run(rewritten, feeds)
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-5, atol=1e-4)
    return rewritten


def _reduce(op, shape, axes, opset, keepdims=1):
    inits, inputs, attrs = [], ["x"], {"keepdims": keepdims}
    if op == "ReduceSum" and opset >= 13 or opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    else:
        attrs["axes"] = axes
    node = helper.make_node(op, inputs, ["y"], name="reduce", **attrs)
    return build([node], [("x", shape)], [("y", None)], inits, opset=opset)


@pytest.mark.parametrize("s", [2, 4, 8])
@pytest.mark.parametrize(
    ("op", "shape", "axes", "opset", "keepdims"),
    [
        ("ReduceSum", [1, 3, 64, 64], [2, 3], 17, 1),
        ("ReduceSum", [2, 4096], [1], 13, 0),
        ("ReduceMean", [1, 8, 1024], [-1], 17, 1),
        ("ReduceMean", [4, 2048], [1], 18, 0),
        ("ReduceMax", [1, 3, 32, 256], [1, 2, 3], 18, 1),
    ],
)
def test_reduce_split_is_exact(op, shape, axes, opset, keepdims, s):
    rewritten = _check_exact(_reduce(op, shape, axes, opset, keepdims), "reduce-split", s)
    assert [n.op_type for n in rewritten.graph.node] == [
        "Split",
        {"ReduceSum": "Sum", "ReduceMean": "Mean", "ReduceMax": "Max"}[op],
        op,
    ]


def _depthwise(c, side, kernel, pads, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((c, 1, kernel, kernel), np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node(
        "Conv", inputs, ["y"], name="dw", group=c, pads=pads, kernel_shape=[kernel, kernel]
    )
    return build([node], [("x", [1, c, side, side + 8])], [("y", None)], inits)


@pytest.mark.parametrize("s", [2, 4, 8, 16])
@pytest.mark.parametrize(
    ("c", "side", "kernel", "pads", "bias"),
    [
        (3, 64, 5, [2, 2, 2, 2], True),
        (1, 32, 3, [1, 1, 1, 1], False),
        (4, 48, 3, [0, 0, 0, 0], True),  # no padding: output 46 rows, only s=2 divides
        (3, 33, 3, [2, 1, 1, 0], True),  # asymmetric pads: 33 + 3 - 3 + 1 = 34 rows
    ],
)
def test_depthwise_spatial_split_is_exact(c, side, kernel, pads, bias, s):
    model = onnx.shape_inference.infer_shapes(_depthwise(c, side, kernel, pads, bias))
    rows = side + pads[0] + pads[2] - kernel + 1
    if rows % s:
        assert rewrite_node("depthwise-spatial", model.graph.node[0], Context(model), s) is None
        return
    rewritten = _check_exact(model, "depthwise-spatial", s)
    conv = next(n for n in rewritten.graph.node if n.op_type == "Conv")
    assert helper.get_attribute_value(conv.attribute[0]) == s * c  # the replicated group


def test_a_dense_or_wide_conv_is_no_candidate():
    dense = helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1, 1, 1, 1])
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    model = onnx.shape_inference.infer_shapes(
        build([dense], [("x", [1, 3, 32, 32])], [("y", None)], [w])
    )
    assert rewrite_node("depthwise-spatial", model.graph.node[0], Context(model), 2) is None
    wide = onnx.shape_inference.infer_shapes(_depthwise(32, 32, 3, [1, 1, 1, 1]))
    assert rewrite_node("depthwise-spatial", wide.graph.node[0], Context(wide), 2) is None


def blur_and_sum():
    """A GDPNPU-style pre-processing graph: a 5x5 blur of an RGB image (depthwise conv),
    then a per-channel sum over the pixels."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 1, 5, 5)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w"],
            ["blur"],
            name="blur",
            group=3,
            pads=[2, 2, 2, 2],
            kernel_shape=[5, 5],
        ),
        helper.make_node("ReduceSum", ["blur", "axes"], ["y"], name="sum", keepdims=1),
    ]
    return build(nodes, [("x", [1, 3, 128, 160])], [("y", [1, 3, 1, 1])], inits)


def test_a_built_model_gets_candidates_timings_and_a_decision():
    model = onnx.shape_inference.infer_shapes(blur_and_sum())
    _, found = substitute(model, MeasuredBench(threads=1, runs=5))
    section = found.to_dict()
    assert section["timing"].startswith("measured on ")
    assert "median of 5 runs" in section["timing"]
    rules = {c["node"]: c for c in section["candidates"]}
    assert rules["blur"]["rule"] == "depthwise-spatial"
    assert rules["sum"]["rule"] == "reduce-split"
    for c in rules.values():
        assert c["original_ms"] > 0
        assert [t["s"] for t in c["tried"]] == [2, 4, 8, 16]
        assert all(t["exact"] and t["ms"] > 0 for t in c["tried"])
        assert c["decision"] in ("kept original", f"s={c['chosen_s']}")
        assert c["reason"]


class _NodeCountBench:
    """Prices a model by its node count, so every rewrite (more nodes) is slower."""

    kind, label = "predicted", "predicted by node count (test)"

    def __init__(self, per_node_ms):
        self.per_node_ms = per_node_ms

    def time_ms(self, models, feeds):
        return [self.per_node_ms(len(m.graph.node)) for m in models]


def test_a_slower_rewrite_is_not_kept():
    model = onnx.shape_inference.infer_shapes(blur_and_sum())
    out, found = substitute(model, _NodeCountBench(lambda n: float(n)))
    assert [c.chosen_s for c in found.candidates] == [None, None]
    assert all("not 5% faster" in c.reason for c in found.candidates)
    assert out is model
    assert found.to_dict()["before_ms"] is None  # nothing kept: no before/after to show


def test_a_faster_rewrite_is_applied_and_stays_exact():
    model = onnx.shape_inference.infer_shapes(blur_and_sum())
    # the more nodes, the faster: the conv's largest s (most tiles) wins; the reduce's
    # rewrite has three nodes for every s, and a tie keeps the smallest
    out, found = substitute(model, _NodeCountBench(lambda n: 100.0 / n))
    assert [c.chosen_s for c in found.candidates] == [16, 2]
    assert {n.op_type for n in out.graph.node} >= {"Split", "Slice", "Concat", "Transpose"}
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 128, 160)).astype(np.float32)}
    assert np.allclose(_run(out, feeds)[0], _run(model, feeds)[0], rtol=1e-4, atol=1e-3)
    assert set(found.origin.values()) == {"blur", "sum"}


def test_a_modeled_target_prices_the_rewrites_with_its_cost_model():
    model = onnx.shape_inference.infer_shapes(blur_and_sum())
    bench = PredictedBench(get_target("phone-snapdragon835"))
    _, found = substitute(model, bench)
    # the first non-CPU unit with an fp32 peak: the DSP computes int8 only
    assert found.timing == "predicted by roofline+efficiency v1 for unit gpu of phone-snapdragon835"
    blur, total = found.candidates
    assert blur.original_ms > 0 and all(t["ms"] > 0 for t in blur.tried)
    # the preset's GPU runs no ReduceSum: its time is unknown, never 0, and nothing is kept
    assert total.original_ms is None and total.chosen_s is None
    assert total.reason == "the original's time is unknown (ReduceSum: gpu does not run ReduceSum)"


FAST = {
    "threads": 1,
    "timing_window_s": 0.1,
    "timing_rounds": 1,
    "kernel_timing_runs": 1,
    "choose_backends": False,  # the section is the point here, not the backend choice
}


def test_the_compile_result_and_the_cli_have_the_substitution_section(save, tmp_path, capsys):
    path = save(blur_and_sum())
    argv = ["compile", str(path), "--threads", "1", "--substitute", "--out", str(tmp_path / "o")]
    assert main([*argv, "--json", "--cache-dir", "none"]) == 0
    data = json.loads(capsys.readouterr().out)
    section = data["substitution"]
    assert section["enabled"] is True
    assert section["timing"].startswith("measured on ")
    assert sorted(c["node"] for c in section["candidates"]) == ["blur", "sum"]
    assert data["outputs_match"] is True  # checked against the original model
    off = compile_model(blur_and_sum(), CompileConfig(out_dir=str(tmp_path / "off"), **FAST))
    assert off.to_dict()["substitution"] == {"enabled": False}


def test_the_stage_prices_substitutions_on_a_modeled_target_with_its_cost_model():
    options = CompileOptions.from_dict({"substitute": True, "threads": 1, "choose_backends": False})
    report = stage.run(
        prepare_model(blur_and_sum()), get_target("dsa-graphturbo"), options, lambda f, m: None
    )
    section = report.details["substitution"]
    assert section["timing"] == "predicted by roofline+efficiency v1 for unit dsa of dsa-graphturbo"
    assert {c["node"] for c in section["candidates"]} == {"blur", "sum"}
