"""Partition figures: pure functions from the stage's result JSON to Plotly figure dicts."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from frontend.figures.partition import algorithm_comparison, cut_cost_curve, schedule_gantt


@pytest.fixture
def result():
    """``PartitionResult.to_dict()`` of a diamond: a, then b on the gpu beside c on the cpu."""
    return {
        "algorithm": "hope-ilp",
        "makespan_ms": 0.034,
        "units": ["cpu", "gpu"],
        "timeline": [
            {"op": "a", "op_type": "Conv", "unit": "cpu", "start_us": 0.0, "finish_us": 5.0},
            {"op": "b", "op_type": "Conv", "unit": "gpu", "start_us": 17.0, "finish_us": 21.0},
            {"op": "c", "op_type": "Relu", "unit": "cpu", "start_us": 5.0, "finish_us": 13.0},
            {"op": "d", "op_type": "Add", "unit": "cpu", "start_us": 32.0, "finish_us": 34.0},
        ],
        "transfers": [
            {"tensor": "ta", "src": "a", "dst": "b", "bytes": 2000, "start_us": 5.0,
             "finish_us": 17.0, "link": "cpu->gpu"},
            {"tensor": "tb", "src": "b", "dst": "d", "bytes": 1000, "start_us": 21.0,
             "finish_us": 32.0, "link": "gpu->cpu"},
        ],
    }  # fmt: skip


def test_gantt_has_a_lane_per_unit_and_per_link(result):
    fig = schedule_gantt(result)
    go.Figure(fig)  # a valid figure
    lanes = fig["layout"]["yaxis"]["categoryarray"]
    assert set(lanes) == {"cpu", "gpu", "link cpu->gpu", "link gpu->cpu"}
    cpu = next(t for t in fig["data"] if t["name"] == "cpu")
    assert cpu["base"] == [0.0, 0.005, 0.032] and cpu["x"] == pytest.approx([0.005, 0.008, 0.002])
    moves = next(t for t in fig["data"] if t["name"] == "transfers")
    assert moves["y"] == ["link cpu->gpu", "link gpu->cpu"]
    assert moves["x"] == pytest.approx([0.012, 0.011])
    assert fig["layout"]["shapes"][0]["x0"] == 0.034  # the makespan
    assert "predicted" in fig["layout"]["title"]["text"]
    json.dumps(fig)


def test_gantt_of_a_plan_without_transfers():
    op = {"op": "a", "unit": "cpu", "start_us": 0, "finish_us": 1000}
    fig = schedule_gantt(
        {"algorithm": "single-unit", "makespan_ms": 1.0, "units": ["cpu"], "timeline": [op]}
    )
    go.Figure(fig)
    assert [t["name"] for t in fig["data"]] == ["cpu"]


def test_comparison_bars_mark_the_best_and_the_baseline():
    report = {
        "algorithms": {
            "heft": {"makespan_ms": 1.3, "speedup": 1.2, "solve_s": 0.001},
            "hope-ilp": {"makespan_ms": 1.24, "speedup": 1.26, "solve_s": 2.5},
            "chain-dp": {"makespan_ms": 1.566, "speedup": 1.0, "solve_s": 0.0},
        },
        "best": "hope-ilp",
        "best_single_unit_ms": 1.566,
        "verdict": "partitioning helps: hope-ilp runs in 1.240 ms, 1.26x faster than cpu alone",
    }
    fig = algorithm_comparison(report)
    go.Figure(fig)
    makespan, speedup, solve = fig["data"]
    assert makespan["y"] == [1.3, 1.24, 1.566] and speedup["y"] == [1.2, 1.26, 1.0]
    assert solve["y"] == [0.001, 2.5, 0.0] and solve["xaxis"] == "x3"
    assert makespan["marker"]["color"][1] != makespan["marker"]["color"][0]
    assert [s["y0"] for s in fig["layout"]["shapes"]] == [1.566, 1.0]
    assert "partitioning helps" in fig["layout"]["title"]["text"]


def test_cut_curve_stacks_the_three_times_and_marks_the_cut():
    curve = [
        {"cut": "input", "position": 0, "feasible": True, "mobile_ms": 0.0, "transfer_ms": 180.0,
         "cloud_ms": 10.0, "latency_ms": 190.0, "energy_j": 0.45},
        {"cut": "pool", "position": 1, "feasible": True, "mobile_ms": 20.0, "transfer_ms": 30.0,
         "cloud_ms": 8.0, "latency_ms": 58.0, "energy_j": 0.12},
        {"cut": "output", "position": 2, "feasible": True, "mobile_ms": 90.0, "transfer_ms": 0.0,
         "cloud_ms": 0.0, "latency_ms": 90.0, "energy_j": 0.18},
    ]  # fmt: skip
    result = {"details": {"curve": curve, "best_cut": curve[1], "network": "4g",
                          "objective": "latency"}}  # fmt: skip
    fig = cut_cost_curve(result)
    go.Figure(fig)
    mobile, upload, cloud, energy = fig["data"]
    assert fig["layout"]["barmode"] == "stack"
    assert upload["y"] == [180.0, 30.0, 0.0] and energy["yaxis"] == "y2"
    assert fig["layout"]["shapes"][0]["x0"] == 1
    assert "best cut pool" in fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["ticktext"] == ["input", "pool", "output"]


def test_cut_curve_without_power_has_no_energy_line():
    curve = [{"cut": "input", "position": 0, "mobile_ms": 0.0, "transfer_ms": 1.0,
              "cloud_ms": 1.0, "energy_j": None}]  # fmt: skip
    fig = cut_cost_curve({"details": {"curve": curve, "best_cut": curve[0]}})
    go.Figure(fig)
    assert [t["name"] for t in fig["data"]] == ["mobile", "upload", "cloud"]
