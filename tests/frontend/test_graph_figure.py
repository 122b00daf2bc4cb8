"""The graph view's payload: the layered layout, groups, the levels each group opens to,
and the per-node metrics, built from analysis dicts written inline."""

from __future__ import annotations

import json
import random

import pytest

from frontend.figures.graph import (
    VISIBLE_LIMIT,
    Metric,
    count_crossings,
    graph_payload,
    layout_graph,
    node_edges,
    satellites,
)
from frontend.figures.graph.levels import ROOT, default_open, level, level_items
from frontend.figures.graph.payload import graph_tree_of


def node(name: str, op: str, inputs: list[str], flops: int = 0, **extra) -> dict:
    return {
        "name": name,
        "op_type": op,
        "inputs": inputs,
        "outputs": [name],
        "output_shapes": [[1, 8, 4, 4]],
        "macs": flops // 2,
        "flops": flops,
        "params": extra.get("params", 0),
        "bytes_read": extra.get("bytes_read", 100),
        "bytes_written": extra.get("bytes_written", 100),
        "intensity": flops / 200,
        "costed": True,
    }


def analysis(nodes: list[dict], **extra) -> dict:
    return {"nodes": len(nodes), "inputs": [{"name": "x"}], "node_list": nodes, **extra}


def conv_bn_relu(prefix: str, x: str, out: list[dict], weights: bool = True) -> str:
    if weights:  # made by a node, as in the onnx package's light models
        out.append(node(f"{prefix}_w", "ConstantOfShape", [f"{prefix}_w_shape"]))
    out += [
        node(f"{prefix}_conv", "Conv", [x, f"{prefix}_w"], flops=1000, params=72),
        node(f"{prefix}_bn", "BatchNormalization", [f"{prefix}_conv"], flops=100),
        node(f"{prefix}_relu", "Relu", [f"{prefix}_bn"], flops=10),
    ]
    return f"{prefix}_relu"


def residual_net(blocks: int, weights: bool = True) -> dict:
    """Residual blocks of two Conv-BN-Relu chains and an Add, with one inception-style
    module of three branches and a Concat every third block."""
    nodes = [node("stem", "Relu", ["x"])]
    x = "stem"

    def chain(prefix: str, x: str) -> str:
        return conv_bn_relu(prefix, x, nodes, weights)

    for b in range(blocks):
        if b % 3 == 2:
            branches = [chain(f"b{b}_{k}", x) for k in range(2)]
            branches.append(chain(f"b{b}_2b", chain(f"b{b}_2a", x)))
            nodes.append(node(f"b{b}_cat", "Concat", branches))
            x = f"b{b}_cat"
        else:
            y = chain(f"b{b}_2", chain(f"b{b}_1", x))
            nodes.append(node(f"b{b}_add", "Add", [y, x], flops=10))
            x = f"b{b}_add"
    return analysis(nodes)


