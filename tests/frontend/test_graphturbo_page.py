"""The partition page for a DSA target shows GraphTurbo's kernel counts, off-core bytes
and ablation instead of the placement comparison."""

from __future__ import annotations

import functools

from django.template.loader import render_to_string

from frontend.presenters import present


@functools.cache
def _report() -> dict:
    from engine.graph.prepare import prepare_model
    from engine.partition.options import PartitionStageOptions
    from engine.partition.stage import run
    from engine.targets import get_target
    from tests.conftest import LIGHT_DIR

    prepared = prepare_model(str(LIGHT_DIR / "light_resnet50.onnx"))
    options = PartitionStageOptions.from_dict({"check_execution": False})
    return run(prepared, get_target("dsa-graphturbo"), options, lambda f, m: None).to_dict()


def test_the_figures_hold_kernels_bytes_and_the_ablation():
    report = _report()
    plan = report["results"]["graphturbo"]
    figures = present("partition", report)["figures"]
    assert set(figures) == {"gt_kernels", "gt_offcore", "gt_ablation", "gt_instances", "gt_gantt",
                            "gt_occupancy"}  # fmt: skip
    assert figures["gt_kernels"]["data"][0]["y"] == [
        plan["baseline_kernels"], plan["kernels"], plan["instances"]
    ]  # fmt: skip
    baseline, ours = figures["gt_offcore"]["data"]
    assert sum(ours["y"]) == plan["offcore_bytes"]["total"] < sum(baseline["y"])
    bars, latency = figures["gt_ablation"]["data"]
    assert len(bars["x"]) == 4 and "predicted" in latency["name"]


def test_the_page_renders_the_graphturbo_section():
    context = present("partition", _report())
    html = render_to_string(context["template"], context)
    assert 'id="graphturbo-verdict"' in html and "fig-gt-ablation-data" in html
    assert "partition-algorithms" not in html
