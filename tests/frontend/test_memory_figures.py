"""Memory-plan figures: pure functions from the stage's result JSON to Plotly figure dicts."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from frontend.figures.memory import (
    format_bytes,
    live_bytes_curve,
    memory_timeline,
    planners_bar,
    tvm_bar,
)

# The tflite_gpu toy example as MemoryReport.to_dict() gives it (greedy by size's plan).
TOY = [("t0", 32, 0, 1, 0), ("t1", 8, 1, 3, 32), ("t2", 4, 2, 4, 72), ("t3", 8, 3, 4, 64)]
TOY.append(("t4", 64, 4, 5, 0))


@pytest.fixture
def report():
    producers = {"t0": "op0", "t1": "op1", "t2": "op2", "t3": "op3", "t4": "op4"}
    consumers = {"t0": ["op1"], "t1": ["op2", "op3"], "t2": ["op4"], "t3": ["op4"], "t4": ["op5"]}
    return {
        "lower_bound_bytes": 76,
        "planners": {"naive": 116, "greedy-objects": 104, "mincost-flow": 84, "greedy-by-size": 76},
        "ratios": {"naive": 1.526316, "greedy-objects": 1.368421, "mincost-flow": 1.105263},
        "planner_time_s": {"naive": 0.0001, "greedy-by-size": 0.0002},
        "errors": {"best-fit-search": "declined"},
        "best": "greedy-by-size",
        "valid": True,
        "order": ["op0", "op1", "op2", "op3", "op4", "op5"],
        "order_gain_bytes": 0,
        "peak_step": 4,
        "live_bytes": [32, 40, 12, 20, 76, 64],
        "tensors": [
            {"name": n, "size": s, "first": f, "last": la, "producer": producers[n],
             "consumers": consumers[n]}
            for n, s, f, la, _ in TOY
        ],
        "plans": {
            "greedy-by-size": [
                {"tensor": n, "offset": o, "size": s, "first": f, "last": la}
                for n, s, f, la, o in TOY
            ]
        },
    }  # fmt: skip


def renders(figure: dict) -> dict:
    """Plotly validates every property name and value; the page gets this JSON."""
    go.Figure(figure)
    return json.loads(json.dumps(figure))


def test_timeline_draws_one_rectangle_per_tensor_at_its_offset_and_lifetime(report):
    figure = renders(memory_timeline(report))
    (bars,) = figure["data"]
    assert bars["base"] == [0, 32, 72, 64, 0]  # offsets
    assert bars["y"] == [32, 8, 4, 8, 64]  # heights are the sizes
    # t1 lives from op 1 to op 3: a rectangle from x=1 to x=4.
    assert bars["x"][1] - bars["width"][1] / 2 == 1 and bars["x"][1] + bars["width"][1] / 2 == 4
    t1 = bars["customdata"][1]
    assert t1[:4] == ["t1", "8 B", "op1", "op2, op3"]
    assert "producer: %{customdata[2]}" in bars["hovertemplate"]
    # The arena is where the rectangles end: no rectangle pokes above it.
    assert max(b + h for b, h in zip(bars["base"], bars["y"], strict=True)) == 76
    lines = [s["y0"] for s in figure["layout"]["shapes"] if s["type"] == "line"]
    assert lines == [76, 76]  # lower bound and arena coincide on the toy
    peak = [s for s in figure["layout"]["shapes"] if s["type"] == "rect"]
    assert [(s["x0"], s["x1"]) for s in peak] == [(4, 5)]


def test_timeline_of_a_named_planner(report):
    report["plans"]["naive"] = [
        {"tensor": "t0", "offset": 0, "size": 32, "first": 0, "last": 1},
    ]
    figure = renders(memory_timeline(report, "naive"))
    assert figure["data"][0]["base"] == [0]
    assert "naive" in figure["layout"]["title"]["text"]
    assert any(a["text"] == "arena 116 B" for a in figure["layout"]["annotations"])


def test_live_bytes_curve_with_the_lower_bound(report):
    figure = renders(live_bytes_curve(report))
    (curve,) = figure["data"]
    assert curve["y"] == [32, 40, 12, 20, 76, 64] and curve["x"] == [0, 1, 2, 3, 4, 5]
    assert curve["text"][4] == "op4"
    assert max(curve["y"]) == figure["layout"]["shapes"][0]["y0"] == 76
    texts = [a["text"] for a in figure["layout"]["annotations"]]
    assert texts == ["lower bound 76 B", "best plan (greedy-by-size) 76 B"]


def test_planners_bar_highlights_the_best_and_names_the_skipped(report):
    figure = renders(planners_bar(report))
    (bars,) = figure["data"]
    assert bars["x"] == ["naive", "greedy-objects", "mincost-flow", "greedy-by-size"]
    assert bars["y"] == [116, 104, 84, 76]
    colors = bars["marker"]["color"]
    assert colors[3] != colors[0] and len(set(colors[:3])) == 1
    assert bars["text"][0] == "x1.526"
    assert "best-fit-search: declined" in figure["layout"]["annotations"][-1]["text"]


def test_empty_report_gives_empty_figures():
    for build in (memory_timeline, live_bytes_curve, planners_bar):
        figure = renders(build({"lower_bound_bytes": 0, "planners": {}}))
        assert figure["data"][0]["x"] == []


def test_format_bytes():
    assert [format_bytes(n) for n in (0, 999, 1536, 2_500_000, 3e9)] == [
        "0 B",
        "999 B",
        "1.54 kB",
        "2.50 MB",
        "3.00 GB",
    ]


def test_figures_read_what_the_engine_writes():
    """The engine's own report for an inline two-branch model goes straight in."""
    from onnx import TensorProto, helper

    from engine.memory import plan_memory

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Sigmoid", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="y"),
    ]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [256]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "branches", spec[:1], spec[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    report = plan_memory(model).to_dict()
    timeline = renders(memory_timeline(report))
    assert [c[0] for c in timeline["data"][0]["customdata"]] == ["a", "b"]
    assert timeline["data"][0]["customdata"][0][2:4] == ["a", "y"]
    assert renders(live_bytes_curve(report))["data"][0]["y"] == [1024, 2048, 2048]
    assert renders(planners_bar(report))["data"][0]["y"][0] == 2048


def test_tvm_bar_puts_tvms_total_first_and_marks_our_best():
    tvm = {
        "tvm_static_bytes": 6_353_088,
        "planners": {"naive": 17_488_096, "greedy-by-size": 3_928_576},
        "ours_planner": "greedy-by-size",
        "ours_bytes": 3_928_576,
        "ours_reordered_bytes": 3_900_000,
        "lower_bound_bytes": 3_928_576,
    }
    figure = tvm_bar(tvm)
    go.Figure(figure)  # Plotly accepts it
    bar = figure["data"][0]
    assert bar["x"][0] == "TVM StaticPlanBlockMemory" and bar["y"][0] == 6_353_088
    assert bar["x"][-1] == "greedy-by-size + order search"
    assert bar["text"][2] == "0.62x TVM"
    assert "planned" in figure["layout"]["title"]["text"]
