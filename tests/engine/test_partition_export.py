"""The graph -> problem builder, sub-model export, and partitioned execution against the
whole model (onnxruntime)."""

from __future__ import annotations

import json
import random

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx_builders import LIGHT_MODELS, build

from engine.graph import analyze_model
from engine.partition import PartitionOptions, partition_model, problem_from_graph
from engine.partition.execute import check_partitioned
from engine.partition.export import MANIFEST, split_model
from engine.partition.synthetic import DEFAULT_UNITS


def _random_weight(name, shape, rng):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)


def inception_block() -> onnx.ModelProto:
    """x[1,8,16,16] -> four branches (1x1; 1x1-3x3; 1x1-5x5; maxpool-1x1) -> concat -> relu,
    with random weights so that every output value depends on the split being right."""
    rng = np.random.default_rng(0)
    nodes, weights = [], []

    def conv(name, src, cin, cout, k):
        weights.append(_random_weight(f"{name}_w", (cout, cin, k, k), rng))
        weights.append(_random_weight(f"{name}_b", (cout,), rng))
        pad = k // 2
        nodes.append(
            helper.make_node(
                "Conv", [src, f"{name}_w", f"{name}_b"], [f"{name}_c"], name=name, pads=[pad] * 4
            )
        )
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [name + "_r"], name=f"{name}_relu"))
        return name + "_r"

    b1 = conv("b1", "x", 8, 4, 1)
    b3 = conv("b3", conv("b3r", "x", 8, 4, 1), 4, 6, 3)
    b5 = conv("b5", conv("b5r", "x", 8, 2, 1), 2, 3, 5)
    nodes.append(
        helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1] * 4)
    )
    bp = conv("bp", "p", 8, 3, 1)
    nodes.append(helper.make_node("Concat", [b1, b3, b5, bp], ["cat"], name="concat", axis=1))
    nodes.append(helper.make_node("Relu", ["cat"], ["y"], name="out"))
    return build(nodes, [("x", [1, 8, 16, 16])], [("y", [1, 16, 16, 16])], weights)


def test_problem_from_graph_keeps_ops_and_tensors():
    graph = analyze_model(inception_block()).graph
    problem = problem_from_graph(graph, ["cpu", "gpu"], lambda node, unit: 10.0)
    assert problem.n == len(graph.nodes) == 15
    x = next(t for t in problem.tensors if t.name == "x")
    assert x.src is None and x.bytes == 8 * 16 * 16 * 4 and len(x.dsts) == 4
    y = next(t for t in problem.tensors if t.name == "y")
    assert y.is_output and y.bytes == 16 * 16 * 16 * 4
    assert not any(t.name.endswith("_w") for t in problem.tensors)  # weights stay resident


def test_constant_subgraphs_are_weights_not_ops():
    graph = analyze_model(str(LIGHT_MODELS[0])).graph  # alexnet: ConstantOfShape fills
    problem = problem_from_graph(graph, ["cpu"], lambda node, unit: 1.0)
    assert "ConstantOfShape" not in {op.op_type for op in problem.ops}
    assert problem.n == 24 and len(graph.nodes) == 40


def test_a_plan_exports_and_runs_like_the_whole_model(tmp_path):
    model = inception_block()
    graph = analyze_model(model).graph
    units = DEFAULT_UNITS[:2]
    speed = {"Conv": "Conv", "Relu": "Relu", "MaxPool": "MaxPool", "Concat": "Concat"}

    def latency(node, unit):
        spec = next(u for u in units if u.name == unit)
        return 50.0 / spec.speed[speed[node.op_type]] + spec.launch_us

    problem = problem_from_graph(graph, [u.name for u in units], latency)
    result = partition_model(problem, "hope-ilp", PartitionOptions(time_limit_s=20.0))
    placement = result.to_dict()["placement"]
    assert len(set(placement.values())) == 2  # the plan really uses both units
    subs = split_model(model, placement)
    check = check_partitioned(model, subs)
    assert check.match and check.boundaries
    assert check.outputs[0].max_abs < 1e-4

    manifest = json.loads(subs.save(tmp_path).read_text())
    assert (tmp_path / MANIFEST).exists()
    files = [s["file"] for s in manifest["submodels"]]
    assert all((tmp_path / f).exists() for f in files)
    placed = [n for s in manifest["submodels"] for n in s["nodes"]]
    assert sorted(placed) == sorted(placement)
    for s in manifest["submodels"]:
        onnx.checker.check_model(onnx.load(str(tmp_path / s["file"])))


def test_a_broken_split_is_caught():
    model = inception_block()
    graph = analyze_model(model).graph
    placement = {n.name: ("cpu" if i % 2 else "gpu") for i, n in enumerate(graph.nodes)}
    subs = split_model(model, placement)
    victim = next(s for s in subs.submodels if any(n.op_type == "Relu" for n in s.model.graph.node))
    next(n for n in victim.model.graph.node if n.op_type == "Relu").op_type = "Sigmoid"
    assert not check_partitioned(model, subs).match


def test_every_node_needs_a_unit():
    with pytest.raises(Exception, match="no unit"):
        split_model(inception_block(), {"b1": "cpu"})


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_partitioned_light_models_match_the_whole_model(path):
    model = onnx.load(str(path))
    graph = analyze_model(model).graph
    problem = problem_from_graph(graph, ["cpu", "gpu"], lambda node, unit: 1.0)
    rng = random.Random(0)
    placement, unit, left = {}, "cpu", 0
    for op in problem.ops:  # runs of 1-8 ops in topological order, on alternating units
        if left == 0:
            unit, left = ("gpu" if unit == "cpu" else "cpu"), rng.randint(1, 8)
        placement[op.name], left = unit, left - 1
    subs = split_model(model, placement)
    assert len(subs.submodels) > 1
    check = check_partitioned(model, subs)
    assert check.match, [c for c in (*check.outputs, *check.boundaries) if not c.match][:3]
