"""The JSON the graph view draws (frontend/static/workbench/graph.js), put together from
the layout, the groups and the metrics.

The layout is the only costly part (about 7 s on a 50,000-node model), and it depends on
the analysis alone, so it is built once per analysis (``graph_base``, kept by
``frontend.figures.graph.store``) and stage overlays are added to it per view
(``with_metrics``): a page view never lays the graph out again.
"""

from __future__ import annotations

from collections.abc import Mapping

from frontend.figures.graph.edges import node_edges, satellites
from frontend.figures.graph.groups import default_collapsed, find_groups, group_head
from frontend.figures.graph.layout import layout_graph
from frontend.figures.graph.metrics import Metric, builtin_metrics, metric_payload
from frontend.figures.graph.store import cached

PAYLOAD_VERSION = 3  # bump when the base's shape or the layout changes: old entries go stale
KEY_ATTRIBUTES = 4  # at most this many attributes are written in an op's box


def graph_payload(
    analysis: dict, metrics: Mapping[str, Metric] | None = None, *, initial: str | None = None
) -> dict:
    """The JSON the graph view draws: columns per node, edges with bends, groups, metrics.

    ``metrics`` adds to the built-in ones (op type, FLOPs, bytes, params, intensity), e.g.
    ``{"latency_us": Metric("latency", values={name: us}, unit="µs")}``; ``initial`` names
    the metric the view opens with (default: the first, op type).
    """
    base = cached(analysis, PAYLOAD_VERSION, graph_base)
    return with_metrics(base, metrics or {}, initial=initial)


def with_metrics(base: dict, metrics: Mapping[str, Metric], *, initial: str | None = None) -> dict:
    """``base`` (not changed) with ``metrics`` added after the built-in ones."""
    names = base["nodes"]["name"]
    members_of = group_members(base)
    extra = [metric_payload(key, metric, names, members_of) for key, metric in metrics.items()]
    keys = [m["key"] for m in base["metrics"]] + list(metrics)
    return {
        **base,
        "metrics": [m for m in base["metrics"] if m["key"] not in metrics] + extra,
        "initial_metric": initial if initial in keys else keys[0],
    }


def combine_overlays(payloads: list[dict]) -> dict:
    """One view of the same graph with every payload's metrics: the last one's, then the
    others' it lacks; it opens on the last one's initial metric."""
    combined = payloads[-1]
    keys = {m["key"] for m in combined["metrics"]}
    extra = [m for p in payloads[:-1] for m in p["metrics"] if m["key"] not in keys]
    extra = list({m["key"]: m for m in extra}.values())
    return {**combined, "metrics": combined["metrics"] + extra}


def group_members(base: dict) -> list[list[int]]:
    """Each group's nodes, ascending, from each node's innermost group and the parents."""
    parent = base["groups"]["parent"]
    members: list[list[int]] = [[] for _ in parent]
    for v, g in enumerate(base["nodes"]["group"]):
        while g >= 0:
            members[g].append(v)
            g = parent[g]
    return members


def graph_base(analysis: dict) -> dict:
    """Everything the view draws but stage overlays: the layout, the groups, and the
    metrics the analysis itself gives."""
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
    members_of = [group.members for group in groups]
    payload = {
        "version": PAYLOAD_VERSION,
        "nodes": {
            "name": names,
            "op_type": [node["op_type"] for node in nodes],
            "attributes": [key_attributes(node.get("attributes")) for node in nodes],
            "inputs": [node.get("inputs", []) for node in nodes],
            "outputs": [node.get("outputs", []) for node in nodes],
            "shapes": [node.get("output_shapes", []) for node in nodes],
            "output_bytes": [node.get("output_bytes") for node in nodes],
            "macs": [node.get("macs") for node in nodes],
            "bytes_read": [node.get("bytes_read") for node in nodes],
            "bytes_written": [node.get("bytes_written") for node in nodes],
            "costed": [node.get("costed", True) for node in nodes],
            "weight": [v in owner for v in range(len(nodes))],
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
            metric_payload(key, metric, names, members_of)
            for key, metric in builtin_metrics(nodes).items()
        ],
    }
    payload["collapsed"] = default_collapsed(payload)
    payload["initial_metric"] = payload["metrics"][0]["key"]
    return payload


def key_attributes(attributes: dict | None) -> str:
    """The attributes an op box shows, short: ``kernel 3×3 · stride 2 · group 32``."""
    if not attributes:
        return ""
    parts = []
    first = sorted(attributes, key=lambda name: (_ORDER.get(name, len(_ORDER)), name))
    for name in first:
        value = attributes[name]
        if isinstance(value, list):
            if not value or len(value) > 8 or not all(isinstance(x, int) for x in value):
                continue
            if name in ("strides", "dilations") and set(value) == {1}:
                continue  # the default says nothing
            if name == "pads" and not any(value):
                continue
            if name == "pads" and len(set(value)) == 1:
                value = value[:1]
            value = "×".join(str(x) for x in value)
        elif not isinstance(value, int | float | str) or len(str(value)) > 16:
            continue
        parts.append(f"{_SHORT.get(name, name)} {value}")
    return " · ".join(parts[:KEY_ATTRIBUTES])


_SHORT = {"kernel_shape": "kernel", "strides": "stride", "dilations": "dilation", "pads": "pad"}
_ORDER = {
    name: i
    for i, name in enumerate(
        ("kernel_shape", "strides", "group", "dilations", "pads", "axis", "perm")
    )
}
