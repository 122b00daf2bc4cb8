"""The graph view's groups from module scopes: the paths torch's TorchScript exporter writes
into node names, the module list its dynamo exporter writes into node metadata (kept
through preparation as the analysis's ``scope``), the fallback to detected structure when
names carry none; checked on analyses written inline, on a model built with metadata, and
on real BERT, GPT-2 and ViT exports of both exporters."""

from __future__ import annotations

import time

import onnx
import pytest
from onnx import TensorProto, helper

from engine.graph.analyze import analyze_prepared
from engine.graph.ir import SCOPE_KEY, module_scope
from engine.graph.prepare import prepare_model
from frontend.figures.graph.levels import ROOT, default_open, level, level_items
from frontend.figures.graph.payload import graph_tree_of
from frontend.figures.graph.scopes import node_scope
from tests.frontend.test_graph_figure import analysis, members, node, residual_net, shown


def scoped_net(layers: int, heads: int = 1) -> dict:
    """A transformer-like list of nodes named as the TorchScript exporter names them."""
    nodes = [node("/embeddings/Gather", "Gather", ["x"])]
    x = "/embeddings/Gather"
    for i in range(layers):
        base = f"/encoder/layer.{i}"
        nodes.append(node(f"{base}/attention/self/query/MatMul", "MatMul", [x], flops=100))
        nodes.append(node(f"{base}/attention/self/query/Add", "Add", [nodes[-1]["name"]]))
        nodes.append(node(f"{base}/attention/self/Softmax", "Softmax", [nodes[-1]["name"]]))
        nodes.append(node(f"{base}/attention/output/dense/MatMul", "MatMul", [nodes[-1]["name"]]))
        nodes.append(node(f"{base}/attention/output/Add", "Add", [nodes[-1]["name"], x]))
        nodes.append(node(f"{base}/output/Relu", "Relu", [nodes[-1]["name"]]))
        x = nodes[-1]["name"]
    nodes.append(node("/pooler/Tanh", "Tanh", [x]))
    nodes.append(node("Identity_3", "Identity", ["/pooler/Tanh"]))  # no scope
    return analysis(nodes)


def group_named(tree: dict, label: str, parent: int | None = None) -> int:
    groups = tree["groups"]
    found = [
        g
        for g, lab in enumerate(groups["label"])
        if lab == label and (parent is None or groups["parent"][g] == parent)
    ]
    assert len(found) == 1, (label, found)
    return found[0]


def test_a_scope_is_the_path_in_a_name_or_the_analysis_scope():
    assert node_scope({"name": "/encoder/layer.0/attention/self/query/MatMul"}) == (
        "encoder", "layer.0", "attention", "self", "query",
    )  # fmt: skip
    assert node_scope({"name": "encoder/MatMul"}) == ("encoder",)
    assert node_scope({"name": "/MatMul"}) == ()
    assert node_scope({"name": "node_MatMul_12"}) == ()
    assert node_scope({"name": "node_linear", "scope": ["model", "vit"]}) == ("model", "vit")


def test_torch_name_scopes_metadata_becomes_each_modules_own_name():
    meta = onnx.StringStringEntryProto(
        key=SCOPE_KEY,
        value="['', 'model', 'model.encoder', 'model.encoder.layer.0', "
        "'model.encoder.layer.0.attention', 'linear']",
    )
    assert module_scope([meta]) == ("model", "encoder", "layer.0", "attention")
    assert module_scope([onnx.StringStringEntryProto(key=SCOPE_KEY, value="not a list")]) == ()
    assert module_scope([onnx.StringStringEntryProto(key="other", value="['', 'a', 'b']")]) == ()


@pytest.mark.parametrize(
    "value",
    [
        "[" * 5000 + "]" * 5000,
        "[" * 200,
        "['a', " + "'b', " * 10_000 + "'c']",
        "[1, 2]",
        "__import__('os')",
    ],
)
def test_hostile_scope_metadata_is_ignored_quickly(value):
    started = time.perf_counter()
    assert module_scope([onnx.StringStringEntryProto(key=SCOPE_KEY, value=value)]) == ()
    assert time.perf_counter() - started < 0.5


def test_groups_nest_by_scope_with_labels_and_every_node_drawn_once():
    tree = graph_tree_of(scoped_net(3))
    groups = tree["groups"]
    assert set(groups["kind"]) == {"scope"}
    encoder = group_named(tree, "encoder", ROOT)
    layer = group_named(tree, "layer.1", encoder)
    attention = group_named(tree, "attention", layer)
    inner = group_named(tree, "self", attention)
    # query holds two nodes: a group; pooler and embeddings one node each: none
    query = group_named(tree, "query", inner)
    assert groups["size"][query] == 2
    assert "pooler" not in groups["label"] and "embeddings" not in groups["label"]
    # output/dense holds one node: it sits in attention/output
    output = group_named(tree, "output", attention)
    dense = [
        v
        for v, name in enumerate(tree["nodes"]["name"])
        if "layer.1/attention/output/dense" in name
    ]
    assert tree["nodes"]["group"][dense[0]] == output
    # The top level: the embedding, the encoder, the pooler and the unscoped node.
    items, _ = level_items(tree, ROOT)
    assert len(items) == 4 and -(encoder + 1) in items
    n = len(tree["nodes"]["name"])
    every = set(range(len(groups["parent"])))
    for opened in (set(), {encoder}, every, {encoder, layer, attention}):
        drawn = shown(tree, opened)
        assert sorted(v for item in drawn for v in members(tree, item)) == list(range(n))
    # Every node pair is an edge of exactly one level.
    pairs = [(u, v) for g in [ROOT, *every] for raw in level(tree, g)["raw"] for u, v, *_ in raw]
    assert len(pairs) == len(set(pairs)) == sum(len(p) for p in tree["preds"])


