"""Figures for the memory-plan stage, from ``MemoryReport.to_dict()``.

Byte counts here are planned from tensor shapes (static), neither measured nor predicted.
"""

from __future__ import annotations

from frontend.units import format_bytes

_LAYOUT = {
    "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
    "template": "plotly_white",
}
_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b")
_BEST, _OTHER, _BOUND, _TVM = "#54a24b", "#4c78a8", "#e45756", "#f58518"


def memory_timeline(report: dict, planner: str | None = None) -> dict:
    """One rectangle per tensor: x from its first to its last op, y its bytes in the arena.

    ``planner`` defaults to the report's best. The lower bound and the plan's arena are
    drawn as horizontal lines, the step of peak live bytes as a vertical one.
    """
    planner = planner or report.get("best")
    plan = report.get("plans", {}).get(planner, [])
    tensors = {t["name"]: t for t in report.get("tensors", [])}
    x, width, base, size, custom, colors = [], [], [], [], [], []
    for k, entry in enumerate(plan):
        info = tensors.get(entry["tensor"], {})
        span = entry["last"] - entry["first"] + 1
        x.append(entry["first"] + span / 2)
        width.append(span)
        base.append(entry["offset"])
        size.append(entry["size"])
        colors.append(_PALETTE[k % len(_PALETTE)])
        custom.append(
            [
                entry["tensor"],
                format_bytes(entry["size"]),
                info.get("producer") or "(graph input)",
                ", ".join(info.get("consumers", [])) or "(none)",
                entry["offset"],
                entry["offset"] + entry["size"],
                entry["first"],
                entry["last"],
            ]
        )
    arena = report.get("planners", {}).get(planner)
    lower = report.get("lower_bound_bytes", 0)
    shapes = [_hline(lower, _BOUND, "dot")]
    annotations = [_label(lower, f"lower bound {format_bytes(lower)}", _BOUND)]
    if arena is not None:
        shapes.append(_hline(arena, "#333", "dash"))
        annotations.append(_label(arena, f"arena {format_bytes(arena)}", "#333", above=False))
    peak_step = report.get("peak_step")
    if peak_step is not None:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": peak_step,
                "x1": peak_step + 1,
                "y0": 0,
                "y1": 1,
                "fillcolor": _BOUND,
                "opacity": 0.12,
                "line": {"width": 0},
            }
        )
        annotations.append(
            {
                "x": peak_step + 0.5,
                "y": 1,
                "xref": "x",
                "yref": "paper",
                "yanchor": "bottom",
                "text": f"peak: op {peak_step}",
                "showarrow": False,
                "font": {"color": _BOUND},
            }
        )
    return {
        "data": [
            {
                "type": "bar",
                "name": "tensors",
                "x": x,
                "width": width,
                "base": base,
                "y": size,
                "customdata": custom,
                "marker": {"color": colors, "line": {"color": "#fff", "width": 0.5}},
                "hovertemplate": (
                    "<b>%{customdata[0]}</b> (%{customdata[1]})<br>"
                    "bytes %{customdata[4]:,} to %{customdata[5]:,}<br>"
                    "ops %{customdata[6]} to %{customdata[7]}<br>"
                    "producer: %{customdata[2]}<br>consumers: %{customdata[3]}<extra></extra>"
                ),
            }
        ],
        "layout": {
            **_LAYOUT,
            "height": 480,
            "title": {"text": f"Memory timeline: {planner} (planned from shapes)"},
            "barmode": "overlay",
            "bargap": 0,
            "showlegend": False,
            "xaxis": {"title": {"text": "op index (execution order)"}},
            "yaxis": {"title": {"text": "byte offset in the arena"}, "rangemode": "tozero"},
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def live_bytes_curve(report: dict) -> dict:
    """Bytes live at each op, with the lower bound (their peak) and the best plan's arena."""
    live = report.get("live_bytes", [])
    order = report.get("order", [])
    names = [order[i] if i < len(order) else "" for i in range(len(live))]
    lower = report.get("lower_bound_bytes", 0)
    best = report.get("best")
    shapes = [_hline(lower, _BOUND, "dot")]
    annotations = [_label(lower, f"lower bound {format_bytes(lower)}", _BOUND)]
    if best is not None:
        arena = report["planners"][best]
        shapes.append(_hline(arena, "#333", "dash"))
        annotations.append(
            _label(arena, f"best plan ({best}) {format_bytes(arena)}", "#333", above=False)
        )
    gain = report.get("order_gain_bytes", 0)
    subtitle = f"; order search saved {format_bytes(gain)}" if gain else ""
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "name": "live bytes",
                "x": list(range(len(live))),
                "y": live,
                "text": names,
                "line": {"shape": "hv", "color": _OTHER},
                "fill": "tozeroy",
                "hovertemplate": "op %{x} %{text}<br>%{y:,} bytes live<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "height": 380,
            "title": {"text": f"Live bytes per op (planned from shapes){subtitle}"},
            "xaxis": {"title": {"text": "op index (execution order)"}},
            "yaxis": {"title": {"text": "bytes"}, "rangemode": "tozero"},
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def planners_bar(report: dict) -> dict:
    """Arena bytes of every planner that made a plan, the best highlighted."""
    planners = report.get("planners", {})
    names = list(planners)
    ratios = report.get("ratios", {})
    times = report.get("planner_time_s", {})
    lower = report.get("lower_bound_bytes", 0)
    skipped = [f"{n}: {e}" for n, e in report.get("errors", {}).items() if n not in planners]
    annotations = [_label(lower, f"lower bound {format_bytes(lower)}", _BOUND)]
    if skipped:
        annotations.append(
            {
                "x": 0,
                "y": -0.25,
                "xref": "paper",
                "yref": "paper",
                "xanchor": "left",
                "text": "not run: " + "; ".join(skipped),
                "showarrow": False,
                "font": {"size": 11, "color": "#666"},
            }
        )
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": [planners[n] for n in names],
                "text": [f"x{ratios.get(n, 0):.3f}" for n in names],
                "textposition": "outside",
                "customdata": [[format_bytes(planners[n]), 1e3 * times.get(n, 0.0)] for n in names],
                "marker": {"color": [_BEST if n == report.get("best") else _OTHER for n in names]},
                "hovertemplate": (
                    "%{x}: %{customdata[0]} (%{text} the lower bound)<br>"
                    "planned in %{customdata[1]:.1f} ms<extra></extra>"
                ),
            }
        ],
        "layout": {
            **_LAYOUT,
            "height": 380,
            "title": {"text": "Arena size by planner (planned from shapes)"},
            "xaxis": {"title": {"text": "planner"}},
            "yaxis": {"title": {"text": "bytes"}, "rangemode": "tozero"},
            "shapes": [_hline(lower, _BOUND, "dot")],
            "annotations": annotations,
        },
    }


