"""The partition page for NN-Stretch: the branch design table, the branched graph coloured by
processor, the spatial schedule with its barriers and communication lanes, the candidates
after each constraint, the predicted speedup (and the measured one where there is one)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine"))

from django.template.loader import render_to_string  # noqa: E402
from nnstretch_cases import PHONE, prepared  # noqa: E402

from frontend.figures.nnstretch import (  # noqa: E402
    branched_graph,
    candidate_funnel,
    design_rows,
    spatial_gantt,
    speedup_bars,
)
from frontend.presenters import present  # noqa: E402


@functools.cache
def _report(algorithm: str = "nn-stretch", floor: float = 0.5) -> dict:
    from engine.partition.options import PartitionStageOptions
    from engine.partition.stage import run
    from engine.targets import get_target

    options = PartitionStageOptions.from_dict(
        {
            "algorithms": [algorithm],
            "stretch_alpha": 1.0,
            "stretch_min_meet": 1,
            "stretch_ratio_floor": floor,
        }  # fmt: skip
    )
    return run(prepared("mobilenet_v2"), get_target(PHONE), options, lambda f, m: None).to_dict()


def _plan() -> dict:
    return _report()["results"]["nn-stretch"]


def test_the_design_table_has_a_row_per_branch_of_every_segment():
    plan = _plan()
    rows = design_rows(plan)
    segments = plan["design"]["segments"]
    assert len(rows) == sum(len(s["branches"]) for s in segments)
    assert [r["unit"] for r in rows if r["segment"] == 0] == plan["design"]["units"]
    first = rows[0]
    assert first["first"] and first["span"] == len(segments[0]["branches"])
    assert first["original"] == f"({segments[0]['depth']}, {segments[0]['width']})"


def test_the_branched_graph_colours_nodes_by_processor():
    plan = _plan()
    figure = branched_graph(plan)
    edges, *units = figure["data"]
    assert [t["name"].split(" ")[0] for t in units] == plan["units"]
    assert sum(len(t["x"]) for t in units) == len(plan["graph"]["name"])
    assert len({t["marker"]["color"] for t in units}) == len(units)
    home = next(t for t in units if t["name"].startswith(plan["home"]))
    assert "diamond" in home["marker"]["symbol"]  # the meeting points
    assert edges["mode"] == "lines" and edges["x"].count(None) == len(plan["graph"]["edges"])


def test_the_gantt_has_a_lane_per_processor_and_per_link_and_the_barriers():
    plan = _plan()
    figure = spatial_gantt(plan)
    lanes = figure["layout"]["yaxis"]["categoryarray"]
    assert set(plan["schedule"]["units"]) <= set(lanes)
    assert any(lane.startswith("comm ") for lane in lanes)  # the GPU branch's transfers
    assert len(figure["layout"]["shapes"]) == plan["design"]["n_meet"]
    names = [t["name"] for t in figure["data"]]
    assert "head and tail (unparallelised)" in names and "communication" in names
    assert "predicted" in figure["layout"]["title"]["text"]


def test_the_funnel_shows_every_step_and_the_speedup_is_labelled_predicted():
    plan = _plan()
    funnel = candidate_funnel(plan)
    assert list(funnel["data"][0]["y"]) == [s["step"] for s in plan["candidate_counts"]]
    bars = speedup_bars(plan)["data"][0]
    assert bars["x"] == [f"predicted ({plan['model']})"] and bars["y"] == [plan["speedup"]]


def test_measured_speedup_sits_beside_the_predicted_one_with_where_it_was_measured():
    plan = dict(_plan())
    plan["measured"] = {
        "machine": {"cpu_model": "Test CPU"}, "reps": 7, "groups": 2, "threads_per_group": 1,
        "speedup": 1.3, "branched": {"median_ms": 5.0}, "original_one_group": {"median_ms": 6.5},
        "load_average": {"before": 0.1, "after": 0.2},
    }  # fmt: skip
    bars = speedup_bars(plan)["data"][0]
    assert bars["y"] == [plan["speedup"], 1.3]
    assert bars["x"][1] == "measured (Test CPU, 7 runs, 2 x 1 thread(s))"


def test_the_page_renders_the_nnstretch_section():
    context = present("partition", _report())
    assert set(context["figures"]) == {"ns_graph", "ns_gantt", "ns_candidates", "ns_speedup"}
    html = render_to_string(context["template"], context)
    for marker in ("nnstretch-verdict", "nnstretch-design", "nnstretch-retrain",
                   "fig-ns-graph-data", "fig-ns-gantt-data"):  # fmt: skip
        assert marker in html
    assert "partition-algorithms" not in html and "graphturbo" not in html


def test_a_plan_nothing_satisfies_shows_why():
    report = _report(floor=1.0)  # full-size copies: every branch as slow as the original
    assert "Eq. 5" in report["failed"]["nn-stretch"] and not report["results"]
    context = present("partition", report)
    html = render_to_string(context["template"], context)
    assert 'id="nnstretch-verdict"' in html and "Eq. 5: straggler bound" in html


def test_on_the_host_the_page_says_where_the_measured_speedup_comes_from():
    from engine.partition.options import PartitionStageOptions
    from engine.partition.stage import run
    from engine.targets import get_target

    options = PartitionStageOptions.from_dict({"algorithms": ["nn-stretch"]})
    report = run(prepared("mobilenet_v2", 96), get_target("host"), options, lambda f, m: None)
    report = report.to_dict()
    plan = report["results"]["nn-stretch"]
    context = present("partition", report)
    bars = context["figures"]["ns_speedup"]["data"][0]
    assert bars["x"][0].startswith("predicted (flops-proportional")
    assert bars["x"][1].startswith(f"measured ({plan['measured']['machine']['cpu_model']}")
    html = render_to_string(context["template"], context)
    assert "Measured: the branched model in onnxruntime" in html
    assert report["algorithms"]["nn-stretch"]["speedup"] == plan["speedup"]  # the headline
