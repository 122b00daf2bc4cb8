"""Graph IR: execution order, names, undefined inputs, cycles, subgraphs, params."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import build, weight

from engine.errors import InvalidModelError
from engine.graph import analyze_model, read_header


def test_unsorted_nodes_are_analyzed_in_topological_order(save):
    nodes = [
        helper.make_node("Relu", ["b"], ["y"], name="last"),
        helper.make_node("Neg", ["a"], ["b"], name="middle"),
        helper.make_node("Abs", ["x"], ["a"], name="first"),
    ]
    model = build(nodes, [("x", [4])], [("y", [4])])
    analysis = analyze_model(model)
    assert [n.name for n in analysis.node_list] == ["first", "middle", "last"]
    assert "nodes were not in topological order; analyzed in sorted order" in analysis.warnings
    assert analysis.flops == 12  # shapes were inferred along the sorted order
    assert read_header(save(model)).node_count == 3


def test_branches_keep_file_order_when_already_sorted():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Neg", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="join"),
    ]
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["a", "b", "join"]
    graph = analysis.graph
    assert graph.tensors["x"].consumers == ["a", "b"]
    assert graph.tensors["y"].producer == "join"


def test_unnamed_nodes_get_unique_names():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="Relu_1"),  # collides with a synthesized name
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["Relu_0", "Relu_1", "Relu_2"]
    nodes[2].name = ""
    nodes[0].name = "Relu_2"
    analysis = analyze_model(build(nodes, [("x", [4])], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["Relu_2", "Relu_1", "Relu_2_1"]


def test_undefined_input_names_node_and_tensor(save):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    model = build(nodes, [("x", [4])], [("y", [4])])
    expected = "node 'adder' \\(Add\\) reads tensor 'ghost', which no node produces"
    with pytest.raises(InvalidModelError, match=expected):
        analyze_model(model)
    with pytest.raises(InvalidModelError, match=expected):
        read_header(save(model))


def test_cycle_names_the_nodes_in_it():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="entry"),
        helper.make_node("Add", ["a", "d"], ["b"], name="n1"),
        helper.make_node("Relu", ["b"], ["c"], name="n2"),
        helper.make_node("Neg", ["c"], ["d"], name="n3"),
        helper.make_node("Relu", ["c"], ["y"], name="exit"),
    ]
    model = build(nodes, [("x", [4])], [("y", [4])])
    with pytest.raises(InvalidModelError, match="cycle through nodes n1 -> n2 -> n3 -> n1"):
        analyze_model(model)


def test_control_flow_subgraphs_are_reported_and_their_outer_inputs_kept():
    def branch(name, op):
        out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [4])
        nodes = [
            helper.make_node(op, ["outer"], [f"{name}_tmp"]),
            helper.make_node("Relu", [f"{name}_tmp"], [f"{name}_out"]),
        ]
        return helper.make_graph(nodes, name, [], [out])

    nodes = [
        # The If reads "outer" only inside its branches; that still orders it after "make".
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            name="if",
            then_branch=branch("then", "Neg"),
            else_branch=branch("else", "Abs"),
        ),
        helper.make_node("Relu", ["x"], ["outer"], name="make"),
    ]
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    analysis = analyze_model(build(nodes, [("x", [4]), cond], [("y", [4])]))
    assert [n.name for n in analysis.node_list] == ["make", "if"]
    assert analysis.graph.nodes[1].subgraph_nodes == 4
    assert analysis.graph.tensors["outer"].consumers == ["if"]
    assert any(
        "'if' (If) holds control-flow subgraphs with 4 nodes" in w for w in analysis.warnings
    )
    assert analysis.not_costed == ["if"]


def test_params_counted_once_and_shape_constants_are_not_params():
    shape = numpy_helper.from_array(np.array([3, 4], dtype=np.int64), "w_shape")
    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="fill", value=fill),
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm1"),
        helper.make_node("MatMul", ["x", "w"], ["b"], name="mm2"),  # same weight again
        helper.make_node("Add", ["a", "b"], ["c"], name="add"),
        helper.make_node(
            "Constant",
            [],
            ["target"],
            name="const_shape",
            value=numpy_helper.from_array(np.array([2, 2, 2], np.int64)),
        ),
        helper.make_node("Reshape", ["c", "target"], ["y"], name="reshape"),
    ]
    analysis = analyze_model(
        build(nodes, [("x", [2, 3])], [("y", [2, 2, 2])], [shape, weight("unused", (100,))])
    )
    assert analysis.params == 12  # w only; int64 shapes and an unused initializer are not
    assert analysis.param_bytes == 48
    by_name = {n.name: n for n in analysis.node_list}
    assert by_name["mm1"].cost.params == by_name["mm2"].cost.params == 12
    assert analysis.not_costed == []
    # non-param produced tensors: a, b, c, y (float32, 8 each) + target (int64, 3)
    assert analysis.activation_bytes == 4 * 4 * 8 + 3 * 8
