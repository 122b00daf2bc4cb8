"""GraphTurbo's instance views: the instance graph coloured by subgraph, the per-core /
per-cluster / DMA Gantt of the chosen order and the local buffer's occupancy over time."""

from __future__ import annotations

import functools

from frontend.figures.graphturbo import instance_gantt, instance_graph, local_occupancy


@functools.cache
def _plan() -> dict:
    from engine.graph.prepare import prepare_model
    from engine.partition.graphturbo import plan_graphturbo
    from engine.targets import get_target
    from tests.conftest import LIGHT_DIR

    prepared = prepare_model(str(LIGHT_DIR / "light_resnet50.onnx"))
    return plan_graphturbo(prepared.graph, get_target("dsa-graphturbo"))


def test_the_instance_graph_colours_instances_by_subgraph():
    plan = _plan()
    edges, nodes = instance_graph(plan)["data"]
    assert len(nodes["x"]) == plan["instances"] and set(nodes["x"]) == set(range(plan["kernels"]))
    colours = {}
    for g, c in zip(nodes["x"], nodes["marker"]["color"], strict=True):
        assert colours.setdefault(g, c) == c  # one colour per subgraph
    assert edges["x"].count(None) == plan["edges"]["kept"]


def test_the_gantt_has_core_cluster_and_dma_lanes():
    plan = _plan()
    t = plan["timeline"]
    figure = instance_gantt(plan)
    lanes = figure["layout"]["yaxis"]["categoryarray"]
    assert len(lanes) == t["cores"] + 2 * t["clusters"]
    clusters = next(d for d in figure["data"] if d["name"] == "instance on cluster")
    assert len(clusters["y"]) == plan["instances"]
    dma = next(d for d in figure["data"] if d["name"].startswith("DMA"))
    assert all(y.startswith("DMA ") for y in dma["y"]) and dma["y"]
    # no two instances overlap on a cluster
    for k in range(t["clusters"]):
        rows = sorted((r for r in t["instances"] if r["cluster"] == k), key=lambda r: r["start_us"])
        assert all(
            a["end_us"] <= b["start_us"] + 1e-6 for a, b in zip(rows, rows[1:], strict=False)
        )
    # an instance starts after the instances it reads from
    ends = {r["instance"]: r["end_us"] for r in t["instances"]}
    for p, q in plan["instance_graph"]["edges"]:
        start = next(r["start_us"] for r in t["instances"] if r["instance"] == q)
        assert start >= ends[p] - 1e-6
    assert "predicted" in figure["layout"]["title"]["text"]


def test_occupancy_stays_within_the_local_buffers():
    plan = _plan()
    line = local_occupancy(plan)["data"][0]
    assert line["line"]["shape"] == "hv"
    assert all(0 <= y <= 100 for y in line["y"])
    assert len(line["x"]) == plan["instances"] + 1
