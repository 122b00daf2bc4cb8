"""Every planner on the real topologies bundled with onnx: safe, and near the bound.

The ratios (arena / lower bound) measured on these models are in bench/memory_bench.py's
output; here the claims of issue 6 are checked: our planner is within 2% of the lower
bound and never worse than TFLite's greedy by size, and the order search never raises
the peak.
"""

from __future__ import annotations

import pytest
from onnx_builders import LIGHT_MODELS

from engine.graph import analyze_model
from engine.memory import MemoryConfig, plan_memory


@pytest.fixture(scope="module", params=LIGHT_MODELS, ids=lambda p: p.stem)
def graph(request):
    return analyze_model(request.param).graph


def test_best_plan_is_within_two_percent_of_the_lower_bound(graph, record_property):
    report = plan_memory(graph).to_dict(plans=False)
    assert report["valid"] is True and not report["errors"]
    ratios = report["ratios"]
    record_property("ratios", ratios)
    planners = report["planners"]
    assert planners["best-fit-search"] <= planners["greedy-by-size"]
    assert planners["best-fit-search"] <= 1.02 * report["lower_bound_bytes"]
    assert planners[report["best"]] == min(planners.values())
    assert report["lower_bound_bytes"] <= report["original_lower_bound_bytes"]


def test_the_search_tries_size_and_breadth_however_little_time_it_has(graph):
    """With its time already spent, the search still places the buffers in both greedy
    orders and keeps the better: its plan never depends on the machine's load for that
    (a loaded CI machine cut it after the first order: DenseNet-121 4.7% above its bound)."""
    names = ("best-fit-search", "greedy-by-size", "greedy-by-breadth")
    report = plan_memory(graph, MemoryConfig(planners=names, time_limit_s=0.0))
    planners = report.to_dict(plans=False)["planners"]
    assert planners["best-fit-search"] <= min(
        planners["greedy-by-size"], planners["greedy-by-breadth"]
    )


def test_in_place_plans_are_valid_and_need_no_more(graph):
    plain = plan_memory(graph, MemoryConfig(planners=("best-fit-search",)))
    in_place = plan_memory(graph, MemoryConfig(planners=("best-fit-search",), in_place=True))
    assert in_place.valid
    assert in_place.lower_bound_bytes <= plain.lower_bound_bytes
