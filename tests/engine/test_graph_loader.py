"""read_header / load_model: what an upload is told about a bad or good file."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from onnx_builders import LIGHT_DIR, build, value, weight

from engine.errors import InvalidModelError, ModelLimitError, UnsupportedModelError
from engine.graph import load_model, read_header


def test_header_of_resnet50_lists_only_real_inputs():
    header = read_header(LIGHT_DIR / "light_resnet50.onnx")
    assert header.to_dict() == {
        "ir_version": 3,
        "opsets": {"ai.onnx": 9},
        "producer": "onnx-caffe2",
        "graph_name": "resnet50",
        "node_count": 415,
        # 269 weights are graph inputs too, produced by ConstantOfShape: not model inputs
        "inputs": [{"name": "gpu_0/data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}],
        "outputs": [{"name": "gpu_0/softmax_1", "shape": [1, 1000], "dtype": "float32"}],
    }


def test_header_shows_symbolic_and_unknown_dims(save):
    x = value("x", ["batch", None, 8], TensorProto.FLOAT16)
    model = build(
        [helper.make_node("Relu", ["x"], ["y"])],
        [x],
        [value("y", ["batch", None, 8], TensorProto.FLOAT16)],
    )
    model.producer_name, model.producer_version = "pytorch", "2.13"
    header = read_header(save(model))
    assert header.inputs[0].to_dict() == {
        "name": "x",
        "shape": ["batch", "?", 8],
        "dtype": "float16",
    }
    assert header.producer == "pytorch 2.13"
    assert header.opsets == {"ai.onnx": 17}


def test_empty_file(save):
    with pytest.raises(InvalidModelError, match="empty"):
        read_header(save(b""))


def test_garbage_is_not_an_onnx_model(save):
    with pytest.raises(InvalidModelError, match="not an ONNX model") as info:
        read_header(save(b"\xff\xfe this is certainly not protobuf \x00\x01" * 10))
    assert info.value.code == "invalid_model"


def test_text_file_is_not_an_onnx_model(save):
    with pytest.raises(InvalidModelError, match="not an ONNX model"):
        read_header(save(b"name,shape\nx,1x3\n"))


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.99])
def test_truncated_file(save, fraction):
    data = (LIGHT_DIR / "light_squeezenet.onnx").read_bytes()
    with pytest.raises(InvalidModelError):
        read_header(save(data[: int(len(data) * fraction)]))


def test_missing_file(tmp_path):
    with pytest.raises(InvalidModelError, match="not found"):
        read_header(tmp_path / "nope.onnx")


def test_size_limit_names_both_sizes(save, conv_model):
    path = save(conv_model)
    with pytest.raises(ModelLimitError, match=r"is 0\.00 MB, larger than the limit of 0\.00 MB"):
        read_header(path, max_bytes=100)
    with pytest.raises(ModelLimitError) as info:
        load_model(path.read_bytes(), max_bytes=1_000)
    assert info.value.code == "model_too_large"
    assert read_header(path, max_bytes=path.stat().st_size).node_count == 2


def _external(tensor: TensorProto) -> TensorProto:
    tensor.ClearField("float_data")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../../../etc/passwd")
    return tensor


def test_external_initializer_is_refused(save):
    w = _external(weight("w", (2, 2)))
    model = build(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 2])], [("y", [2, 2])], [w]
    )
    with pytest.raises(InvalidModelError, match="external data is not supported") as info:
        read_header(save(model))
    assert "'w'" in info.value.message and info.value.hint


def test_external_constant_attribute_is_refused():
    tensor = _external(weight("c", (2,)))
    model = build([helper.make_node("Constant", [], ["y"], value=tensor)], [], [("y", [2])])
    with pytest.raises(InvalidModelError, match="external"):
        load_model(model)


def test_load_model_accepts_bytes_and_proto(conv_model):
    assert load_model(conv_model) is conv_model
    assert load_model(conv_model.SerializeToString()).graph.node[0].name == "conv"


def test_opset_newer_than_installed_is_unsupported(save, conv_model):
    conv_model.opset_import[0].version = 99
    with pytest.raises(UnsupportedModelError, match="opset 99"):
        read_header(save(conv_model))


def test_unknown_standard_op_is_unsupported(save):
    model = build([helper.make_node("FooBar", ["x"], ["y"])], [("x", [1])], [("y", [1])])
    with pytest.raises(UnsupportedModelError, match="FooBar"):
        read_header(save(model))


def test_checker_failure_reports_its_first_line(save):
    model = build([helper.make_node("Relu", ["x"], ["y"])], [("x", [1])], [("y", [1])])
    model.graph.output[0].ClearField("type")
    with pytest.raises(InvalidModelError, match="checker rejected the model: Field 'type'"):
        read_header(save(model))
