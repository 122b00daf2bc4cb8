"""Models that must be refused at upload, with a clear message and nothing stored."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from onnx import TensorProto, helper
from rest_framework.test import APIClient

from workbench.models import OnnxModel

pytestmark = pytest.mark.django_db


def model(nodes, inputs, outputs, initializers=(), opset=17, domain_opsets=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), *domain_opsets],
    )
    m.ir_version = 10
    return m.SerializeToString()


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def cyclic() -> bytes:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    return model(nodes, [vi("x", [1])], [vi("b", [1])])


def undefined_input() -> bytes:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    return model(nodes, [vi("x", [1])], [vi("y", [1])])


def unknown_opset() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    return model(nodes, [vi("x", [1])], [vi("y", [1])], opset=999)


def huge_dims() -> bytes:
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    big = [1 << 20, 1 << 20, 1 << 20]
    return model(nodes, [vi("x", big)], [vi("y", big)])


def external_data(location: str) -> bytes:
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", location
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    return model(nodes, [vi("x", [4])], [vi("y", [4])], [weight])


def too_many_nodes() -> bytes:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"r{i}") for i in range(50)]
    return model(nodes, [vi("t0", [1])], [vi("t50", [1])])


EXTERNAL = (
    "tensor 'w' stores its data in an external file; external data is not supported in uploads"
)
# the whole message each refusal must carry: the reason, naming what is wrong
CASES = {
    "cycle": (cyclic, "the graph has a cycle through nodes first -> second -> first"),
    "undefined-input": (
        undefined_input,
        "node 'adder' (Add) reads tensor 'ghost', which no node produces and which is "
        "neither a graph input nor an initializer",
    ),
    "unknown-opset": (unknown_opset, "opset 999 of domain 'ai.onnx' is newer than"),
    "huge-dims": (
        huge_dims,
        "tensor 'x' has 1152921504606846976 elements (1048576x1048576x1048576), more than "
        "the limit of 1099511627776",
    ),
    "external-data-traversal": (lambda: external_data("../../etc/passwd"), EXTERNAL),
    "external-data-absolute": (lambda: external_data("/etc/passwd"), EXTERNAL),
    "node-limit": (too_many_nodes, "the model has 50 nodes, more than the limit of 20"),
}


@pytest.mark.parametrize("case", CASES)
def test_hostile_models_are_refused_and_not_stored(case, user, settings, _media_root):
    settings.MAX_MODEL_NODES = 20
    settings.MAX_TENSOR_ELEMENTS = 1 << 40
    build, fragment = CASES[case]
    api = APIClient()
    api.force_authenticate(user)
    response = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile(f"{case}.onnx", build())},
        format="multipart",
    )
    assert response.status_code == 400, response.json()
    message = response.json()["error"]["message"]
    assert message.startswith(fragment), message
    assert OnnxModel.objects.count() == 0
    assert not (_media_root / "models").exists() or not any((_media_root / "models").rglob("*"))


def test_a_valid_model_of_the_same_shape_is_accepted(user):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r")]
    api = APIClient()
    api.force_authenticate(user)
    response = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile("ok.onnx", model(nodes, [vi("x", [1])], [vi("y", [1])]))},
        format="multipart",
    )
    assert response.status_code == 201
