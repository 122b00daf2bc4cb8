"""The graph view by levels: the hierarchy is built once per analysis (the ``tree``: nodes,
edges, nested groups, built-in metrics; no layout), and each level (the top, or one
group's inside) is laid out on its own, when it is first opened.

A level's items are its direct child groups (drawn as boxes) and its direct nodes; its
edges join items, each carrying the node pairs ("raw" edges) it stands for, so that the
browser can draw an edge from the node inside an open group. Every raw edge belongs to
exactly one level: the innermost group holding both its ends. The browser places an open
group's level inside the group's box (frontend/static/workbench/graph-levels.js), so
opening a group lays out that group only, and a level once laid out is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from frontend.figures.graph.edges import node_edges, satellites
from frontend.figures.graph.groups import GROUP_KINDS, VISIBLE_LIMIT, find_groups
from frontend.figures.graph.layout import layout_graph
from frontend.figures.graph.metrics import Metric, builtin_metrics, metric_payload
from frontend.figures.graph.scopes import scope_groups

ROOT = -1
FEW_ITEMS = 8  # a first view of fewer items than this opens its groups regardless of size
MOST_ITEMS = 5000  # ... unless a level has more items than this
NODE_COLUMNS = (
    "attributes",
    "inputs",
    "outputs",
    "shapes",
    "output_bytes",
    "macs",
    "bytes_read",
    "bytes_written",
    "costed",
    "weight",
)


def graph_tree(analysis: dict, key_attributes: Callable[[dict | None], str]) -> dict:
    """Everything the levels are cut from, as plain JSON-able data (about 1 s on 50,000
    nodes, no layout): node columns, edges, groups (parents before children), each node's
    innermost group, and the built-in metrics with their values per node and per group."""
    nodes = analysis.get("node_list") or []
    names = [node["name"] for node in nodes]
    edges = node_edges(nodes)
    graph_inputs = {t["name"] for t in analysis.get("inputs", [])}
    owner = satellites(nodes, edges, graph_inputs)
    groups = scope_groups(nodes, owner)
    if groups is None:  # the names carry no scopes: the detected structure
        groups = find_groups(nodes, edges, owner, analysis.get("structure"))
    innermost = [-1] * len(nodes)
    for g, group in enumerate(groups):
        for v in group.members:
            innermost[v] = g  # children come after their parents
    members_of = [group.members for group in groups]
    metrics = [
        metric_payload(key, metric, names, members_of)
        for key, metric in builtin_metrics(nodes).items()
    ]
    for m in metrics:
        m["range"] = value_range(m)
    preds: list[list[int]] = [[] for _ in nodes]
    for u, v in edges:
        preds[v].append(u)
    ops = sorted({node["op_type"] for node in nodes})
    code = {op: i for i, op in enumerate(ops)}
    return {
        "nodes": {
            "name": names,
            "op_type": [node["op_type"] for node in nodes],
            "op": [code[node["op_type"]] for node in nodes],
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
            "group": innermost,
        },
        "ops": ops,
        "preds": preds,
        "groups": {
            "kind": [group.kind for group in groups],
            "parent": [group.parent for group in groups],
            "size": [len(group.members) for group in groups],
            "label": [group.label for group in groups],
            "first": [min(group.members) for group in groups],
        },
        "metrics": metrics,
    }


def value_range(m: dict) -> dict | None:
    """The colour scale's range over every node and group (the browser only ever sees the
    open part), as graph-levels.js would compute it: log10 of the positive values on a log
    scale. None for categories and for a metric with no known value."""
    if m["kind"] == "categorical":
        return None
    log = m["scale"] == "log"
    known = [
        math.log10(value) if log else value
        for values in (m["values"], m.get("group_values") or [])
        for value in values
        if value is not None and not (log and value <= 0)
    ]
    if not known:
        return {"low": 0, "high": 1, "log": log}
    low, high = min(known), max(known)
    return {"low": low, "high": high if high > low else low + 1, "log": log}


def skeleton(tree: dict) -> dict:
    """What the browser needs before any level: every node's name, op and innermost group
    (for search, overlays and linked selection), the groups' nesting, and the metrics
    without their values (those come with each level, per item)."""
    groups = tree["groups"]
    return {
        "nodes": {k: tree["nodes"][k] for k in ("name", "op", "group")},
        "ops": tree["ops"],
        "groups": {
            "parent": groups["parent"],
            "kind": [GROUP_KINDS.index(kind) for kind in groups["kind"]],
            "size": groups["size"],
        },
        "kinds": list(GROUP_KINDS),
        "metrics": [
            {k: v for k, v in m.items() if k not in ("values", "group_values")}
            for m in tree["metrics"]
        ],
    }


def level_items(tree: dict, g: int) -> tuple[list[int], dict[int, int]]:
    """The level's items (node v as v, group c as -(c + 1)) in the order of their first
    node, and the item each node inside the level falls in."""
    parent = tree["groups"]["parent"]
    innermost = tree["nodes"]["group"]
    item_of: dict[int, int] = {}
    nodes = range(len(innermost)) if g == ROOT else _members(tree, g)
    for v in nodes:
        c = innermost[v]
        if c == g:
            item_of[v] = v
            continue
        while parent[c] != g:
            c = parent[c]
        item_of[v] = -(c + 1)
    first: dict[int, int] = {}
    for v, item in item_of.items():
        first.setdefault(item, v)
    items = sorted(first, key=first.__getitem__)
    return items, item_of


def _members(tree: dict, g: int) -> list[int]:
    """The group's nodes: those whose innermost group is ``g`` or inside it. The groups
    of a level are consecutive in the node order, so only ``g``'s span is scanned."""
    parent = tree["groups"]["parent"]
    innermost = tree["nodes"]["group"]
    start, size = tree["groups"]["first"][g], tree["groups"]["size"][g]
    found = []
    v = start
    while len(found) < size and v < len(innermost):
        c = innermost[v]
        while c > g:  # children come after their parents
            c = parent[c]
        if c == g:
            found.append(v)
        v += 1
    return found


