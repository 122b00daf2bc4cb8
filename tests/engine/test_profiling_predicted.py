"""Predicted profiles: per op and unit, unsupported ops marked, constants folded, labelled."""

from __future__ import annotations

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.graph import analyze_model
from engine.graph.costs import cost_node
from engine.profiling.predicted import predict_profile
from engine.targets import MODEL_NAME, CostModel, validate_profile

PROFILE = validate_profile(
    {
        "name": "two-units",
        "kind": "modeled",
        "units": [
            {"name": "cpu", "kind": "cpu", "peak_gflops": {"fp32": 10}, "mem_bw_gbps": 5,
             "launch_us": 3},
            {"name": "gpu", "kind": "gpu", "peak_gflops": {"fp32": 100}, "mem_bw_gbps": 20,
             "launch_us": 20, "supports": ["Conv"]},
        ],
        "power": {"cpu": {"active_w": 2.0, "idle_w": 0.0}},
    }
)  # fmt: skip


@pytest.fixture
def graph(conv_model):
    return analyze_model(conv_model).graph


def test_every_op_on_every_unit(graph):
    predicted = predict_profile(graph, PROFILE)
    assert predicted.measured is False and predicted.model == MODEL_NAME
    assert [op.name for op in predicted.ops] == ["conv", "relu"]
    conv, relu = predicted.ops
    model = CostModel(PROFILE)
    for op, node in zip(predicted.ops, graph.nodes, strict=True):
        assert op.latency_us["cpu"] == model.op_latency_us(
            cost_node(node, graph), op.op_type, "cpu"
        )
    assert relu.status == {"cpu": "ok", "gpu": "unsupported"}
    assert relu.latency_us["gpu"] is None  # marked, not dropped


def test_unit_totals_completeness_and_energy(graph):
    predicted = predict_profile(graph, PROFILE)
    cpu, gpu = predicted.units
    assert cpu.complete and cpu.latency_ms == pytest.approx(
        sum(op.latency_us["cpu"] for op in predicted.ops) / 1e3
    )
    assert cpu.energy_j == pytest.approx(cpu.latency_ms * 1e-3 * 2.0)
    assert not gpu.complete and gpu.unsupported == ["relu"] and gpu.energy_j is None
    assert predicted.best_unit == "cpu"  # the only unit that runs everything
    assert predicted.to_dict()["units"][1]["unsupported"] == ["relu"]


def test_constant_subgraphs_cost_nothing():
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"], name="fill",
                         value=helper.make_tensor("v", 1, [1], [0.5])),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
    ]  # fmt: skip
    shape = helper.make_tensor("shape", 7, [2], [8, 4])
    model = build(nodes, [("x", [2, 8])], [("y", [2, 4])], [shape])
    predicted = predict_profile(analyze_model(model).graph, PROFILE)
    fill, matmul = predicted.ops
    assert fill.status == {"cpu": "constant", "gpu": "constant"} and fill.latency_us["cpu"] == 0
    assert matmul.status["cpu"] == "ok" and predicted.units[0].complete


def test_unknown_numbers_give_no_prediction_and_say_so(graph):
    profile = validate_profile(
        {"name": "dsa", "kind": "modeled", "units": [{"name": "dsa", "kind": "dsa",
                                                      "peak_gflops": {"fp32": None}}]}
    )  # fmt: skip
    predicted = predict_profile(graph, profile)
    (unit,) = predicted.units
    assert unit.latency_ms is None and unit.unknown == ["conv", "relu"]
    assert predicted.best_unit is None
    assert any("no prediction" in note for note in predicted.notes)


def test_weights_do_not_matter_only_shapes():
    model = build(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc")],
        [("x", [4, 64])],
        [("y", [4, 32])],
        [weight("w", (64, 32))],
    )
    (op,) = predict_profile(analyze_model(model).graph, PROFILE).ops
    # 4*32*64 MACs = 16384 FLOPs over 10 GFLOPS = 1.6384 us; bytes (4*64+64*32+4*32)*4 = 9728
    # over 5 GB/s = 1.9456 us: memory bound; + 3 us launch
    assert op.latency_us["cpu"] == pytest.approx(3 + 1.9456)
    assert op.bound["cpu"] == "memory"
