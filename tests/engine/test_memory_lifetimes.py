"""Tensor lifetimes from an execution order: what is planned, in-place chains, bad orders."""

from __future__ import annotations

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.graph import analyze_model
from engine.memory import LifetimeOptions, MemoryConfig, build_lifetimes, plan_memory
from engine.memory.lifetimes import OrderError

UNIT = 1 * 4 * 8 * 8 * 4  # bytes of a float32 [1, 4, 8, 8] tensor


@pytest.fixture
def skip_graph():
    """conv -> c; relu(c) -> r; add(r, c) -> a; relu(a) -> y: c outlives relu."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "c"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="out"),
    ]
    model = build(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [weight("w", (4, 4, 1, 1))])
    return analyze_model(model).graph


def spans(lifetimes):
    return {n: (u.size, u.first, u.last) for n, u in lifetimes.uses.items()}


def test_intermediates_only_by_default(skip_graph):
    lifetimes = build_lifetimes(skip_graph)
    assert spans(lifetimes) == {"c": (UNIT, 0, 2), "r": (UNIT, 1, 2), "a": (UNIT, 2, 3)}
    assert lifetimes.live_bytes() == [UNIT, 2 * UNIT, 3 * UNIT, UNIT]
    assert lifetimes.lower_bound() == 3 * UNIT
    assert lifetimes.aliases == []


def test_inputs_outputs_and_weights_are_planned_on_request(skip_graph):
    options = LifetimeOptions(plan_inputs=True, plan_outputs=True, plan_params=True)
    found = spans(build_lifetimes(skip_graph, options=options))
    assert found["x"] == (UNIT, 0, 0)  # from the start to its last reader
    assert found["y"] == (UNIT, 3, 3)  # from its producer to the end
    assert found["w"] == (64, 0, 3)  # weights stay for the whole run


def test_in_place_joins_an_output_to_the_input_that_dies_there(skip_graph):
    lifetimes = build_lifetimes(skip_graph, options=LifetimeOptions(in_place=True))
    # relu cannot overwrite c (add still reads it); add overwrites r, which dies there.
    assert lifetimes.aliases == [("r", "a")]
    assert [b.tensors for b in lifetimes.buffers] == [("c",), ("r", "a")]
    assert lifetimes.lower_bound() == 2 * UNIT
    report = plan_memory(skip_graph, MemoryConfig(in_place=True)).to_dict()
    assert report["valid"] and report["in_place"] == [["r", "a"]]
    for plan in report["plans"].values():
        offsets = {e["tensor"]: e["offset"] for e in plan}
        assert offsets["r"] == offsets["a"]


def test_graph_inputs_and_weights_are_never_overwritten_in_place():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["w", "r"], ["y"])]
    graph = analyze_model(build(nodes, [("x", [4])], [("y", [4])], [weight("w", (4,))])).graph
    options = LifetimeOptions(plan_inputs=True, plan_outputs=True, plan_params=True, in_place=True)
    # Relu may not write over x; Add skips the weight w and writes over r.
    assert build_lifetimes(graph, options=options).aliases == [("r", "y")]


def test_an_order_that_breaks_a_dependency_is_refused(skip_graph):
    with pytest.raises(OrderError, match="read before"):
        build_lifetimes(skip_graph, [1, 0, 2, 3])
    with pytest.raises(OrderError, match="every node exactly once"):
        build_lifetimes(skip_graph, [0, 1, 2])


def test_tensors_of_unknown_size_are_listed_not_planned():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = analyze_model(build(nodes, [("x", ["N", 4])], [("y", ["N", 4])])).graph
    lifetimes = build_lifetimes(graph)
    assert lifetimes.unsized == ["r"] and lifetimes.uses == {}
    assert plan_memory(graph).to_dict()["unsized"] == ["r"]