def tvm_bar(tvm: dict) -> dict:
    """TVM's static allocation total next to our planners on the same kernel tensors."""
    planners = tvm.get("planners", {})
    names = ["TVM StaticPlanBlockMemory", *planners]
    sizes = [tvm["tvm_static_bytes"], *planners.values()]
    if tvm.get("ours_reordered_bytes", 0) < tvm.get("ours_bytes", 0):
        names.append(f"{tvm['ours_planner']} + order search")
        sizes.append(tvm["ours_reordered_bytes"])
    lower = tvm.get("lower_bound_bytes", 0)
    tvm_bytes = tvm["tvm_static_bytes"] or 1
    colors = [_TVM] + [_BEST if n == tvm.get("ours_planner") else _OTHER for n in names[1:]]
    return {
        "data": [
            {
                "type": "bar",
                "x": names,
                "y": sizes,
                "text": [f"{size / tvm_bytes:.2f}x TVM" for size in sizes],
                "textposition": "outside",
                "customdata": [format_bytes(size) for size in sizes],
                "marker": {"color": colors},
                "hovertemplate": "%{x}: %{customdata} (%{text})<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "height": 380,
            "title": {"text": "TVM build vs our planners, same kernel tensors (planned)"},
            "xaxis": {"title": {"text": "planner"}},
            "yaxis": {"title": {"text": "bytes"}, "rangemode": "tozero"},
            "shapes": [_hline(lower, _BOUND, "dot")],
            "annotations": [_label(lower, f"lower bound {format_bytes(lower)}", _BOUND)],
        },
    }


def _hline(y: float, color: str, dash: str) -> dict:
    return {
        "type": "line",
        "xref": "paper",
        "yref": "y",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": color, "dash": dash, "width": 1.5},
    }


def _label(y: float, text: str, color: str, above: bool = True) -> dict:
    return {
        "x": 1,
        "y": y,
        "xref": "paper",
        "yref": "y",
        "xanchor": "right",
        "yanchor": "bottom" if above else "top",
        "text": text,
        "showarrow": False,
        "font": {"color": color},
    }
