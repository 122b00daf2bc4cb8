"""Simplification: shape arithmetic folded, the report, the original kept, failures warned."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_builders import LIGHT_DIR, build, weight, zoo_model

from engine.graph import AnalysisConfig, analyze_model
from engine.graph.simplify import simplify_model


def exported_flatten():
    """What torch exports for ``x.view(x.size(0), -1) @ w``: shape arithmetic at run time."""
    const = numpy_helper.from_array
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="fc"),
    ]
    inits = [
        const(np.array(0, np.int64), "zero"),
        const(np.array([0], np.int64), "axes"),
        const(np.array([-1], np.int64), "minus_one"),
        weight("w", (128, 10)),
    ]
    return build(nodes, [("x", ["N", 8, 4, 4])], [("y", ["N", 10])], inits)


def test_shape_arithmetic_is_folded_and_reported():
    model = exported_flatten()
    before = model.SerializeToString()
    analysis = analyze_model(model, AnalysisConfig(input_shapes={"x": (2, 8, 4, 4)}, simplify=True))
    report = analysis.simplification
    assert report.applied and report.warning is None
    assert (report.nodes_before, report.nodes_after) == (6, 2)
    assert report.ops_before == {
        "Shape": 1, "Gather": 1, "Unsqueeze": 1, "Concat": 1, "Reshape": 1, "MatMul": 1
    }  # fmt: skip
    assert report.ops_after == {"Reshape": 1, "MatMul": 1}
    assert report.tool == "onnxslim 0.1.98" and report.seconds > 0
    assert analysis.nodes == 2 and analysis.ops == {"Reshape": 1, "MatMul": 1}
    assert analysis.macs == 2 * 128 * 10 and analysis.not_costed == []
    assert [n.name for n in analysis.simplified_model.graph.node] == ["reshape", "fc"]
    assert model.SerializeToString() == before  # the original is untouched
    assert analysis.to_dict()["simplification"]["nodes_after"] == 2


def test_without_simplify_the_key_is_null():
    result = analyze_model(exported_flatten()).to_dict()
    assert result["simplification"] is None


def test_large_constant_fills_stay_computed():
    """VGG-16's 553 MB of ConstantOfShape weights are not materialised."""
    simplified = simplify_model(zoo_model("vgg16"))
    assert simplified.report.applied
    assert simplified.model.ByteSize() < 2_000_000
    assert simplified.report.ops_after["ConstantOfShape"] >= 3  # the FC weights at least


def test_ir3_light_model_is_simplified_and_keeps_its_figures():
    path = LIGHT_DIR / "light_resnet50.onnx"
    plain = analyze_model(path)
    analysis = analyze_model(path, AnalysisConfig(simplify=True))
    assert analysis.simplification.nodes_after < analysis.simplification.nodes_before == 415
    assert analysis.header.ir_version == 3  # the uploaded model's
    assert analysis.macs == plain.macs
    assert analysis.not_costed == []


def test_failure_becomes_a_warning_and_the_original_is_analyzed(monkeypatch):
    import onnxslim

    def broken(*args, **kwargs):
        raise RuntimeError("fold failed\n  at node 'x'")

    monkeypatch.setattr(onnxslim, "slim", broken)
    model = exported_flatten()
    result = simplify_model(model)
    assert result.model is model
    assert not result.report.applied
    assert result.report.nodes_after == result.report.nodes_before == 6
    expected = "simplification failed, the original model is analyzed: fold failed at node 'x'"
    assert result.report.warning == expected

    analysis = analyze_model(model, AnalysisConfig(input_shapes={"x": (2, 8, 4, 4)}, simplify=True))
    assert analysis.nodes == 6 and expected in analysis.warnings
    assert analysis.simplified_model is None


def test_a_result_the_checker_rejects_is_not_used(monkeypatch):
    import onnxslim

    def invalid(model, **kwargs):
        broken = onnx.ModelProto()
        broken.CopyFrom(model)
        broken.graph.node[0].input[0] = "nowhere"
        return broken

    monkeypatch.setattr(onnxslim, "slim", invalid)
    result = simplify_model(exported_flatten())
    assert not result.report.applied
    assert "nowhere" in result.report.warning


@pytest.mark.parametrize("name", ["bert_small", "mobilenet_v2"])
def test_simplification_keeps_the_models_own_ops(name):
    """No fusion: Conv+BatchNormalization and MatMul+Add stay as they are."""
    model = zoo_model(name)
    report = simplify_model(model).report
    assert report.applied
    assert report.nodes_after <= report.nodes_before
    for op in ("BatchNormalization", "MatMul", "Conv"):
        assert report.ops_after.get(op) == report.ops_before.get(op)
