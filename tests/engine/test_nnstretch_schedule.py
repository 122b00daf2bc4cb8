"""The spatial schedule of the branched model in the shared simulator: barriers at the
meeting points, transfers on the communication lanes, head and tail unparallelised on the
home processor, and the predicted speedup over the best single processor. On the host (a
measured target) the branches also run in onnxruntime: predicted and measured speedups
side by side, each saying where it comes from."""

from __future__ import annotations

import functools

import pytest
from nnstretch_cases import RELAXED, phone_plan, prepared

from engine.partition.nnstretch import plan_nnstretch
from engine.partition.nnstretch.search import StretchOptions
from engine.targets import get_target


def test_barriers_at_the_meeting_points():
    plan = phone_plan()
    sched = plan["schedule"]
    barriers = {b["segment"]: b["at_us"] for b in sched["barriers"]}
    assert len(barriers) == plan["design"]["n_meet"]
    for op in sched["ops"]:
        seg = op["segment"]
        if op["role"] in ("branch", "restore"):
            assert op["finish_us"] <= barriers[seg] + 1e-6  # every branch joins first
            if seg > 0:  # the next segment waits for the concat
                assert op["start_us"] >= barriers[seg - 1] - 1e-6
    assert max(barriers.values()) < sched["makespan_ms"] * 1e3


def test_head_and_tail_are_unparallelised_on_the_home_processor():
    plan = phone_plan()
    sched = plan["schedule"]
    ends = [op for op in sched["ops"] if op["role"] in ("head", "tail", "meet")]
    assert {op["unit"] for op in ends} == {plan["home"]}
    first_branch = min(op["start_us"] for op in sched["ops"] if op["role"] == "branch")
    assert all(op["finish_us"] <= first_branch + 1e-6 for op in ends if op["role"] == "head")
    assert 0 < sched["head_tail_share"] < 1


def test_gpu_branches_pay_their_transfers_on_the_communication_lane():
    plan = phone_plan("mobilenet_v2", RELAXED)
    sched = plan["schedule"]
    assert "gpu" in plan["design"]["units"]
    links = {t["link"] for t in sched["transfers"]}
    assert {"cpu_big->gpu", "gpu->cpu_big"} <= links  # big and LITTLE share memory: no link
    gpu_ops = [op for op in sched["ops"] if op["unit"] == "gpu"]
    arrival = min(t["finish_us"] for t in sched["transfers"] if t["link"] == "cpu_big->gpu")
    assert min(op["start_us"] for op in gpu_ops) >= arrival - 1e-6
    assert sched["comm_share"] > 0


def test_predicted_speedup_is_over_the_best_single_processor():
    plan = phone_plan()
    singles = plan["single_unit_ms"]
    assert plan["best_single_unit"] == min(singles, key=singles.get)
    assert plan["speedup"] == pytest.approx(plan["best_single_unit_ms"] / plan["latency_ms"], 1e-3)
    assert plan["speedup"] > 1
    assert plan["predicted"] is True and "roofline" in plan["model"]
    chosen = [g for g in plan["grid"] if g["chosen"]]
    assert len(chosen) == 1 and chosen[0]["simulated_ms"] == min(
        g["simulated_ms"] for g in plan["grid"]
    )


def test_every_grid_design_is_replayed_and_the_model_agrees_with_the_simulator():
    plan = phone_plan()
    assert len(plan["grid"]) == plan["candidates"] <= 20
    for g in plan["grid"]:  # same op costs: the per-segment model is the simulator's path
        assert g["simulated_ms"] == pytest.approx(g["model_ms"], rel=1e-6)


@functools.cache
def host_plan():
    p = prepared("mobilenet_v2", resolution=96)
    return plan_nnstretch(p.graph, p.model, get_target("host"), StretchOptions(), reps=3)


def test_on_the_host_predicted_and_measured_speedups_side_by_side():
    plan = host_plan()
    assert plan["valid"], plan.get("reason")
    m = plan["measured"]
    assert m["available"] and m["groups"] == len(plan["units"]) >= 2
    assert m["machine"]["cpu_model"] and m["reps"] == 3
    assert m["branched"]["execution_mode"] == "parallel"
    assert m["branched"]["inter_op_threads"] == m["groups"]
    assert m["original_one_group"]["intra_op_threads"] == m["threads_per_group"]
    assert m["speedup"] == pytest.approx(
        m["original_one_group"]["median_ms"] / m["branched"]["median_ms"], 1e-3
    )
    assert plan["model"].startswith("flops-proportional") and plan["speedup"] > 1
    assert "measured here" in plan["verdict"] and "predicted" in plan["verdict"]


def test_a_target_with_one_processor_and_no_cores_to_split_is_refused():
    from engine.targets.schema import validate_profile

    one = validate_profile({"name": "tiny", "kind": "measured",
                            "units": [{"name": "cpu", "kind": "cpu", "cores": 1}]})  # fmt: skip
    p = prepared("mobilenet_v2", resolution=96)
    plan = plan_nnstretch(p.graph, p.model, one)
    assert plan["valid"] is False and "core" in plan["reason"]