def test_a_scope_holding_what_its_parent_or_its_only_sub_scope_holds_is_no_extra_group():
    model = scoped_net(2)
    del model["node_list"][-1]  # the unscoped node: everything is under a scope now
    for n in model["node_list"]:
        n["scope"] = ["model", *node_scope(n)]
    labels = graph_tree_of(model)["groups"]["label"]
    assert "model" not in labels  # the whole graph: its scopes are the top level
    assert "encoder" in labels
    # encoder holds layer.0 alone: one group named by both
    labels = graph_tree_of(scoped_net(1))["groups"]["label"]
    assert "encoder/layer.0" in labels
    assert "encoder" not in labels and "layer.0" not in labels


def test_weight_producers_join_their_consumers_scope():
    model = scoped_net(2)
    nodes = model["node_list"]
    w = node("Constant_7", "ConstantOfShape", ["w_shape"])
    matmul = next(n for n in nodes if n["name"] == "/encoder/layer.1/attention/self/query/MatMul")
    matmul["inputs"].append("Constant_7")
    nodes.insert(nodes.index(matmul), w)
    tree = graph_tree_of(model)
    names = tree["nodes"]["name"]
    group = tree["nodes"]["group"]
    assert group[names.index("Constant_7")] == group[names.index(matmul["name"])]


def test_names_without_scopes_fall_back_to_detected_structure():
    tree = graph_tree_of(residual_net(6))
    assert "scope" not in tree["groups"]["kind"]
    assert {"module", "chain"} <= set(tree["groups"]["kind"])
    # A few scoped names among many plain ones are no hierarchy either.
    model = residual_net(6)
    for n in model["node_list"][:3]:
        n["scope"] = ["a", "b"]
    assert "scope" not in graph_tree_of(model)["groups"]["kind"]


def test_a_big_scoped_model_opens_collapsed_and_builds_fast():
    model = scoped_net(4000)  # 24,002 nodes
    started = time.perf_counter()
    tree = graph_tree_of(model)
    built = time.perf_counter() - started
    opened = default_open(tree)
    encoder = group_named(tree, "encoder", ROOT)
    # the top level's three items tell nothing: the encoder opens, its layers do not
    assert opened == [encoder]
    assert len(shown(tree, set(opened))) == 4000 + 3  # and the nodes beside it
    started = time.perf_counter()
    layer = level(tree, encoder)
    laid = time.perf_counter() - started
    assert len(layer["items"]) == 4000
    assert built < 10 and laid < 10, (built, laid)  # generous: shared 2-core machines


def metadata_model() -> onnx.ModelProto:
    """A dynamo-style export: plain node names, the modules in each node's metadata."""
    nodes = []
    x = "x"
    for i in range(2):
        for op in ("Relu", "Neg"):
            out = f"{op.lower()}_{i}"
            made = helper.make_node(op, [x], [out], f"node_{op}_{i}")
            scopes = ["", "model", f"model.layers.{i}", f"model.layers.{i}.act", op.lower()]
            made.metadata_props.add(key=SCOPE_KEY, value=repr(scopes))
            nodes.append(made)
            x = out
    graph = helper.make_graph(
        nodes,
        "scoped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_metadata_scopes_survive_preparation_into_the_groups():
    prepared = prepare_model(metadata_model())
    found = analyze_prepared(prepared).to_dict()
    assert [n.get("scope") for n in found["node_list"]] == [
        ["model", "layers.0", "act"], ["model", "layers.0", "act"],
        ["model", "layers.1", "act"], ["model", "layers.1", "act"],
    ]  # fmt: skip
    tree = graph_tree_of(found)
    assert sorted(tree["groups"]["label"]) == ["layers.0/act", "layers.1/act"]


@pytest.mark.parametrize(
    ("name", "layer"),
    [
        ("bert_ts", "layer.1"),
        ("bert_dynamo", "layer.1"),
        ("gpt2_ts", "h.1"),
        ("gpt2_dynamo", "h.1"),
        ("vit_ts", "layers.1"),
        ("vit_dynamo", "layers.1"),
    ],
)
def test_real_exports_group_by_their_modules(real_model, name, layer):
    found = analyze_prepared(prepare_model(real_model(name))).to_dict()
    tree = graph_tree_of(found)
    groups = tree["groups"]
    assert set(groups["kind"]) == {"scope"}
    g = group_named(tree, layer)
    inside = {groups["label"][c] for c, p in enumerate(groups["parent"]) if p == g}
    assert {"attention", "attn"} & inside, inside
    # most nodes sit in a layer's scope, and every node is drawn once however it is opened
    n = len(tree["nodes"]["name"])
    every = set(range(len(groups["parent"])))
    for opened in (set(default_open(tree)), every, set()):
        drawn = shown(tree, opened)
        assert sorted(v for item in drawn for v in members(tree, item)) == list(range(n))