def level(tree: dict, g: int) -> dict:
    """One level laid out: items with layer and x, edges between items (with bends, and
    the node pairs and tensors each stands for), the columns of its nodes, the labels of
    its groups and every built-in metric's value per item."""
    items, item_of = level_items(tree, g)
    index = {item: i for i, item in enumerate(items)}
    columns = tree["nodes"]
    raw: dict[tuple[int, int], list] = {}
    for v in sorted(item_of):
        b = item_of[v]
        for u in tree["preds"][v]:
            a = item_of.get(u)
            if a is None or a == b:
                continue
            carried = [t for t in columns["outputs"][u] if t and t in columns["inputs"][v]]
            raw.setdefault((index[a], index[b]), []).append([u, v, carried])
    pairs = list(raw)
    light = [i for i, item in enumerate(items) if item >= 0 and columns["weight"][item]]
    layout = layout_graph(len(items), pairs, light=light)
    node_items = [item for item in items if item >= 0]
    group_items = [-item - 1 for item in items if item < 0]
    groups = tree["groups"]
    return {
        "group": g,
        "items": items,
        "layer": layout.layer,
        "x": [round(x, 2) for x in layout.x],
        # layout_graph turns an edge against the item order round; raw keeps its pairs
        "edges": [v for edge in layout.edges for v in edge],
        "bends": [[round(x, 2) for x in bend] for bend in layout.bends],
        "raw": [raw.get(edge) or _turned(raw[edge[::-1]]) for edge in layout.edges],
        "nodes": {"index": node_items}
        | {k: [columns[k][v] for v in node_items] for k in NODE_COLUMNS},
        "groups": {
            "index": group_items,
            "label": [groups["label"][c] for c in group_items],
            "first": [groups["first"][c] for c in group_items],
        },
        "values": {
            m["key"]: [
                m["values"][item] if item >= 0 else m["group_values"][-item - 1] for item in items
            ]
            for m in tree["metrics"]
        },
    }


def _turned(pairs: list) -> list:
    """Node pairs of an edge the layout turned round (against the item order): a fourth
    entry says that the consumer ``v`` is drawn at the edge's upper end."""
    return [[u, v, carried, 1] for u, v, carried in pairs]


def default_open(tree: dict) -> list[int]:
    """The groups the first view opens, outermost first: level by level while the view
    stays within VISIBLE_LIMIT items (or has fewer than FEW_ITEMS, which tells nothing,
    while a level is within MOST_ITEMS)."""
    parent = tree["groups"]["parent"]
    children: dict[int, list[int]] = {}
    for c, p in enumerate(parent):
        children.setdefault(p, []).append(c)
    direct: dict[int, int] = {}
    for c in tree["nodes"]["group"]:
        direct[c] = direct.get(c, 0) + 1

    def count(g: int) -> int:
        return len(children.get(g, [])) + direct.get(g, 0)

    opened: list[int] = []
    shown = count(ROOT)
    frontier = children.get(ROOT, [])
    while frontier:
        added = sum(count(g) - 1 for g in frontier)
        if shown + added > VISIBLE_LIMIT and not (
            shown < FEW_ITEMS and all(count(g) <= MOST_ITEMS for g in frontier)
        ):
            break
        opened += frontier
        shown += added
        frontier = [c for g in frontier for c in children.get(g, [])]
    return opened


def with_overlays(tree: dict, metrics: Mapping[str, Metric]) -> list[dict]:
    """Stage metrics as the browser takes them: values by node name, aggregated over
    groups in the browser (by "sum", "mode", "min" or "max")."""
    names = tree["nodes"]["name"]
    out = []
    for key, metric in metrics.items():
        values = metric.values
        if not isinstance(values, Mapping):
            values = list(values)
            if len(values) != len(names):
                raise ValueError(f"metric {key!r} has {len(values)} values for {len(names)} nodes")
            values = dict(zip(names, values, strict=True))
        if callable(metric.aggregate):
            raise ValueError(f"metric {key!r}: the browser cannot aggregate by a function")
        by_name = Metric(
            metric.label, metric.kind, values, metric.unit, metric.scale, metric.aggregate
        )
        known = [name for name in values if name is not None]
        payload = metric_payload(key, by_name, known, None)
        payload["names"] = known
        out.append(payload)
    return out
