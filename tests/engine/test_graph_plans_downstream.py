"""Stages that read a partition plan take a graph planner's plan (GraphTurbo, NN-Stretch),
which places no op on a unit, without failing: the memory stage plans the whole model, and
the partitioned accuracy candidate says why it cannot run."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from engine.accuracy.errors import CandidateError
from engine.accuracy.options import AccuracyOptions
from engine.accuracy.stage import _candidate
from engine.contract import StageInputs
from engine.graph.prepare import prepare_model
from engine.memory.options import MemoryOptions
from engine.memory.stage import run as run_memory
from engine.targets.catalog import get_target

GRAPH_PLAN = {
    "planned_on_graph": True,
    "best": "graphturbo",
    "results": {"graphturbo": {"valid": True, "kernels": 3, "baseline_kernels": 5}},
}


@pytest.fixture
def prepared(tmp_path):
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="r1"),
            helper.make_node("Relu", ["a"], ["y"], name="r2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return prepare_model(path)


def test_memory_plans_the_whole_model_after_a_graph_plan(prepared):
    report = run_memory(
        prepared,
        get_target("dsa-graphturbo"),
        MemoryOptions.from_dict({}),
        lambda f, m: None,
        StageInputs(results={"partition": GRAPH_PLAN}),
    )
    result = report.to_dict() if hasattr(report, "to_dict") else report.details
    assert result["per_unit"] is None
    assert result["best"] is not None


def test_the_partitioned_candidate_says_a_graph_plan_places_no_op(prepared):
    options = AccuracyOptions.from_dict({"candidate": "partitioned"})
    with pytest.raises(CandidateError, match="places no op on a unit"):
        _candidate(
            prepared, prepared.model, options, StageInputs(results={"partition": GRAPH_PLAN})
        )
