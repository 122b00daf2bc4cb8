"""The fp16 conversion: float32 interface, fp16 inside, the kept nodes listed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import LIGHT_DIR, build

from engine.accuracy.fp16 import convert_to_fp16

FLOAT16 = TensorProto.FLOAT16


def random_weight(name, shape, seed=0, scale=0.3):
    values = np.random.default_rng(seed).normal(0, scale, shape).astype(np.float32)
    return numpy_helper.from_array(values, name)


def run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def elem_types(model):
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name: v.type.tensor_type.elem_type for v in [*g.input, *g.output, *g.value_info]}


def test_cnn_runs_in_fp16_with_float32_interface():
    model = build(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
            helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "fc", "fb"], ["logits"], name="fc", transB=1),
            helper.make_node("Softmax", ["logits"], ["y"], name="softmax"),
        ],
        [("x", [1, 3, 8, 8])],
        [("y", [1, 10])],
        [
            random_weight("w", (8, 3, 3, 3)),
            random_weight("b", (8,), 1),
            random_weight("fc", (10, 8), 2),
            random_weight("fb", (10,), 3),
        ],
    )
    conversion = convert_to_fp16(model)
    converted = conversion.model
    onnx.checker.check_model(converted)
    assert [i.type.tensor_type.elem_type for i in converted.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in converted.graph.output] == [TensorProto.FLOAT]
    weights = {t.name: t.data_type for t in converted.graph.initializer}
    assert weights == dict.fromkeys(["w", "b", "fc", "fb"], FLOAT16)
    assert conversion.initializers_converted == 4
    types = elem_types(converted)
    assert types["c"] == types["r"] == types["logits"] == FLOAT16
    assert types["logits__fp32"] == types["y"] == TensorProto.FLOAT
    assert [k.to_dict() for k in conversion.kept] == [
        {
            "node": "softmax",
            "op_type": "Softmax",
            "reason": "precision-sensitive (exponent or long reduction)",
        }
    ]
    # Casts: x to fp16 at the entry, logits to fp32 before the kept Softmax
    casts = [n for n in converted.graph.node if n.op_type == "Cast"]
    assert [(c.input[0], c.output[0]) for c in casts] == [
        ("x", "x__fp16"),
        ("logits", "logits__fp32"),
    ]
    x = np.random.default_rng(5).normal(size=(1, 3, 8, 8)).astype(np.float32)
    (want,), (got,) = run(model, {"x": x}), run(converted, {"x": x})
    assert got.dtype == np.float32
    error = np.abs(got - want).max()
    assert 0 < error < 1e-2  # a real fp16 computation: not bit-identical, but close


def test_graph_output_read_by_a_later_node_keeps_its_name_in_float32():
    model = build(
        [
            helper.make_node("Mul", ["x", "k"], ["a"], name="mul"),
            helper.make_node("Relu", ["a"], ["y"], name="relu"),
        ],
        [("x", [4])],
        [("a", [4]), ("y", [4])],
        [numpy_helper.from_array(np.full(4, 2.0, np.float32), "k")],
    )
    converted = convert_to_fp16(model).model
    producers = {o: n for n in converted.graph.node for o in n.output}
    assert producers["a"].op_type == "Cast"  # a__fp16 -> a
    assert producers["a__fp16"].op_type == "Mul"
    assert producers["y"].op_type == "Cast"
    assert producers["y__fp16"].input[0] == "a__fp16"  # Relu reads the fp16 version
    a, y = run(converted, {"x": np.array([-1, 0, 1, 2], np.float32)})
    np.testing.assert_array_equal(a, [-2, 0, 2, 4])
    np.testing.assert_array_equal(y, [0, 0, 2, 4])


def test_schema_fixed_float_inputs_and_shared_weights_stay_float32():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    shared = numpy_helper.from_array(np.full((1, 1, 1, 1), 0.5, np.float32), "s")
    model = build(
        [
            helper.make_node("Mul", ["x", "s"], ["m"], name="mul"),
            helper.make_node("Resize", ["m", "", "scales"], ["r"], name="resize"),
            helper.make_node("Pow", ["r", "s"], ["y"], name="pow"),  # kept: reads s in fp32
        ],
        [("x", [1, 1, 2, 2])],
        [("y", [1, 1, 4, 4])],
        [scales, shared],
    )
    conversion = convert_to_fp16(model)
    weights = {t.name: t.data_type for t in conversion.model.graph.initializer}
    assert weights == {"scales": TensorProto.FLOAT, "s": TensorProto.FLOAT}
    resize = next(n for n in conversion.model.graph.node if n.op_type == "Resize")
    assert resize.input[2] == "scales"  # tensor(float) in the schema: no cast
    assert [k.op_type for k in conversion.kept] == ["Pow"]
    (y,) = run(conversion.model, {"x": np.full((1, 1, 2, 2), 4.0, np.float32)})
    np.testing.assert_allclose(y, np.full((1, 1, 4, 4), np.sqrt(2.0)), rtol=1e-3)


def test_weights_beyond_the_fp16_range_are_clamped_and_counted():
    big = numpy_helper.from_array(np.array([1e6, -1e6, 1.0], np.float32), "big")
    model = build([helper.make_node("Mul", ["x", "big"], ["y"])], [("x", [3])], [("y", [3])], [big])
    conversion = convert_to_fp16(model)
    assert conversion.clamped_values == 2
    (y,) = run(conversion.model, {"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(y, [65504, -65504, 1])


def test_light_model_fills_become_fp16_constants():
    model = onnx.load(LIGHT_DIR / "light_squeezenet.onnx")
    conversion = convert_to_fp16(model)
    fills = [n for n in conversion.model.graph.node if n.op_type == "ConstantOfShape"]
    assert fills and all(n.attribute[0].t.data_type == FLOAT16 for n in fills)
    assert {k.op_type for k in conversion.kept} == {"Softmax"}
    assert conversion.converted_nodes > 60
    outputs = run(conversion.model, {"data_0": np.zeros((1, 3, 224, 224), np.float32)})
    assert outputs[0].dtype == np.float32 and outputs[0].shape == (1, 1000, 1, 1)


def test_keep_nodes_by_name():
    model = build(
        [helper.make_node("Relu", ["x"], ["r"], name="r1"), helper.make_node("Neg", ["r"], ["y"])],
        [("x", [2])],
        [("y", [2])],
    )
    conversion = convert_to_fp16(model, keep_nodes={"r1"})
    assert [(k.node, k.reason) for k in conversion.kept] == [("r1", "kept by request")]
    assert conversion.converted_nodes == 1
