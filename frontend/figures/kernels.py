"""Figures for the fuse + compile stage, from the compile result's JSON (``to_dict()``).

Kernel times are measured on the worker (TVM's VM instrument); kernel counts and bytes
are estimates from the fusion plan (inputs + outputs of every kernel); the titles say so.
"""

from __future__ import annotations

_LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 50, "b": 120},
    "height": 400,
    "template": "plotly_white",
}
_CLASS_COLORS = {"compute": "#4c78a8", "memory": "#f58518"}
_TOP_KERNELS = 40


def kernel_times(result: dict, top: int = _TOP_KERNELS) -> dict:
    """Bars of the slowest kernels' measured times, coloured compute/memory-intensive."""
    timed = [k for k in result.get("kernels", []) if k.get("time_us") is not None]
    timed.sort(key=lambda k: -k["time_us"])
    shown = timed[:top]
    traces = []
    for intensity, color in _CLASS_COLORS.items():
        group = [k for k in shown if k.get("intensity") == intensity]
        traces.append(
            {
                "type": "bar",
                "name": f"{intensity}-intensive",
                "x": [k["id"] for k in group],
                "y": [k["time_us"] / 1e3 for k in group],
                "customdata": [
                    [k["func"], ", ".join(k.get("nodes", [])[:6]), 100.0 * (k.get("share") or 0)]
                    for k in group
                ],
                "marker": {"color": color},
                "hovertemplate": "%{x} %{customdata[0]}<br>%{y:.3f} ms "
                "(%{customdata[2]:.1f}% of kernel time)<br>nodes: %{customdata[1]}"
                "<extra></extra>",
            }
        )
    if not timed:
        return {
            "data": [],
            "layout": {},
            "empty": "No kernel times: "
            + (
                "the artifact runs on onnxruntime alone, so no TVM kernel ships"
                if result.get("backend") == "onnxruntime" or not result.get("kernels")
                else "the kernels were not timed (the compile ran without measuring)"
            ),
        }
    hidden = len(timed) - len(shown)
    title = "Kernel times, measured on the worker"
    if hidden > 0:
        title += f" (slowest {len(shown)}; {hidden} more not shown)"
    return {
        "data": traces,
        "layout": {
            **_LAYOUT,
            "title": {"text": title},
            "barmode": "overlay",
            "xaxis": {
                "title": {"text": "kernel"},
                "categoryorder": "array",
                "categoryarray": [k["id"] for k in shown],
            },
            "yaxis": {"title": {"text": "ms per inference"}},
        },
    }


def fusion_stages(result: dict) -> dict:
    """Kernel count and estimated traffic after each fusion step (unfused, FuseOps, rules)."""
    stages = result.get("fusion", {}).get("stages", [])
    names = [s["name"] + ("" if s.get("accepted", True) else " (rejected)") for s in stages]
    return {
        "data": [
            {
                "type": "bar",
                "name": "kernels",
                "x": names,
                "y": [s["kernels"] for s in stages],
                "marker": {"color": "#4c78a8"},
                "hovertemplate": "%{x}: %{y} kernels<extra></extra>",
            },
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "traffic (MB)",
                "x": names,
                "y": [s["traffic_bytes"] / 1e6 for s in stages],
                "yaxis": "y2",
                "marker": {"color": "#e45756"},
                "hovertemplate": "%{x}: %{y:.1f} MB<extra></extra>",
            },
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": "Kernel count and estimated global-memory traffic per fusion step"},
            "xaxis": {"title": {"text": "fusion step (cumulative)"}},
            "yaxis": {"title": {"text": "kernels"}, "rangemode": "tozero"},
            "yaxis2": {
                "title": {"text": "estimated traffic (MB)"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
            },
            "legend": {"orientation": "h", "y": 1.1},
        },
    }


def kernel_table(result: dict) -> list[dict]:
    """Rows for the kernel table: ops, class, time, bytes and share of total."""
    rows = []
    for k in result.get("kernels", []):
        rows.append(
            {
                "kernel": k["id"],
                "function": k["func"],
                "nodes": ", ".join(k.get("nodes", [])),
                "ops": ", ".join(k.get("op_types", [])),
                "class": k.get("souffle_class"),
                "intensity": k.get("intensity"),
                "time_ms": None if k.get("time_us") is None else round(k["time_us"] / 1e3, 4),
                "share_pct": None if k.get("share") is None else round(100 * k["share"], 2),
                "global_mb": round(k.get("global_bytes", 0) / 1e6, 3),
                "schedule": k.get("schedule"),
            }
        )
    return rows


def kernels_vs_onnxruntime(profile: dict, top: int = 25) -> dict:
    """The profile's slowest TVM kernels next to what onnxruntime spent on the same ONNX
    nodes (both measured on the worker, medians over the profile's runs)."""
    timed = [k for k in profile.get("kernels", []) if k.get("median_us") is not None]
    timed.sort(key=lambda k: -k["median_us"])
    shown = timed[:top]
    ids = [k["id"] for k in shown]
    hover = [[k["func"], ", ".join(k["nodes"][:6]), k.get("spread_pct") or 0.0] for k in shown]
    traces = [
        {
            "type": "bar",
            "name": "TVM kernel",
            "x": ids,
            "y": [k["median_us"] / 1e3 for k in shown],
            "customdata": hover,
            "marker": {"color": "#4c78a8"},
            "hovertemplate": "%{x} %{customdata[0]}<br>TVM %{y:.3f} ms (spread "
            "%{customdata[2]:.0f}%)<br>nodes: %{customdata[1]}<extra></extra>",
        },
        {
            "type": "bar",
            "name": "onnxruntime, same nodes",
            "x": ids,
            "y": [(k.get("onnxruntime_us") or 0.0) / 1e3 for k in shown],
            "customdata": hover,
            "marker": {"color": "#f58518"},
            "hovertemplate": "%{x}: onnxruntime %{y:.3f} ms for nodes %{customdata[1]}"
            "<extra></extra>",
        },
    ]
    hidden = len(timed) - len(shown)
    title = "TVM kernels vs onnxruntime on the same nodes, measured on the worker"
    if hidden > 0:
        title += f" (slowest {len(shown)} of {len(timed)})"
    return {
        "data": traces,
        "layout": {
            **_LAYOUT,
            "title": {"text": title},
            "barmode": "group",
            "xaxis": {"title": {"text": "kernel"}, "categoryorder": "array", "categoryarray": ids},
            "yaxis": {"title": {"text": "ms per inference (median)"}},
        },
    }
