"""The JSON the graph view draws (frontend/static/workbench/graph.js), put together from
the layout, the groups and the metrics."""

from __future__ import annotations

from collections.abc import Mapping

from frontend.figures.graph.edges import node_edges, satellites
from frontend.figures.graph.groups import default_collapsed, find_groups, group_head
from frontend.figures.graph.layout import layout_graph
from frontend.figures.graph.metrics import Metric, builtin_metrics, metric_payload


def graph_payload(
    analysis: dict, metrics: Mapping[str, Metric] | None = None, *, initial: str | None = None
) -> dict:
    """The JSON the graph view draws: columns per node, edges with bends, groups, metrics.

    ``metrics`` adds to the built-in ones (op type, FLOPs, bytes, params, intensity), e.g.
    ``{"latency_us": Metric("latency", values={name: us}, unit="µs")}``; ``initial`` names
    the metric the view opens with (default: the first, op type).
    """
    nodes = analysis.get("node_list") or []
    names = [node["name"] for node in nodes]
    edges = node_edges(nodes)
    graph_inputs = {t["name"] for t in analysis.get("inputs", [])}
    owner = satellites(nodes, edges, graph_inputs)
    layout = layout_graph(len(nodes), edges, light=owner.keys())
    groups = find_groups(nodes, edges, owner, analysis.get("structure"))
    innermost = [-1] * len(nodes)
    for g, group in enumerate(groups):
        for v in group.members:
            innermost[v] = g  # children come after their parents
    all_metrics = {**builtin_metrics(nodes), **(metrics or {})}
    members_of = [group.members for group in groups]
    payload = {
        "nodes": {
            "name": names,
            "op_type": [node["op_type"] for node in nodes],
            "inputs": [node.get("inputs", []) for node in nodes],
            "outputs": [node.get("outputs", []) for node in nodes],
            "shapes": [node.get("output_shapes", []) for node in nodes],
            "macs": [node.get("macs") for node in nodes],
            "bytes_read": [node.get("bytes_read") for node in nodes],
            "bytes_written": [node.get("bytes_written") for node in nodes],
            "costed": [node.get("costed", True) for node in nodes],
            "x": [round(x, 2) for x in layout.x],
            "layer": layout.layer,
            "group": innermost,
        },
        "edges": [v for edge in layout.edges for v in edge],
        "bends": [[round(x, 2) for x in bend] for bend in layout.bends],
        "groups": {
            "kind": [group.kind for group in groups],
            "parent": [group.parent for group in groups],
            "head": [group_head(group.members, owner, layout) for group in groups],
            "size": [len(group.members) for group in groups],
            "label": [group.label for group in groups],
        },
        "metrics": [
            metric_payload(key, metric, names, members_of) for key, metric in all_metrics.items()
        ],
    }
    payload["collapsed"] = default_collapsed(payload)
    payload["initial_metric"] = initial if initial in all_metrics else next(iter(all_metrics))
    return payload
