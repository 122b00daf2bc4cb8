"""The uploaded model's own graph for the side-by-side view: read from the file (no
figures), names made unique as preparation makes them, declared shapes, key attributes,
and the exporter's scopes (in names and in node metadata) grouping it as they group the
prepared graph."""

from __future__ import annotations

from onnx import TensorProto, helper

from engine.graph.ir import SCOPE_KEY
from frontend.figures.graph.payload import graph_tree_of
from frontend.figures.graph.upload import upload_analysis
from tests.frontend.test_graph_scopes import metadata_model


def test_the_upload_reads_as_its_file_has_it():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], "/enc/layer.0/Shape"),
        helper.make_node("Relu", ["x"], ["r"], "/enc/layer.0/Relu"),
        helper.make_node("Reshape", ["r", "s"], ["y"], "/enc/layer.0/Reshape"),
        helper.make_node("Transpose", ["y"], ["z"], "", perm=[1, 0]),
        helper.make_node("Relu", ["z"], ["out"], ""),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 2])],
        value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    found = upload_analysis(model)
    names = [n["name"] for n in found["node_list"]]
    assert names[:3] == ["/enc/layer.0/Shape", "/enc/layer.0/Relu", "/enc/layer.0/Reshape"]
    assert len(set(names)) == 5  # the unnamed ones get names
    relu = found["node_list"][1]
    assert relu["output_shapes"] == [[2, 3]]
    assert found["node_list"][-1]["output_shapes"] == [[None, 2]]
    assert found["node_list"][3]["attributes"] == {"perm": [1, 0]}
    assert found["inputs"] == [{"name": "x"}]
    tree = graph_tree_of(found)
    assert tree["groups"]["label"] == ["enc/layer.0"]
    flops = next(m for m in tree["metrics"] if m["key"] == "flops")
    assert set(flops["values"]) == {None}  # unknown here, never 0


def test_the_upload_keeps_the_dynamo_exporters_scopes():
    found = upload_analysis(metadata_model())
    assert [n["scope"] for n in found["node_list"]][:2] == [["model", "layers.0", "act"]] * 2
    assert all(SCOPE_KEY not in str(n) for n in found["node_list"])
    tree = graph_tree_of(found)
    assert sorted(tree["groups"]["label"]) == ["layers.0/act", "layers.1/act"]
