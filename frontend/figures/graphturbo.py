"""Figures for GraphTurbo's plan on a DSA (the partition stage's ``graphturbo`` result):
kernels against one per layer, off-core bytes by level pair, and the Fig. 15 ablation.
Bytes come from the planner's replay and times from the target's numbers: predicted."""

from __future__ import annotations

_LAYOUT = {
    "template": "plotly_white",
    "height": 360,
    "margin": {"l": 70, "r": 60, "t": 70, "b": 70},
}
_BASELINE, _PLAN = "#e45756", "#54a24b"


def kernel_counts(plan: dict) -> dict:
    """Kernels one per layer against GraphTurbo's subgraphs and their instances."""
    labels = ["one kernel per layer", "GraphTurbo kernels", "GraphTurbo instances"]
    values = [plan["baseline_kernels"], plan["kernels"], plan["instances"]]
    return {
        "data": [
            {
                "type": "bar",
                "x": labels,
                "y": values,
                "text": [str(v) for v in values],
                "textposition": "outside",
                "marker": {"color": [_BASELINE, _PLAN, "#4c78a8"]},
                "hovertemplate": "%{x}: %{y}<extra></extra>",
            }
        ],
        "layout": {**_LAYOUT, "title": {"text": "Kernels"}, "yaxis": {"title": {"text": "count"}}},
    }


def offcore_bytes(plan: dict) -> dict:
    """Off-core bytes (local<->global, global<->DRAM), per-layer baseline against the plan."""
    pairs = [("local_global", "local ↔ global"), ("global_dram", "global ↔ DRAM")]
    data = [
        {
            "type": "bar",
            "name": name,
            "x": [label for _, label in pairs],
            "y": [plan[key][k] for k, _ in pairs],
            "marker": {"color": color},
            "hovertemplate": "%{x}: %{y:,} bytes<extra>" + name + "</extra>",
        }
        for key, name, color in (
            ("baseline_offcore_bytes", "one kernel per layer", _BASELINE),
            ("offcore_bytes", "GraphTurbo", _PLAN),
        )
    ]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "barmode": "group",
            "title": {"text": "Off-core bytes (predicted by the planner's replay)"},
            "yaxis": {"title": {"text": "bytes"}},
        },
    }


def ablation_bars(plan: dict) -> dict:
    """The paper's ablation (Fig. 15): off-core bytes per step, predicted latency as a line."""
    steps = plan["ablation"]
    names = [s["step"] for s in steps]
    data = [
        {
            "type": "bar",
            "name": "off-core bytes",
            "x": names,
            "y": [s["offcore_bytes"] for s in steps],
            "marker": {"color": "#4c78a8"},
            "hovertemplate": "%{x}: %{y:,} bytes<extra></extra>",
        }
    ]
    layout = {"yaxis": {"title": {"text": "off-core bytes"}, "rangemode": "tozero"}}
    if all(s["latency_ms"] is not None for s in steps):
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "latency (predicted)",
                "x": names,
                "y": [s["latency_ms"] for s in steps],
                "yaxis": "y2",
                "marker": {"color": _BASELINE},
                "hovertemplate": "%{x}: %{y:.3f} ms (predicted)<extra></extra>",
            }
        )
        layout["yaxis2"] = {
            "title": {"text": "ms (predicted)"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        }
    return {
        "data": data,
        "layout": {**_LAYOUT, **layout, "title": {"text": "Ablation (GraphTurbo Fig. 15)"}},
    }


def graphturbo_figures(plan: dict) -> dict[str, dict]:
    """Every GraphTurbo figure of a valid plan, by name."""
    if not plan.get("valid"):
        return {}
    return {
        "gt_kernels": kernel_counts(plan),
        "gt_offcore": offcore_bytes(plan),
        "gt_ablation": ablation_bars(plan),
    }
