"""Bad input: each a typed EngineError naming what is wrong, raised before any heavy work."""

from __future__ import annotations

import builtins
import io

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import build, value, weight

from engine.errors import InvalidModelError, ModelLimitError, ShapeError, UnsupportedModelError
from engine.graph import AnalysisConfig, analyze_model, load_model, read_header


def relu(shape=(2, 3)):
    return build([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", shape)], [("y", shape)])


def test_cycle_is_invalid_for_upload_and_analysis(save):
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    model = build(nodes, [("x", [2])], [("y", [2])])
    for call in (lambda: read_header(save(model)), lambda: analyze_model(model)):
        with pytest.raises(InvalidModelError, match="cycle through nodes first -> second -> first"):
            call()


def test_unknown_domain_is_unsupported():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="f", domain="com.example.custom")
    model = build([node], [("x", [2])], [("y", [2])], domains=["com.example.custom"])
    with pytest.raises(UnsupportedModelError) as info:
        analyze_model(model)
    assert "operator domain 'com.example.custom' (version 1)" in info.value.message
    assert "neither onnx nor onnxruntime knows" in info.value.message
    assert "com.microsoft" in info.value.message and info.value.hint
    assert info.value.code == "unsupported_model"


@pytest.mark.parametrize(
    ("domain", "version", "newest"),
    [("ai.onnx.ml", 99, 5), ("com.microsoft", 2, 1), ("ai.onnx.preview.training", 7, 1)],
)
def test_domain_version_newer_than_known_is_unsupported(save, domain, version, newest):
    model = relu()
    model.opset_import.append(helper.make_opsetid(domain, version))
    with pytest.raises(UnsupportedModelError, match=f"opset {version} of domain '{domain}' is "
                       f"newer than this installation supports \\({newest}\\)"):  # fmt: skip
        read_header(save(model))


def test_onnxruntime_contrib_domains_are_known():
    from onnxruntime.capi import _pybind_state

    from engine.graph.loader import ONNXRUNTIME_DOMAINS

    newest: dict[str, int] = {}
    for schema in _pybind_state.get_all_operator_schema():
        newest[schema.domain] = max(newest.get(schema.domain, 0), schema.since_version)
    assert {d: newest[d] for d in ONNXRUNTIME_DOMAINS} == ONNXRUNTIME_DOMAINS


def test_declared_dims_whose_product_overflows_name_the_tensor():
    model = relu(shape=(2**40, 2**40))
    with pytest.raises(ModelLimitError) as info:
        analyze_model(model)
    assert info.value.message.startswith(
        "tensor 'x' has dimensions 1099511627776x1099511627776 whose product "
        "(1208925819614629174706176 elements) overflows a 64-bit integer"
    )


def test_declared_dims_over_the_element_limit_name_the_tensor():
    with pytest.raises(ModelLimitError, match=r"tensor 'x' has 1000000 elements \(1000x1000\), "
                       "more than the limit of 999999"):  # fmt: skip
        analyze_model(relu(shape=(1000, 1000)), AnalysisConfig(max_tensor_elements=999_999))


def test_symbolic_dims_count_as_at_least_one():
    with pytest.raises(ModelLimitError, match=r"'x' has at least 1000000 elements \(Nx1000x1000\)"):
        analyze_model(relu(shape=("N", 1000, 1000)), AnalysisConfig(max_tensor_elements=10**5))


def test_inferred_dims_that_overflow_name_the_tensor():
    reps = numpy_helper.from_array(np.array([2**62, 4], np.int64), "reps")
    model = build(
        [helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")],
        [("x", [4, 4])],
        [("y", [None, None])],
        [reps],
    )
    with pytest.raises(ModelLimitError, match="tensor 'y' \\(output of Tile 'tile'\\) would have a "
                       "dimension that overflows a 64-bit integer: .*Integer overflow"):  # fmt: skip
        analyze_model(model)


def test_inferred_tensor_over_the_limit_is_named():
    shape = numpy_helper.from_array(np.array([1000, 1000], np.int64), "shape")
    model = build(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [("x", [1, 1])],
        [("y", [None, None])],
        [shape],
    )
    with pytest.raises(ModelLimitError, match="tensor 'y' has 1000000 elements"):
        analyze_model(model, AnalysisConfig(max_tensor_elements=10**5))


def test_negative_declared_dim_is_invalid():
    model = relu()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -3
    with pytest.raises(InvalidModelError, match="tensor 'x' is declared with a negative dimension"):
        analyze_model(model)


def test_given_dims_too_big_for_int64_are_a_shape_error():
    with pytest.raises(ShapeError, match="does not fit a 64-bit integer"):
        analyze_model(relu(shape=("N", 3)), AnalysisConfig(input_shapes={"x": (2**64, 3)}))


def test_node_count_over_the_limit(conv_model):
    with pytest.raises(
        ModelLimitError, match="the model has 2 nodes, more than the limit of 1"
    ) as e:
        analyze_model(conv_model, AnalysisConfig(max_nodes=1))
    assert e.value.hint


def _external(name, shape, location):
    tensor = weight(name, shape)
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=str(location))
    return tensor


@pytest.fixture
def opened(monkeypatch):
    """Every path the process opens while the test runs."""
    paths = []
    real_open = io.open

    def spy(file, *args, **kwargs):
        paths.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", spy)
    monkeypatch.setattr(builtins, "open", spy)
    return paths


@pytest.mark.parametrize("kind", ["traversal", "absolute"])
def test_external_data_is_refused_and_never_opened(tmp_path, save, opened, kind):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones(4, np.float32).tobytes())
    location = "../" * 8 + str(secret).lstrip("/") if kind == "traversal" else secret
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = build([node], [("x", [2, 2])], [("y", [2, 2])], [_external("w", (2, 2), location)])
    path = save(model)
    opened.clear()  # writing the files above is not what is checked
    for call in (
        lambda: read_header(path),
        lambda: analyze_model(path),
        lambda: analyze_model(model, AnalysisConfig(simplify=True)),
    ):
        with pytest.raises(
            InvalidModelError, match="tensor 'w' stores its data in an external file"
        ):
            call()
    assert str(path) in opened  # the spy sees the upload being read...
    assert not [p for p in opened if "secret" in p]  # ...and never the referenced file


