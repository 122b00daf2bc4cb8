"""analyze_model: result layout, input-shape overrides, limits, progress and cancel."""

from __future__ import annotations

import json

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.errors import Cancelled, ModelLimitError, ShapeError
from engine.graph import AnalysisConfig, analyze_model

TOP_KEYS = {
    "model",
    "nodes",
    "params",
    "param_bytes",
    "macs",
    "flops",
    "activation_bytes",
    "ops",
    "not_costed",
    "inputs",
    "outputs",
    "node_list",
    "warnings",
    "analysis_s",
    "structure",
    "simplification",
    "preparation",
}
NODE_KEYS = {
    "name",
    "op_type",
    "inputs",
    "outputs",
    "output_shapes",
    "output_bytes",
    "attributes",
    "macs",
    "flops",
    "params",
    "bytes_read",
    "bytes_written",
    "intensity",
    "costed",
}


def dynamic_conv():
    """x[N,3,H,W] -> Conv(8, 3x3, pad 1) -> Relu -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    return build(
        nodes, [("x", ["N", 3, "H", "W"])], [("y", ["N", 8, "H", "W"])], [weight("w", (8, 3, 3, 3))]
    )


def test_to_dict_has_exactly_the_documented_keys(conv_model, save):
    result = analyze_model(save(conv_model)).to_dict()
    assert set(result) == TOP_KEYS
    assert set(result["model"]) == {"ir_version", "opsets", "producer", "graph_name"}
    assert result["model"]["opsets"] == {"ai.onnx": 17}
    assert all(set(n) == NODE_KEYS for n in result["node_list"])
    assert result["nodes"] == 2
    assert result["ops"] == {"Conv": 1, "Relu": 1}
    assert result["inputs"] == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert result["node_list"][0]["output_shapes"] == [[1, 16, 32, 32]]
    assert result["node_list"][0]["output_bytes"] == [16 * 32 * 32 * 4]
    assert result["node_list"][1]["attributes"] == {}
    assert json.loads(json.dumps(result)) == result


def test_ops_sorted_by_count():
    nodes = [helper.make_node("Neg", ["x"], ["a"])] + [
        helper.make_node("Relu", [n], [m]) for n, m in [("a", "b"), ("b", "c"), ("c", "y")]
    ]
    analysis = analyze_model(build(nodes, [("x", [2])], [("y", [2])]))
    assert list(analysis.ops.items()) == [("Relu", 3), ("Neg", 1)]


def test_symbolic_dims_are_not_costed_until_fixed():
    model = dynamic_conv()
    analysis = analyze_model(model)
    assert analysis.not_costed == ["conv", "relu"] and analysis.macs == 0

    fixed = analyze_model(model, AnalysisConfig(input_shapes={"x": (2, 3, 16, 16)}))
    assert fixed.not_costed == []
    assert fixed.macs == 2 * 8 * 16 * 16 * 27
    assert fixed.inputs[0].shape == [2, 3, 16, 16]
    assert fixed.outputs[0].shape == [2, 8, 16, 16]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # not mutated


def test_overriding_a_static_dim_warns_and_reinfers(conv_model):
    analysis = analyze_model(conv_model, AnalysisConfig(input_shapes={"x": (4, 3, 32, 32)}))
    assert analysis.macs == 4 * 442_368
    assert analysis.outputs[0].shape == [4, 16, 32, 32]
    assert "input 'x' axis 0: declared 1, analyzed as 4" in analysis.warnings


def test_wrong_rank_names_input_and_expected_rank():
    with pytest.raises(ShapeError, match="input 'x' has rank 4 .*given shape 1x3x16 has rank 3"):
        analyze_model(dynamic_conv(), AnalysisConfig(input_shapes={"x": (1, 3, 16)}))


def test_unknown_input_lists_the_inputs():
    with pytest.raises(ShapeError, match=r"no input 'w' \(its inputs: x\)") as info:
        analyze_model(dynamic_conv(), AnalysisConfig(input_shapes={"w": (8, 3, 3, 3)}))
    assert info.value.code == "bad_shape"


def test_shapes_that_do_not_fit_the_model():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    model = build([node], [("a", ["M", "K"])], [("y", ["M", 6])], [weight("b", (5, 6))])
    assert analyze_model(model, AnalysisConfig(input_shapes={"a": (2, 5)})).macs == 60
    with pytest.raises(ShapeError, match="do not fit the model: .*MatMul.*Incompatible"):
        analyze_model(model, AnalysisConfig(input_shapes={"a": (2, 4)}))


def test_node_and_tensor_limits(conv_model):
    with pytest.raises(ModelLimitError, match="2 nodes, more than the limit of 1"):
        analyze_model(conv_model, AnalysisConfig(max_nodes=1))
    with pytest.raises(ModelLimitError, match="tensor '.*' has 16384 elements"):
        analyze_model(conv_model, AnalysisConfig(max_tensor_elements=10_000))


def test_progress_reaches_one_and_cancel_propagates(conv_model):
    seen = []
    analyze_model(conv_model, progress=lambda f, m: seen.append(f))
    assert seen[0] == 0.0 and seen[-1] == 1.0
    assert seen == sorted(seen)

    def cancel(fraction, message):
        if fraction >= 0.3:
            raise Cancelled("stopped by user")

    with pytest.raises(Cancelled):
        analyze_model(conv_model, progress=cancel)
