"""The energy-vs-latency trade-off figure of the partition page, from the stage's JSON."""

from __future__ import annotations

import plotly.graph_objects as go

from frontend.figures.partition_energy import trade_off_curve
from frontend.presenters import present


def _report() -> dict:
    points = [
        {"algorithm": "hope-ilp", "weight": "compared", "makespan_ms": 5.3, "energy_mj": 28.0},
        {"algorithm": "heft", "weight": 0.5, "makespan_ms": 6.1, "energy_mj": 8.0},
        {"algorithm": "chain-dp", "weight": "compared", "makespan_ms": 40.4, "energy_mj": 7.3},
        {"algorithm": "heft", "weight": 0.9, "makespan_ms": 7.0, "energy_mj": 20.0},
    ]
    return {
        "best": "chain-dp",
        "objective": "energy",
        "objective_detail": {"description": "energy-first"},
        "algorithms": {},
        "results": {"chain-dp": {"algorithm": "chain-dp", "makespan_ms": 40.4, "units": ["cpu"]}},
        "trade_off": {
            "available": True,
            "predicted": True,
            "method": "weighted-objective sweep",
            "points": points,
            "front": [points[0], points[1], points[2]],
            "plans": {
                "hope-ilp": {"makespan_ms": 5.3, "energy_mj": 28.0, "on_front": True},
                "chain-dp": {"makespan_ms": 40.4, "energy_mj": 7.3, "on_front": True},
                "blocks": {"makespan_ms": 7.0, "energy_mj": 21.0, "on_front": False},
            },
        },
    }


def test_the_front_is_a_line_with_every_algorithms_plan_marked():
    figure = trade_off_curve(_report())
    go.Figure(figure)  # a valid figure
    front = next(t for t in figure["data"] if t["name"] == "Pareto front")
    assert front["x"] == [5.3, 6.1, 40.4] and front["y"] == [28.0, 8.0, 7.3]
    marked = {t["name"]: t for t in figure["data"] if t.get("text")}
    assert set(marked) == {"hope-ilp", "chain-dp (best)", "blocks"}
    assert "dominated" in marked["blocks"]["hovertemplate"]
    assert marked["chain-dp (best)"]["marker"]["color"] == "#54a24b"
    layout = figure["layout"]
    assert layout["xaxis"]["title"]["text"] == "makespan, predicted (ms)"
    assert layout["yaxis"]["title"]["text"] == "energy, predicted (mJ)"
    assert "predicted" in layout["title"]["text"] and "energy-first" in layout["title"]["text"]


def test_without_power_there_is_no_figure_and_the_page_says_why():
    report = _report()
    report["trade_off"] = {"available": False, "reason": "no power figures for: npu"}
    assert trade_off_curve(report) is None
    page = present("partition", {**report, "verdict": "", "notes": []})
    assert "trade_off" not in page["figures"]


def test_the_partition_page_gets_the_trade_off_figure():
    page = present("partition", {**_report(), "verdict": "", "notes": []})
    assert page["figures"]["trade_off"]["layout"]["yaxis"]["title"]["text"].endswith("(mJ)")


def test_the_page_shows_energy_next_to_makespan_and_the_trade_off():
    from django.template.loader import render_to_string

    from engine.graph.prepare import prepare_model
    from engine.partition.options import PartitionStageOptions
    from engine.partition.stage import run
    from engine.targets import get_target
    from tests.conftest import LIGHT_DIR

    prepared = prepare_model(str(LIGHT_DIR / "light_zfnet512.onnx"))
    options = PartitionStageOptions.from_dict({"objective": "energy", "check_execution": False})
    report = run(prepared, get_target("phone-snapdragon835"), options, lambda f, m: None)
    context = present("partition", report.to_dict())
    html = render_to_string(context["template"], context)
    assert '<th class="num">Energy mJ</th>' in html
    assert "fig-partition-trade-off-data" in html
    assert "objective: energy-first" in html
