"""Exact costs of the recurrent, attention, Einsum, Resize and quantized op families."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import build, value, weight

from engine.graph import analyze_model


def only(model):
    analysis = analyze_model(model)
    assert analysis.not_costed == [], analysis.warnings
    (node,) = analysis.node_list
    return node.cost


def recurrent(op, gates, *, directions=1, bias=True, layout=0, peephole=False, **attrs):
    """X [T=5, B=2, F=3], hidden 4."""
    steps, batch, features, hidden = 5, 2, 3, 4
    names = ["x", "w", "r", "b" if bias else ""]
    inits = [weight("w", (directions, gates * hidden, features))]
    inits.append(weight("r", (directions, gates * hidden, hidden)))
    if bias:
        inits.append(weight("b", (directions, 2 * gates * hidden)))
    if peephole:
        names += ["", "", "", "p"]
        inits.append(weight("p", (directions, 3 * hidden)))
    x = [batch, steps, features] if layout else [steps, batch, features]
    y = [batch, steps, directions, hidden] if layout else [steps, directions, batch, hidden]
    direction = "bidirectional" if directions == 2 else "forward"
    node = helper.make_node(
        op,
        names,
        ["y"],
        name="rnn",
        hidden_size=hidden,
        direction=direction,
        layout=layout,
        **attrs,
    )
    return build([node], [("x", x)], [("y", y)], inits)


@pytest.mark.parametrize(
    ("op", "gates", "kwargs", "per_hidden"),
    [
        ("LSTM", 4, {}, 9 + 8),
        ("LSTM", 4, {"bias": False}, 9),
        ("LSTM", 4, {"peephole": True}, 9 + 8 + 6),
        ("LSTM", 4, {"directions": 2}, 9 + 8),
        ("LSTM", 4, {"layout": 1}, 9 + 8),
        ("GRU", 3, {}, 8 + 6),
        ("RNN", 1, {}, 1 + 2),
    ],
)
def test_recurrent_ops(op, gates, kwargs, per_hidden):
    cost = only(recurrent(op, gates, **kwargs))
    runs = 5 * 2 * kwargs.get("directions", 1)  # steps * batch * directions
    macs = runs * gates * 4 * (3 + 4)  # gates*H * (input + H) per step
    assert cost.macs == macs
    assert cost.flops == 2 * macs + runs * per_hidden * 4
    params = (
        kwargs.get("directions", 1) * gates * 4 * (3 + 4 + (2 if kwargs.get("bias", True) else 0))
    )
    params += 3 * 4 * kwargs.get("directions", 1) if kwargs.get("peephole") else 0
    assert cost.params == params


@pytest.mark.parametrize(
    ("equation", "shapes", "out", "macs", "flops"),
    [
        ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]], [2, 3, 5], 2 * 3 * 4 * 5, None),
        ("...ij,jk", [[7, 3, 4], [4, 5]], [7, 3, 5], 7 * 3 * 4 * 5, None),  # implicit output
        ("bhqd,bhkd->bhqk", [[1, 2, 3, 8], [1, 2, 6, 8]], [1, 2, 3, 6], 2 * 3 * 6 * 8, None),
        ("i,i,i->", [[6], [6], [6]], [], 2 * 6, None),  # three operands: 2 MACs per point
        ("ij->ji", [[3, 4]], [4, 3], 0, 0),  # a transpose moves data only
        ("ij->i", [[3, 4]], [3], 0, 12),  # a row sum adds every element
        ("ii", [[4, 4]], [], 0, 16),  # trace, implicit scalar output
    ],
)
def test_einsum(equation, shapes, out, macs, flops):
    names = [f"in{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], name="einsum", equation=equation)
    cost = only(build([node], list(zip(names, shapes, strict=True)), [("y", out)]))
    assert cost.macs == macs
    assert cost.flops == (2 * macs if flops is None else flops)


def test_onnx_attention_op_4d_with_mask():
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="attn")
    inputs = [("q", [1, 2, 3, 8]), ("k", [1, 2, 5, 8]), ("v", [1, 2, 5, 4]), ("mask", [3, 5])]
    cost = only(build([node], inputs, [("y", [1, 2, 3, 4])], opset=23))
    scores = 1 * 2 * 3 * 5
    assert cost.macs == scores * (8 + 4)
    assert cost.flops == 2 * scores * 12 + scores * (1 + 5 + 1)  # scale, softmax, mask


def test_onnx_attention_op_3d_grouped_heads():
    node = helper.make_node(
        "Attention", ["q", "k", "v"], ["y"], name="attn", q_num_heads=4, kv_num_heads=2
    )
    inputs = [("q", [1, 3, 32]), ("k", [1, 5, 16]), ("v", [1, 5, 16])]
    cost = only(build([node], inputs, [("y", [1, 3, 32])], opset=23))
    scores = 1 * 4 * 3 * 5
    assert cost.macs == scores * (8 + 8)
    assert cost.flops == 2 * cost.macs + scores * 6


def test_onnxruntime_contrib_attention():
    node = helper.make_node(
        "Attention", ["x", "w", "b"], ["y"], name="attn", domain="com.microsoft", num_heads=2
    )
    model = build(
        [node],
        [("x", [1, 8, 16])],
        [("y", [1, 8, 16])],
        [weight("w", (16, 48)), weight("b", (48,))],
        domains=["com.microsoft"],
    )
    cost = only(model)
    projection = 8 * 16 * 48
    scores = 2 * 8 * 8
    assert cost.macs == projection + scores * (8 + 8)
    assert cost.flops == 2 * cost.macs + 8 * 48 + scores * 6
    assert cost.params == 16 * 48 + 48


@pytest.mark.parametrize(
    ("mode", "flops_per_output"), [("nearest", 0), ("linear", 2 * 4 - 1), ("cubic", 2 * 16 - 1)]
)
def test_resize_counts_taps_over_resized_axes(mode, flops_per_output):
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode=mode)
    cost = only(build([node], [("x", [1, 3, 4, 4])], [("y", [1, 3, 8, 8])], [scales]))
    assert cost.macs == 0
    assert cost.flops == 3 * 64 * flops_per_output


def int8(name, shape):
    return numpy_helper.from_array(np.ones(shape, np.int8), name)


def scalar(name, val, dtype):
    return numpy_helper.from_array(np.array(val, dtype), name)


def test_qlinear_conv_with_int32_bias():
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"]
    inits = [
        scalar("xs", 0.1, np.float32), scalar("xz", 0, np.int8), int8("w", (8, 4, 3, 3)),
        scalar("ws", 0.1, np.float32), scalar("wz", 0, np.int8), scalar("ys", 0.1, np.float32),
        scalar("yz", 0, np.int8), numpy_helper.from_array(np.ones(8, np.int32), "bias"),
    ]  # fmt: skip
    node = helper.make_node("QLinearConv", inputs, ["y"], name="qconv", pads=[1] * 4)
    model = build(
        [node],
        [value("x", [1, 4, 6, 6], TensorProto.INT8)],
        [value("y", [1, 8, 6, 6], TensorProto.INT8)],
        inits,
    )
    analysis = analyze_model(model)
    (qconv,) = analysis.node_list
    out = 8 * 36
    assert qconv.cost.macs == out * 4 * 9
    assert qconv.cost.flops == 2 * qconv.cost.macs + out + 2 * out
    # int8 weights, the int32 bias, three float scales and three int8 zero points
    assert analysis.params == 288 + 8 + 3 + 3 and qconv.cost.params == analysis.params
    assert qconv.cost.bytes_read == 144 + 288 + 8 * 4 + 3 * 4 + 3


def test_integer_conv_and_matmuls():
    nodes = [
        helper.make_node("ConvInteger", ["x", "w"], ["c"], name="conv_int"),
        helper.make_node("MatMulInteger", ["a", "b"], ["m"], name="mm_int"),
        helper.make_node(
            "QLinearMatMul", ["a", "s", "z", "b", "s", "z", "s", "z"], ["q"], name="qmm"
        ),
    ]
    model = build(
        nodes,
        [value("x", [1, 2, 5, 5], TensorProto.UINT8), value("a", [2, 3, 4], TensorProto.INT8)],
        [
            value("c", [1, 3, 3, 3], TensorProto.INT32),
            value("m", [2, 3, 6], TensorProto.INT32),
            value("q", [2, 3, 6], TensorProto.INT8),
        ],
        [
            numpy_helper.from_array(np.ones((3, 2, 3, 3), np.uint8), "w"),
            int8("b", (4, 6)),
            scalar("s", 0.5, np.float32),
            scalar("z", 0, np.int8),
        ],
    )
    analysis = analyze_model(model)
    assert analysis.not_costed == []
    conv_int, mm_int, qmm = (n.cost for n in analysis.node_list)
    assert (conv_int.macs, conv_int.flops) == (27 * 18, 2 * 27 * 18)
    assert (mm_int.macs, mm_int.flops) == (36 * 4, 2 * 36 * 4)
    assert (qmm.macs, qmm.flops) == (36 * 4, 2 * 36 * 4 + 2 * 36)


def test_quantize_dequantize_per_element():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant"),
    ]
    model = build(
        nodes,
        [("x", [2, 5])],
        [("y", [2, 5])],
        [scalar("s", 0.5, np.float32), scalar("z", 0, np.uint8)],
    )
    quant, dequant = analyze_model(model).node_list
    assert quant.cost.flops == dequant.cost.flops == 20


def test_an_op_without_cost_function_is_listed_not_guessed():
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"], name="nms")
    model = build(
        [node],
        [("boxes", [1, 10, 4]), ("scores", [1, 1, 10])],
        [value("sel", [None, 3], TensorProto.INT64)],
    )
    analysis = analyze_model(model)
    assert analysis.not_costed == ["nms"]
    assert "1 nodes not costed (op types: NonMaxSuppression)" in analysis.warnings
