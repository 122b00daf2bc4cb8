"""The JSON the graph view draws (frontend/static/workbench/graph.js), put together from
the layout, the groups and the metrics.

The layout depends on the analysis alone and is computed per level (``levels``): the
model's graph page lays out the first view's levels when the model is analyzed and each
other one when it is first opened (workbench/graph_store.py); pages that hand the graph
over inline get every level, built once per analysis (kept by
``frontend.figures.graph.store``). Stage overlays are added per view (``with_metrics``),
by node name: a page view never lays the graph out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from frontend.figures.graph.levels import ROOT, default_open, graph_tree, level, skeleton
from frontend.figures.graph.levels import with_overlays as overlay_metrics
from frontend.figures.graph.metrics import Metric
from frontend.figures.graph.store import cached

PAYLOAD_VERSION = 5  # bump when the tree's or a level's shape or the layout changes
KEY_ATTRIBUTES = 4  # at most this many attributes are written in an op's box


def graph_payload(
    analysis: dict, metrics: Mapping[str, Metric] | None = None, *, initial: str | None = None
) -> dict:
    """The JSON the graph view draws, with every level laid out (for the pages that hand
    the graph over inline; the model's graph page fetches levels as they open instead).

    ``metrics`` adds to the built-in ones (op type, FLOPs, bytes, params, intensity), e.g.
    ``{"latency_us": Metric("latency", values={name: us}, unit="µs")}``; ``initial`` names
    the metric the view opens with (default: the first, op type).
    """
    base = cached(analysis, PAYLOAD_VERSION, all_levels)
    return with_metrics(base, metrics or {}, initial=initial)


@dataclass(frozen=True)
class StageGraph:
    """A stage's graph as its presenter asks for it: the analysis drawn, the stage's
    overlays and the one the view opens with. The page decides how the graph is handed
    over: fetched level by level beside the model's stored layout
    (``workbench.graph_views.run_graph``), or every level inline (``payload``)."""

    analysis: dict
    metrics: Mapping[str, Metric]
    initial: str | None = None

    def payload(self) -> dict:
        return graph_payload(self.analysis, self.metrics, initial=self.initial)


def merge_stage_graphs(graphs: list[StageGraph]) -> StageGraph:
    """One view of the same graph with every stage's overlays: the last one's, then the
    others' it lacks; it opens on the last one's initial metric."""
    last = graphs[-1]
    metrics = dict(last.metrics)
    for graph in graphs[:-1]:
        for key, metric in graph.metrics.items():
            metrics.setdefault(key, metric)
    return StageGraph(last.analysis, metrics, last.initial)


def graph_tree_of(analysis: dict) -> dict:
    return graph_tree(analysis, key_attributes)


def first_view(tree: dict) -> dict:
    """The skeleton and the levels the first view opens."""
    opened = default_open(tree)
    return {
        "version": PAYLOAD_VERSION,
        **skeleton(tree),
        "open": opened,
        "levels": [level(tree, g) for g in [ROOT, *opened]],
        "initial_metric": tree["metrics"][0]["key"] if tree["metrics"] else None,
    }


def all_levels(analysis: dict) -> dict:
    tree = graph_tree_of(analysis)
    view = first_view(tree)
    shown = {ROOT, *view["open"]}
    view["levels"] += [
        level(tree, g) for g in range(len(tree["groups"]["parent"])) if g not in shown
    ]
    view["names"] = tree["nodes"]["name"]  # for overlays given as Metric objects
    return view


def with_metrics(base: dict, metrics: Mapping[str, Metric], *, initial: str | None = None) -> dict:
    """``base`` (not changed) with ``metrics`` added after the built-in ones, by node name."""
    tree = {"nodes": {"name": base["names"]}}
    extra = overlay_metrics(tree, metrics)
    keys = [m["key"] for m in base["metrics"]] + list(metrics)
    return {
        **base,
        "metrics": [m for m in base["metrics"] if m["key"] not in metrics] + extra,
        "initial_metric": initial if initial in keys else keys[0] if keys else None,
    }


def combine_overlays(payloads: list[dict]) -> dict:
    """One view of the same graph with every payload's metrics: the last one's, then the
    others' it lacks; it opens on the last one's initial metric."""
    combined = payloads[-1]
    keys = {m["key"] for m in combined["metrics"]}
    extra = [m for p in payloads[:-1] for m in p["metrics"] if m["key"] not in keys]
    extra = list({m["key"]: m for m in extra}.values())
    return {**combined, "metrics": combined["metrics"] + extra}


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
