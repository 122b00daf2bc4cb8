"""Exact MACs, FLOPs, params and bytes per operator family."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from onnx_builders import build, value, weight

from engine.graph import analyze_model
from engine.graph.costs import cost_node, why_not_costed


def single(model):
    analysis = analyze_model(model)
    assert analysis.not_costed == []
    return analysis.node_list


def conv(x_shape, w_shape, y_shape, **attrs):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    return build([node], [("x", x_shape)], [("y", y_shape)], [weight("w", w_shape)])


def test_conv_macs_flops_bias_params_and_bytes(conv_model):
    conv_node, relu = single(conv_model)
    macs = 16 * 32 * 32 * 3 * 3 * 3  # Cout*H*W*Cin*kH*kW
    assert conv_node.cost.macs == macs == 442_368
    assert conv_node.cost.flops == 2 * macs + 16 * 32 * 32  # + bias adds
    assert conv_node.cost.params == 16 * 27 + 16
    assert conv_node.cost.bytes_read == 4 * (3 * 32 * 32 + 16 * 27 + 16)
    assert conv_node.cost.bytes_written == 4 * 16 * 32 * 32
    assert relu.cost.macs == 0 and relu.cost.flops == 16 * 32 * 32


@pytest.mark.parametrize(
    ("x", "w", "y", "attrs", "macs"),
    [
        # grouped: Cin 8 in 4 groups -> each output sees 2 input channels
        ((1, 8, 8, 8), (16, 2, 3, 3), (1, 16, 8, 8), {"group": 4, "pads": [1] * 4}, 16 * 64 * 18),
        # depthwise, stride 2
        (
            (1, 8, 16, 16),
            (8, 1, 3, 3),
            (1, 8, 8, 8),
            {"group": 8, "strides": [2, 2], "pads": [1] * 4},
            8 * 64 * 9,
        ),
        # dilated 3x3 with dilation 2 on 10x10 -> 6x6
        ((1, 1, 10, 10), (1, 1, 3, 3), (1, 1, 6, 6), {"dilations": [2, 2]}, 36 * 9),
        # 3-D, batch 2
        ((2, 2, 4, 4, 4), (4, 2, 3, 3, 3), (2, 4, 2, 2, 2), {}, 2 * 4 * 8 * 2 * 27),
    ],
)
def test_conv_variants(x, w, y, attrs, macs):
    (node,) = single(conv(x, w, y, **attrs))
    assert node.output_shapes == [list(y)]
    assert node.cost.macs == macs
    assert node.cost.flops == 2 * macs


def test_conv_transpose_scatters_every_input_element():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2])
    model = build(
        [node], [("x", [1, 4, 5, 5])], [("y", [1, 2, 11, 11])], [weight("w", (4, 2, 3, 3))]
    )
    (up,) = single(model)
    assert up.cost.macs == 4 * 25 * 2 * 9


@pytest.mark.parametrize(
    ("a", "b", "y", "macs"),
    [
        ([2, 3, 4, 5], [5, 6], [2, 3, 4, 6], 2 * 3 * 4 * 6 * 5),
        ([2, 1, 4, 5], [3, 5, 6], [2, 3, 4, 6], 2 * 3 * 4 * 6 * 5),  # broadcast batch
        ([5], [5, 6], [6], 30),  # vector-matrix
        ([4, 5], [5], [4], 20),  # matrix-vector
    ],
)
def test_matmul_batched_and_broadcast(a, b, y, macs):
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    (mm,) = single(build([node], [("a", a), ("b", b)], [("y", y)]))
    assert mm.cost.macs == macs
    assert mm.cost.flops == 2 * macs
    assert mm.cost.params == 0  # both operands are activations


def test_gemm_transposed_with_bias():
    node = helper.make_node("Gemm", ["a", "w", "c"], ["y"], name="fc", transB=1)
    model = build(
        [node], [("a", [4, 5])], [("y", [4, 6])], [weight("w", (6, 5)), weight("c", (6,))]
    )
    (fc,) = single(model)
    assert fc.cost.macs == 4 * 6 * 5
    assert fc.cost.flops == 2 * 120 + 4 * 6
    assert fc.cost.params == 36


def test_pooling_reductions_and_norms():
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["x"], ["g"], name="gap"),
        helper.make_node("ReduceMean", ["x"], ["r"], name="mean", keepdims=1),
        helper.make_node("Softmax", ["x"], ["s"], name="softmax"),
        helper.make_node("Sum", ["x", "x", "x"], ["t"], name="sum3"),
    ]
    outputs = [
        ("p", [1, 2, 2, 2]),
        ("g", [1, 2, 1, 1]),
        ("r", [1, 1, 1, 1]),
        ("s", [1, 2, 4, 4]),
        ("t", [1, 2, 4, 4]),
    ]
    pool, gap, mean, softmax, sum3 = single(build(nodes, [("x", [1, 2, 4, 4])], outputs))
    assert pool.cost.flops == 8 * 4
    assert gap.cost.flops == mean.cost.flops == 32
    assert softmax.cost.flops == 5 * 32
    assert sum3.cost.flops == 2 * 32
    assert sum3.cost.bytes_read == 4 * 32  # the same tensor read once


def test_data_movement_costs_bytes_not_flops():
    node = helper.make_node("Transpose", ["x"], ["y"], name="t", perm=[1, 0])
    (t,) = single(build([node], [("x", [2, 3])], [("y", [3, 2])]))
    assert (t.cost.macs, t.cost.flops, t.cost.bytes_read, t.cost.bytes_written) == (0, 0, 24, 24)
    assert t.cost.intensity == 0.0


def test_custom_op_and_unknown_shapes_are_not_costed_never_guessed():
    nodes = [
        helper.make_node("Mystery", ["x"], ["m"], name="mystery", domain="com.microsoft"),
        helper.make_node("Relu", ["m"], ["y"], name="after"),
    ]
    model = build(nodes, [("x", [1, 4])], [("y", [1, 4])], domains=["com.microsoft"])
    analysis = analyze_model(model)
    assert analysis.not_costed == ["mystery", "after"]  # after's input shape is unknown
    assert analysis.flops == 0
    assert [n["costed"] for n in analysis.to_dict()["node_list"]] == [False, False]
    assert "2 nodes not costed (op types: Mystery, Relu)" in analysis.warnings


def _graph_and_nodes(model):
    analysis = analyze_model(model)
    return analysis, analysis.graph, {n.name: n for n in analysis.graph.nodes}


def test_a_tensor_of_unknown_size_leaves_its_node_uncosted_and_named():
    # Strings have a known shape but no size in bytes: counting them as 0 bytes would
    # make the node's figures look known.
    nodes = [
        helper.make_node("Identity", ["text"], ["copy"], name="copy"),
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
    ]
    model = build(
        nodes,
        [value("text", [2], TensorProto.STRING), ("x", [2])],
        [value("copy", [2], TensorProto.STRING), ("y", [2])],
    )
    analysis, graph, by_name = _graph_and_nodes(model)
    assert analysis.not_costed == ["copy"]
    assert cost_node(by_name["copy"], graph) is None
    assert why_not_costed(by_name["copy"], graph) == (
        "the size of input 'text' is unknown (element type string)"
    )
    assert why_not_costed(by_name["relu"], graph) is None
    assert cost_node(by_name["relu"], graph).bytes_read == 8


def test_why_not_costed_names_the_tensor_of_unknown_shape_and_the_missing_cost():
    nodes = [
        helper.make_node("Mystery", ["x"], ["m"], name="mystery", domain="com.microsoft"),
        helper.make_node("Relu", ["m"], ["y"], name="after"),
        # without num_heads the contrib Attention's work is unknown
        helper.make_node("Attention", ["a", "w"], ["z"], name="attn", domain="com.microsoft"),
    ]
    model = build(
        nodes,
        [("x", [1, 4]), ("a", [1, 8, 16])],
        [("y", [1, 4]), ("z", [1, 8, 16])],
        [weight("w", (16, 48))],
        domains=["com.microsoft"],
    )
    analysis, graph, by_name = _graph_and_nodes(model)
    assert analysis.not_costed == ["mystery", "after", "attn"]
    assert why_not_costed(by_name["mystery"], graph) == (
        "no cost function for Mystery of domain 'com.microsoft'"
    )
    assert why_not_costed(by_name["after"], graph) == (
        "the shape of input 'm' is unknown (rank unknown)"
    )
    assert why_not_costed(by_name["attn"], graph) == (
        "the Attention cost function does not apply to these shapes or attributes"
    )


def test_an_unknown_output_that_is_read_leaves_its_node_uncosted():
    nodes = [
        helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    model = build(nodes, [("x", [2, 3]), value("target", [2], TensorProto.INT64)], [("y", None)])
    analysis, graph, by_name = _graph_and_nodes(model)
    assert analysis.not_costed == ["reshape", "relu"]
    assert why_not_costed(by_name["reshape"], graph).startswith(
        "the shape of output 'r' is unknown ("
    )
