"""Figures for the analyze stage. Numbers here are counted from the graph's shapes (static
analysis), neither measured nor predicted; the titles say so."""

from __future__ import annotations

from collections import defaultdict

_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
    "height": 380,
    "template": "plotly_white",
}


def op_histogram(analysis: dict) -> dict:
    ops = analysis.get("ops", {})
    names = sorted(ops, key=lambda op: (-ops[op], op))
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": [ops[n] for n in names],
                "marker": {"color": "#4c78a8"},
                "hovertemplate": "%{x}: %{y} nodes<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": "Operators by type (count of nodes)"},
            "xaxis": {"title": {"text": "operator type"}},
            "yaxis": {"title": {"text": "nodes"}},
        },
    }


def flops_by_op_type(analysis: dict) -> dict:
    totals: dict[str, int] = defaultdict(int)
    for node in analysis.get("node_list", []):
        totals[node["op_type"]] += node.get("flops") or 0
    names = [n for n in sorted(totals, key=lambda op: -totals[op]) if totals[n] > 0]
    whole = sum(totals.values()) or 1
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": [totals[n] / 1e9 for n in names],
                "customdata": [100.0 * totals[n] / whole for n in names],
                "marker": {"color": "#f58518"},
                "hovertemplate": "%{x}: %{y:.3f} GFLOPs (%{customdata:.1f}%)<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": "FLOPs by operator type (counted from shapes)"},
            "xaxis": {"title": {"text": "operator type"}},
            "yaxis": {"title": {"text": "GFLOPs"}},
        },
    }


def flops_per_node(analysis: dict) -> dict:
    """FLOPs of every node in execution order, one trace per op type so the legend filters."""
    by_type: dict[str, dict[str, list]] = defaultdict(lambda: {"x": [], "y": [], "text": []})
    for index, node in enumerate(analysis.get("node_list", [])):
        if not node.get("flops"):
            continue
        series = by_type[node["op_type"]]
        series["x"].append(index)
        series["y"].append(node["flops"] / 1e6)
        series["text"].append(node["name"])
    data = [
        {
            "type": "bar",
            "name": op_type,
            "x": series["x"],
            "y": series["y"],
            "text": series["text"],
            "textposition": "none",
            "hovertemplate": "%{text}<br>node %{x}: %{y:.2f} MFLOPs<extra>" + op_type + "</extra>",
        }
        for op_type, series in sorted(by_type.items())
    ]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": "FLOPs per node, in execution order (counted from shapes)"},
            "barmode": "overlay",
            "bargap": 0,
            "xaxis": {"title": {"text": "node index (topological order)"}},
            "yaxis": {"title": {"text": "MFLOPs"}},
        },
    }


def analysis_figures(analysis: dict) -> dict[str, dict]:
    return {
        "ops": op_histogram(analysis),
        "flops_by_type": flops_by_op_type(analysis),
        "flops_per_node": flops_per_node(analysis),
    }
