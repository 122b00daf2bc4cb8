"""Memory planners: the tflite_gpu toy example, exactness of min-cost flow, and the
validator that guards every plan."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.graph import analyze_model
from engine.memory import (
    PLANNERS,
    InvalidPlanError,
    Lifetimes,
    MemoryConfig,
    TensorUse,
    UnknownPlannerError,
    build_lifetimes,
    plan_memory,
    validate_plan,
)
from engine.memory.lifetimes import Buffer
from engine.memory.planners import Placement, PlannerInfo, PlannerOptions, PlannerSkipped
from engine.memory.planners.mincost_flow import flow_costs, min_cost_assignment

# tflite_gpu section 2.7.3c: ops 0 -> 1 -> {2, 3} -> 4 -> 5; t_i is op i's output.
TOY = {"t0": (32, 0, 1), "t1": (8, 1, 3), "t2": (4, 2, 4), "t3": (8, 3, 4), "t4": (64, 4, 5)}


def lifetimes_of(records: dict[str, tuple[int, int, int]], steps: int) -> Lifetimes:
    uses = {n: TensorUse(n, size, first, last) for n, (size, first, last) in records.items()}
    buffers = [Buffer(u.size, u.first, u.last, (u.name,)) for u in uses.values()]
    return Lifetimes(list(range(steps)), uses, buffers)


def toy_model():
    """The toy as an ONNX graph: float32 tensors of 8, 2, 1, 2 and 16 elements."""
    nodes = [
        helper.make_node("Relu", ["x"], ["t0"], name="op0"),
        helper.make_node("MatMul", ["t0", "w1"], ["t1"], name="op1"),
        helper.make_node("MatMul", ["t1", "w2"], ["t2"], name="op2"),
        helper.make_node("MatMul", ["t1", "w3"], ["t3"], name="op3"),
        helper.make_node("Sum", ["t2", "t3", "w4"], ["t4"], name="op4"),
        helper.make_node("Relu", ["t4"], ["y"], name="op5"),
    ]
    weights = [weight("w1", (8, 2)), weight("w2", (2, 1)), weight("w3", (2, 2))]
    return build(nodes, [("x", [1, 8])], [("y", [8, 2])], [*weights, weight("w4", (8, 2))])


def arenas(lifetimes: Lifetimes, options: PlannerOptions | None = None) -> dict[str, int]:
    options = options or PlannerOptions()
    return {
        name: info.plan(lifetimes.buffers, lifetimes.steps, options).arena_bytes
        for name, info in PLANNERS.items()
    }


def test_toy_example_gives_the_papers_numbers():
    lifetimes = lifetimes_of(TOY, 6)
    assert lifetimes.lower_bound() == 76
    result = arenas(lifetimes)
    assert result["naive"] == 116
    assert result["greedy-objects"] == 104
    assert result["mincost-flow"] == 84
    # Offsets in one arena reach the lower bound here.
    assert result["greedy-by-size"] == result["best-fit-search"] == 76


def test_toy_model_through_the_graph_has_the_toy_lifetimes():
    graph = analyze_model(toy_model()).graph
    lifetimes = build_lifetimes(graph)
    assert {n: (u.size, u.first, u.last) for n, u in lifetimes.uses.items()} == TOY
    report = plan_memory(graph, MemoryConfig(order_search=False)).to_dict()
    assert report["lower_bound_bytes"] == 76
    assert report["live_bytes"] == [32, 40, 12, 20, 76, 64]
    assert {k: report["planners"][k] for k in ("naive", "greedy-objects", "mincost-flow")} == {
        "naive": 116,
        "greedy-objects": 104,
        "mincost-flow": 84,
    }
    assert report["valid"] is True and report["best"] == "greedy-by-size"
    assert report["plans"]["mincost-flow"][4] == {
        "tensor": "t4",
        "offset": report["plans"]["mincost-flow"][0]["offset"],  # t4 takes t0's object
        "size": 64,
        "first": 4,
        "last": 5,
        "object": report["plans"]["mincost-flow"][0]["object"],
    }


def test_greedy_objects_reuses_as_the_paper_traces():
    lifetimes = lifetimes_of(TOY, 6)
    placement = PLANNERS["greedy-objects"].plan(lifetimes.buffers, 6, PlannerOptions())
    obj = dict(zip(TOY, placement.objects, strict=True))
    assert obj["t2"] == obj["t0"] and obj["t4"] == obj["t1"]  # t1's object grows 8 -> 64
    assert sorted(placement.object_sizes) == [8, 32, 64]


def random_records(rng: random.Random, n: int, steps: int) -> dict[str, tuple[int, int, int]]:
    records = {}
    for i in range(n):
        first = rng.randrange(steps)
        last = min(steps - 1, first + rng.choice((0, 1, 1, 2, 3, 8)))
        records[f"t{i}"] = (rng.choice((4, 8, 16, 64, 100, 256)), first, last)
    return records


@pytest.mark.parametrize("seed", range(12))
def test_every_planner_makes_valid_plans_at_or_above_the_bound(seed):
    rng = random.Random(seed)
    lifetimes = lifetimes_of(random_records(rng, 40, 25), 25)
    lower = lifetimes.lower_bound()
    options = PlannerOptions(time_limit_s=0.05)
    for name, info in PLANNERS.items():
        placement = info.plan(lifetimes.buffers, lifetimes.steps, options)
        offsets = {
            b.tensors[0]: o for b, o in zip(lifetimes.buffers, placement.offsets, strict=True)
        }
        objects = None
        if placement.objects is not None:
            objects = {
                b.tensors[0]: o for b, o in zip(lifetimes.buffers, placement.objects, strict=True)
            }
        validate_plan(lifetimes, offsets, placement.arena_bytes, objects, placement.object_sizes)
        assert placement.arena_bytes >= lower, name
    result = arenas(lifetimes, options)
    assert result["best-fit-search"] <= result["greedy-by-size"]
    assert result["best-fit-search"] <= result["greedy-by-breadth"]


def flow_cost(buffers, column) -> int:
    n = len(buffers)
    return sum(
        buffers[y].size if x >= n else max(0, buffers[y].size - buffers[x].size)
        for y, x in enumerate(column)
    )


@pytest.mark.parametrize("seed", range(8))
def test_min_cost_flow_is_optimal_on_its_network(seed):
    """Against brute force: every assignment of tensors to a predecessor or a new object."""
    rng = random.Random(seed)
    lifetimes = lifetimes_of(random_records(rng, 6, 8), 8)
    buffers = lifetimes.buffers
    cost, forbidden = flow_costs(buffers)
    best = _brute_force(cost, forbidden)
    assert cost[np.arange(len(buffers)), min_cost_assignment(cost)].sum() == best


def _brute_force(cost: np.ndarray, forbidden: int) -> int:
    n = cost.shape[0]
    best = None

    def walk(row: int, used: frozenset, total: int) -> None:
        nonlocal best
        if row == n:
            best = total if best is None else min(best, total)
            return
        walk(row + 1, used, total + int(cost[row, n + row]))
        for x in range(n):
            if x not in used and cost[row, x] < forbidden:
                walk(row + 1, used | {x}, total + int(cost[row, x]))

    walk(0, frozenset(), 0)
    return best


def test_min_cost_flow_matches_scipy_on_larger_problems():
    from scipy.optimize import linear_sum_assignment

    rng = random.Random(7)
    lifetimes = lifetimes_of(random_records(rng, 120, 60), 60)
    cost, _ = flow_costs(lifetimes.buffers)
    rows, cols = linear_sum_assignment(cost)
    ours = min_cost_assignment(cost)
    assert cost[np.arange(len(ours)), ours].sum() == cost[rows, cols].sum()


def test_min_cost_flow_declines_above_its_limit():
    lifetimes = lifetimes_of(TOY, 6)
    with pytest.raises(PlannerSkipped):
        PLANNERS["mincost-flow"].plan(lifetimes.buffers, 6, PlannerOptions(exact_max_buffers=4))


@pytest.mark.parametrize(
    "broken, message",
    [
        ({"t0": 0, "t1": 24, "t2": 40, "t3": 44, "t4": 0}, "'t0' and 't1'"),  # t1 inside t0
        ({"t0": 0, "t1": 32, "t2": 40, "t3": 36, "t4": 44}, "'t1' and 't3'"),
        ({"t0": 0, "t1": 32, "t2": 40, "t3": 44, "t4": 60}, "outside the arena"),
        ({"t0": 0, "t1": 32, "t2": 40, "t3": 44}, "no offset"),
    ],
)
def test_validator_rejects_a_broken_plan(broken, message):
    lifetimes = lifetimes_of(TOY, 6)
    with pytest.raises(InvalidPlanError, match=message):
        validate_plan(lifetimes, broken, 116)


def test_validator_rejects_tensors_live_together_in_one_object():
    lifetimes = lifetimes_of(TOY, 6)
    # The offsets alone are safe; the objects claim t0 and t1 (both live at step 1) share.
    offsets = {"t0": 0, "t1": 32, "t2": 72, "t3": 64, "t4": 0}
    objects = {"t0": 0, "t1": 0, "t2": 1, "t3": 2, "t4": 3}
    with pytest.raises(InvalidPlanError, match="share object 0"):
        validate_plan(lifetimes, offsets, 76, objects, [32, 4, 8, 64])


def test_validator_accepts_the_tight_plan():
    lifetimes = lifetimes_of(TOY, 6)
    validate_plan(lifetimes, {"t0": 0, "t1": 32, "t2": 72, "t3": 64, "t4": 0}, 76)


def test_a_broken_planner_is_reported_invalid_and_never_best(monkeypatch):
    def overlapping(buffers, steps, options):
        return Placement([0] * len(buffers), max(b.size for b in buffers))

    monkeypatch.setitem(
        PLANNERS, "broken", PlannerInfo("broken", "offsets", True, overlapping, "puts all at 0")
    )
    report = plan_memory(toy_model(), MemoryConfig(planners=("broken", "greedy-by-size")))
    result = report.to_dict()
    assert result["valid"] is False and result["best"] == "greedy-by-size"
    assert "both live" in result["errors"]["broken"]


def test_unknown_planner_is_a_typed_error():
    with pytest.raises(UnknownPlannerError, match="unknown memory planner 'magic'"):
        plan_memory(toy_model(), MemoryConfig(planners=("magic",)))