def random_dag(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    edges = {(rng.randrange(v), v) for v in range(1, n)}  # connected
    edges |= {tuple(sorted(rng.sample(range(n), 2))) for _ in range(n // 2)}
    return sorted(edges)


def index_of(payload: dict, name: str) -> int:
    return payload["nodes"]["name"].index(name)


def shown(tree: dict, opened: set[int]) -> list[int]:
    """What the view draws with the groups ``opened`` open: the items of the top level and
    of every open group's level reached from it (not the open groups themselves)."""
    items, todo = [], [ROOT]
    while todo:
        for item in level_items(tree, todo.pop())[0]:
            if item < 0 and -item - 1 in opened:
                todo.append(-item - 1)
            else:
                items.append(item)
    return items


# -- layout -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_edge_points_down_and_no_two_nodes_overlap(seed):
    n = 400
    edges = random_dag(n, seed)
    layout = layout_graph(n, edges)
    assert all(layout.layer[u] < layout.layer[v] for u, v in edges)
    by_layer: dict[int, list[float]] = {}
    for v in range(n):
        by_layer.setdefault(layout.layer[v], []).append(layout.x[v])
    for xs in by_layer.values():
        xs.sort()
        assert all(b - a >= 1 - 1e-9 for a, b in zip(xs, xs[1:], strict=False))
    # Bends sit on the layers between their edge's ends, never on a node.
    for (u, v), bend in zip(layout.edges, layout.bends, strict=True):
        assert len(bend) in (0, layout.layer[v] - layout.layer[u] - 1)
        for step, x in enumerate(bend, start=1):
            row = by_layer.get(layout.layer[u] + step, [])
            assert all(abs(x - other) >= 0.5 - 1e-9 for other in row)


def test_layout_is_deterministic():
    model = residual_net(12)
    first = json.dumps(graph_payload(model))
    assert json.dumps(graph_payload(json.loads(json.dumps(model)))) == first


def test_weights_sit_next_to_their_consumer_and_skip_edges_bend_around_the_chain():
    model = residual_net(2)
    nodes = model["node_list"]
    names = [n["name"] for n in nodes]
    edges = node_edges(nodes)
    layout = layout_graph(len(nodes), edges, light=satellites(nodes, edges, {"x"}).keys())
    layer, x = layout.layer, layout.x
    weight, conv = names.index("b0_1_w"), names.index("b0_1_conv")
    assert layer[weight] == layer[conv] - 1
    # The skip edge x -> b0_add has no producer inside the graph; the next block's one does.
    add0, add1 = names.index("b0_add"), names.index("b1_add")
    bend = layout.bends[layout.edges.index((add0, add1))]
    assert len(bend) == layer[add1] - layer[add0] - 1
    chain_x = {x[names.index(f"b1_{k}_{op}")] for k in (1, 2) for op in ("conv", "relu")}
    assert all(abs(b - c) >= 0.5 for b in bend for c in chain_x)


def test_barycenter_sweeps_remove_crossings_of_a_planar_model():
    model = residual_net(30, weights=False)
    edges = node_edges(model["node_list"])
    layout = layout_graph(len(model["node_list"]), edges)
    assert count_crossings(layout) == 0


def test_a_long_edge_that_would_cost_too_many_bends_is_drawn_straight():
    n = 200
    edges = [(v, v + 1) for v in range(n - 1)] + [(0, n - 1)]
    layout = layout_graph(n, edges)
    assert layout.bends[-1] == []
    assert all(len(b) == 0 for b in layout.bends)


# -- groups -------------------------------------------------------------------------------


def test_a_straight_chain_collapses_with_its_weights_into_one_group():
    tree = graph_tree_of(residual_net(3))
    groups = tree["groups"]
    branch = tree["nodes"]["group"][index_of(tree, "b2_0_conv")]
    assert groups["kind"][branch] == "chain"
    members = [v for v, g in enumerate(tree["nodes"]["group"]) if g == branch]
    assert [tree["nodes"]["name"][v] for v in members] == [
        "b2_0_w", "b2_0_conv", "b2_0_bn", "b2_0_relu",
    ]  # fmt: skip
    assert groups["first"][branch] == index_of(tree, "b2_0_w")
    assert groups["size"][branch] == 4
    assert groups["label"][branch] == "Conv → BatchNormalization → Relu"
    flops = next(m for m in tree["metrics"] if m["key"] == "flops")
    assert flops["group_values"][branch] == 1110
    # A residual block's two convolutions are one straight line; the Add has two inputs.
    line = tree["nodes"]["group"][index_of(tree, "b0_2_relu")]
    assert groups["size"][line] == 8
    assert groups["label"][line] == "Conv → … → Relu (6 ops)"
    assert tree["nodes"]["group"][index_of(tree, "b0_add")] != line


def test_modules_between_cuts_hold_their_chains_and_every_node_is_drawn_once():
    tree = graph_tree_of(residual_net(3))
    kinds, parent = tree["groups"]["kind"], tree["groups"]["parent"]
    blocks = [g for g, k in enumerate(kinds) if k == "module"]
    assert len(blocks) == 3  # two residual blocks and the inception-style module
    chains = [g for g, k in enumerate(kinds) if k == "chain"]
    assert chains and all(kinds[parent[g]] == "module" for g in chains)
    n = len(tree["nodes"]["name"])
    every = set(range(len(kinds)))
    for opened in (set(), set(blocks), every, every - set(chains), {blocks[0], chains[-1]}):
        items = shown(tree, opened)
        assert len(items) == len(set(items))
        behind = [v for item in items for v in members(tree, item)]
        assert sorted(behind) == list(range(n))  # each node once
    # A chain inside a closed module is not drawn, however it was left.
    inner = [g for g in chains if parent[g] == blocks[0]]
    assert not {-(g + 1) for g in inner} & set(shown(tree, set(inner)))
    assert {-(g + 1) for g in inner} <= set(shown(tree, {blocks[0]}))


def members(tree: dict, item: int) -> list[int]:
    if item >= 0:
        return [item]
    g, parent = -item - 1, tree["groups"]["parent"]

    def inside(v: int) -> bool:
        h = tree["nodes"]["group"][v]
        while h >= 0 and h != g:
            h = parent[h]
        return h == g

    return [v for v in range(len(tree["nodes"]["name"])) if inside(v)]


def test_a_level_lays_out_its_items_and_keeps_the_node_pairs_of_its_edges():
    tree = graph_tree_of(residual_net(3))
    top = level(tree, ROOT)
    assert len(top["items"]) == len(top["layer"]) == len(top["x"])
    # Every node pair is an edge of exactly one level: the innermost holding both ends.
    pairs = []
    for g in [ROOT, *range(len(tree["groups"]["parent"]))]:
        lv = level(tree, g)
        assert len(lv["raw"]) == len(lv["edges"]) // 2 == len(lv["bends"])
        assert lv["nodes"]["index"] == [i for i in lv["items"] if i >= 0]
        for raw in lv["raw"]:
            pairs += [(u, v) for u, v, *_ in raw]
        # A level's items are laid out apart on each layer.
        by_layer: dict[int, list[float]] = {}
        for layer, x in zip(lv["layer"], lv["x"], strict=True):
            by_layer.setdefault(layer, []).append(x)
        for xs in by_layer.values():
            xs.sort()
            assert all(b - a >= 0.5 - 1e-9 for a, b in zip(xs, xs[1:], strict=False))
    edges = node_edges(residual_net(3)["node_list"])
    assert sorted(pairs) == sorted(edges)
    conv, relu = index_of(tree, "b2_0_conv"), index_of(tree, "b2_0_relu")
    chain = level(tree, tree["nodes"]["group"][conv])
    tensors = {(u, v): carried for raw in chain["raw"] for u, v, carried, *_ in raw}
    assert tensors[(conv, conv + 1)] == ["b2_0_conv"]
    assert chain["values"]["flops"][chain["items"].index(relu)] == 10


def test_structure_from_the_analysis_is_used_when_present():
    model = residual_net(3)
    names = [n["name"] for n in model["node_list"]]
    half = len(names) // 2
    model["structure"] = {
        "stages": [{"index": 0, "nodes": names[:half]}, {"index": 1, "nodes": names[half:]}],
        "blocks": [],
        "chains": [{"anchor": "b0_1_conv", "nodes": ["b0_1_conv", "b0_1_bn"]}],
    }
    tree = graph_tree_of(model)
    kinds = tree["groups"]["kind"]
    assert kinds.count("stage") == 2
    chain = tree["nodes"]["group"][index_of(tree, "b0_1_bn")]
    assert kinds[chain] == "chain"
    assert tree["groups"]["size"][chain] == 3  # the weight producer joins its consumer
    assert kinds[tree["groups"]["parent"][chain]] == "module"  # computed: never given


def test_a_big_model_opens_collapsed_and_a_small_one_expanded():
    small = graph_tree_of(residual_net(3))
    assert default_open(small) == list(range(len(small["groups"]["parent"])))
    big = graph_tree_of(residual_net(180))
    assert len(big["nodes"]["name"]) > 2000
    opened = default_open(big)
    assert len(opened) < len(big["groups"]["parent"])
    assert len(shown(big, set(opened))) <= VISIBLE_LIMIT
    # The first view carries the levels it opens, and only those.
    view = graph_payload(residual_net(3))
    assert [lv["group"] for lv in view["levels"]][:1] == [ROOT]


# -- metrics ------------------------------------------------------------------------------


def test_metrics_are_per_node_columns_with_group_aggregates():
    model = residual_net(3)
    latency = {"b2_0_conv": 12.5, "b2_0_relu": 1.5}
    payload = graph_payload(model, {"latency_us": Metric("latency", values=latency, unit="µs")})
    keys = [m["key"] for m in payload["metrics"]]
    assert keys == ["op_type", "flops", "bytes", "params", "intensity", "latency_us"]
    tree = graph_tree_of(model)
    metrics = {m["key"]: m for m in tree["metrics"]}
    conv = index_of(tree, "b2_0_conv")
    op_type = metrics["op_type"]
    assert op_type["kind"] == "categorical"
    assert op_type["categories"][op_type["values"][conv]] == "Conv"
    chain = tree["nodes"]["group"][conv]
    assert op_type["categories"][op_type["group_values"][chain]] == "Conv"
    assert metrics["bytes"]["group_values"][chain] == 800
    assert metrics["intensity"]["group_values"][chain] == pytest.approx(1110 / 800, abs=1e-3)
    assert metrics["flops"]["range"]["log"] and metrics["op_type"]["range"] is None
    # A stage's overlay goes by node name; the browser sums it over groups.
    overlay = payload["metrics"][-1]
    assert dict(zip(overlay["names"], overlay["values"], strict=True)) == latency
    assert overlay["aggregate"] == "sum" and "group_values" not in overlay


def test_a_metric_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="3 values"):
        graph_payload(residual_net(2), {"bad": Metric("bad", values=[1, 2, 3])})


def test_an_empty_graph_gives_an_empty_payload():
    payload = graph_payload(analysis([]))
    assert payload["nodes"]["name"] == [] and payload["levels"][0]["items"] == []


def test_an_added_categorical_metric_can_open_the_view():
    from frontend.figures.graph import Metric, graph_payload

    analysis = {
        "node_list": [
            {"name": "a", "op_type": "Conv", "inputs": ["x"], "outputs": ["t"], "flops": 10},
            {"name": "b", "op_type": "Relu", "inputs": ["t"], "outputs": ["y"], "flops": 1},
        ],
        "inputs": [{"name": "x"}],
    }
    unit = Metric("unit", kind="categorical", values={"a": "gpu", "b": "cpu"}, aggregate="mode")
    payload = graph_payload(analysis, {"unit": unit}, initial="unit")
    assert payload["initial_metric"] == "unit"
    metric = next(m for m in payload["metrics"] if m["key"] == "unit")
    assert metric["kind"] == "categorical"
    assert graph_payload(analysis)["initial_metric"] == payload["metrics"][0]["key"]


def test_op_boxes_carry_key_attributes_in_a_fixed_order():
    from frontend.figures.graph.payload import key_attributes

    conv = {"pads": [1, 1, 1, 1], "strides": [2, 2], "kernel_shape": [3, 3], "dilations": [1, 1]}
    assert key_attributes(conv) == "kernel 3×3 · stride 2×2 · pad 1"
    assert key_attributes({"strides": [1, 1], "pads": [0, 0, 0, 0], "group": 32}) == "group 32"
    assert key_attributes({"value": "x" * 40, "axis": 1}) == "axis 1"
    assert key_attributes(None) == ""


def test_the_layout_is_built_once_per_analysis_with_a_store():
    from frontend.figures.graph import store

    class Memory(dict):
        put = dict.__setitem__

    model, kept = residual_net(3), Memory()
    store.use_store(kept)
    try:
        first = graph_payload(model)
        again = graph_payload(json.loads(json.dumps(model)))  # the same analysis, re-read
        with_latency = graph_payload(model, {"lat": Metric("latency", values={"stem": 2.0})})
        changed = graph_payload(residual_net(4))
    finally:
        store.use_store(None)
    assert len(kept) == 2  # two analyses, four views
    assert again == first and with_latency["levels"] == first["levels"]
    assert [m["key"] for m in with_latency["metrics"]][-1] == "lat"
    assert changed["nodes"]["name"] != first["nodes"]["name"]


def test_overlays_of_several_stages_meet_in_one_view():
    from frontend.figures.graph import combine_overlays

    model = residual_net(2)
    latency = graph_payload(model, {"lat": Metric("latency", values={"stem": 2.0})})
    unit = graph_payload(
        model, {"unit": Metric("unit", "categorical", {"stem": "gpu"}, aggregate="mode")}
    )
    combined = combine_overlays([latency, unit])
    keys = [m["key"] for m in combined["metrics"]]
    assert keys[-2:] == ["unit", "lat"] and len(keys) == len(set(keys))


# -- compiled kernels beside the graph ------------------------------------------------------


def test_kernels_become_a_graph_of_their_own_with_the_nodes_each_runs():
    from frontend.figures.graph.kernels import kernel_analysis, kernel_metrics

    model = residual_net(2)
    names = [n["name"] for n in model["node_list"]]
    # Each Conv-BN-Relu chain with its weight is one kernel; the Adds and the stem alone.
    kernels, groups = [], {}
    for name in names:
        head = name.rsplit("_", 1)[0] if name.count("_") >= 2 else name
        groups.setdefault(head, []).append(name)
    for k, members in enumerate(groups.values()):
        kernels.append({"id": k, "nodes": members, "time_us": 2.0 * (k + 1), "backend": "tvm"})
    kernels.append({"id": 99, "nodes": ["not-in-this-model"]})  # left out
    result = {"kernels": kernels}
    graph, nodes_of = kernel_analysis(model, result)
    kernel_names = [n["name"] for n in graph["node_list"]]
    assert kernel_names == [str(k) for k in range(len(groups))]  # in execution order
    assert sorted(v for members in nodes_of.values() for v in members) == sorted(names)
    # An edge where a tensor passes between kernels; a graph input or weight is none.
    by_name = {n["name"]: n for n in graph["node_list"]}
    chain = next(k for k, members in nodes_of.items() if "b0_2_conv" in members)
    first = next(k for k, members in nodes_of.items() if "b0_1_conv" in members)
    assert by_name[chain]["inputs"] == ["b0_1_relu"]
    assert "b0_1_w_shape" not in by_name[first]["inputs"]
    assert by_name[chain]["op_type"] == "ConstantOfShape + Conv + BatchNormalization + …"
    payload = graph_payload(graph, kernel_metrics(result), initial="kernel_us")
    assert payload["initial_metric"] == "kernel_us"
    label = next(m["label"] for m in payload["metrics"] if m["key"] == "kernel_us")
    assert label == "kernel time, measured (µs)"
    assert kernel_analysis(model, {})[0]["node_list"] == []