def test_external_data_inside_a_subgraph_is_refused():
    def branch(name):
        w = _external(f"{name}_w", (2,), "/etc/passwd")
        node = helper.make_node("Identity", [f"{name}_w"], [f"{name}_out"])
        return helper.make_graph([node], name, [], [value(f"{name}_out", [2])], [w])

    node = helper.make_node(
        "If", ["cond"], ["y"], name="if", then_branch=branch("then"), else_branch=branch("else")
    )
    model = build([node], [value("cond", [], TensorProto.BOOL)], [("y", [2])])
    with pytest.raises(
        InvalidModelError, match="'(then|else)_w' stores its data in an external file"
    ):
        load_model(model)


def test_unknown_shapes_name_the_tensor_and_the_reason():
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
        helper.make_node("Shape", ["nz"], ["s"], name="shape"),
        helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    model = build(nodes, [("x", [2, 3])], [value("y", None)])
    warnings = analyze_model(model).warnings
    assert (
        "shape of 'nz' (output of NonZero 'nonzero') is unknown: its size depends on the "
        "values of the input, known only at run time"
    ) in warnings
    assert (
        "shape of 'r' (output of Reshape 'reshape') is unknown: it depends on the values of "
        "'s', which are computed at run time (simplifying the model folds such shape arithmetic)"
    ) in warnings
    assert not [w for w in warnings if "'y'" in w]  # follows from 'r', not repeated


def test_symbolic_input_and_contrib_op_are_explained():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Mystery", ["c"], ["m"], name="mystery", domain="com.microsoft"),
        helper.make_node("Neg", ["m"], ["y"], name="neg"),
    ]
    model = build(
        nodes,
        [("x", ["N", 3]), ("c", [4])],
        [("a", ["N", 3]), ("y", [4])],
        domains=["com.microsoft"],
    )
    warnings = analyze_model(model).warnings
    assert (
        "input 'x' has shape Nx3: set its dimensions (input shapes, e.g. --shape x=...) to "
        "cost the nodes that depend on it"
    ) in warnings
    assert (
        "shape of 'm' (output of Mystery 'mystery') is unknown: onnx has no shape inference "
        "for operators of domain 'com.microsoft'"
    ) in warnings
