"""The model graph view: a layered drawing of the analysis's node list, computed here so the
browser only draws (frontend/static/workbench/graph.js).

The node list is in topological order (the analysis sorts it); every metric is a column
aligned with it, so a new one (latency, compute unit, kernel) is one more ``Metric``.

``edges`` reads the graph from the node list, ``layout`` draws it in layers, ``groups``
nests it, ``levels`` lays each group's inside out on its own, ``metrics`` colours it and
``payload`` puts the view together.
"""

from frontend.figures.graph.edges import node_edges, satellites
from frontend.figures.graph.groups import (
    GROUP_KINDS,
    VISIBLE_LIMIT,
    Group,
    cut_modules,
    find_groups,
    straight_chains,
)
from frontend.figures.graph.layout import (
    GAP,
    LIGHT_PULL,
    MAX_BEND_SPAN,
    SWEEPS,
    Layout,
    count_crossings,
    layout_graph,
)
from frontend.figures.graph.metrics import Metric, builtin_metrics
from frontend.figures.graph.payload import (
    StageGraph,
    combine_overlays,
    graph_payload,
    merge_stage_graphs,
    with_metrics,
)

__all__ = [
    "GAP",
    "GROUP_KINDS",
    "LIGHT_PULL",
    "MAX_BEND_SPAN",
    "SWEEPS",
    "StageGraph",
    "VISIBLE_LIMIT",
    "Group",
    "Layout",
    "Metric",
    "builtin_metrics",
    "combine_overlays",
    "count_crossings",
    "cut_modules",
    "find_groups",
    "graph_payload",
    "layout_graph",
    "merge_stage_graphs",
    "node_edges",
    "satellites",
    "straight_chains",
    "with_metrics",
]
