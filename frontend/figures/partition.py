"""Figures for the partition stage, from ``PartitionResult.to_dict()`` and the report of
``compare_algorithms``. Times are predicted by the shared schedule simulator from the
target's cost model, not measured; the titles say so.
"""

from __future__ import annotations

from frontend.units import format_bytes

_LAYOUT = {
    "margin": {"l": 110, "r": 20, "t": 60, "b": 60},
    "template": "plotly_white",
}
_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b")
_LINK = "#9d9d9d"
_BEST, _OTHER, _BASELINE = "#54a24b", "#4c78a8", "#e45756"


def schedule_gantt(result: dict) -> dict:
    """The schedule as a Gantt chart: one lane per unit, then one per link.

    Ops are bars from their start to their finish in the colour of their unit; transfers
    are grey bars on the lane of their link. Links carry transfers concurrently (the
    simulator does not model contention), so bars on a link lane may overlap.
    """
    units = list(result.get("units", []))
    links = sorted({t["link"] for t in result.get("transfers", [])})
    lanes = units + [f"link {link}" for link in links]
    traces = []
    for k, unit in enumerate(units):
        ops = [op for op in result.get("timeline", []) if op["unit"] == unit]
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": unit,
                "y": [unit] * len(ops),
                "base": [op["start_us"] / 1e3 for op in ops],
                "x": [(op["finish_us"] - op["start_us"]) / 1e3 for op in ops],
                "customdata": [
                    [op["op"], op.get("op_type", ""), op["start_us"] / 1e3, op["finish_us"] / 1e3]
                    for op in ops
                ],
                "marker": {
                    "color": _PALETTE[k % len(_PALETTE)],
                    "line": {"width": 0.5, "color": "#fff"},
                },
                "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>"
                "%{customdata[2]:.3f} - %{customdata[3]:.3f} ms<extra>%{y}</extra>",
            }
        )
    transfers = result.get("transfers", [])
    if transfers:
        traces.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": "transfers",
                "y": [f"link {t['link']}" for t in transfers],
                "base": [t["start_us"] / 1e3 for t in transfers],
                "x": [(t["finish_us"] - t["start_us"]) / 1e3 for t in transfers],
                "customdata": [
                    [t["tensor"], format_bytes(t["bytes"]), t["src"], t["dst"]] for t in transfers
                ],
                "marker": {"color": _LINK, "opacity": 0.6},
                "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>"
                "%{customdata[2]} -> %{customdata[3]}<extra>%{y}</extra>",
            }
        )
    makespan = result.get("makespan_ms")
    title = f"Schedule of {result.get('algorithm', '?')} (predicted)"
    if makespan is not None:
        title += f": {makespan:.3f} ms"
    shapes = []
    if makespan is not None:
        shapes.append(_vline(makespan, "#333", "dash"))
    return {
        "data": traces,
        "layout": {
            **_LAYOUT,
            "height": 120 + 40 * max(len(lanes), 1),
            "barmode": "overlay",
            "title": {"text": title},
            "xaxis": {"title": {"text": "time (ms)"}, "rangemode": "tozero"},
            "yaxis": {
                "categoryorder": "array",
                "categoryarray": lanes[::-1],
                "type": "category",
            },
            "shapes": shapes,
            "legend": {"orientation": "h", "y": -0.2},
        },
    }


def algorithm_comparison(report: dict) -> dict:
    """Three panels side by side: makespan, speedup over the best single unit, solve time.

    The best algorithm is green; the best single unit's makespan and the 1x speedup are
    drawn as red lines, and the report's verdict is the subtitle.
    """
    names = list(report.get("algorithms", {}))
    rows = [report["algorithms"][n] for n in names]
    best = report.get("best")
    colors = [_BEST if n == best else _OTHER for n in names]
    single = report.get("best_single_unit_ms")
    panels = [
        ("makespan (ms)", [r["makespan_ms"] for r in rows], "%{y:.3f} ms"),
        ("speedup over best single unit", [r.get("speedup") for r in rows], "%{y:.2f}x"),
        ("solve time (s)", [r.get("solve_s") for r in rows], "%{y:.3f} s"),
    ]
    data, layout = [], {}
    width = 1 / len(panels)
    for k, (label, values, fmt) in enumerate(panels):
        suffix = "" if k == 0 else str(k + 1)
        data.append(
            {
                "type": "bar",
                "x": names,
                "y": values,
                "xaxis": f"x{suffix}",
                "yaxis": f"y{suffix}",
                "marker": {"color": colors},
                "showlegend": False,
                "hovertemplate": f"%{{x}}: {fmt}<extra></extra>",
            }
        )
        layout[f"xaxis{suffix}"] = {
            "domain": [k * width + 0.04, (k + 1) * width - 0.04],
            "anchor": f"y{suffix}",
            "tickangle": -30,
        }
        layout[f"yaxis{suffix}"] = {
            "anchor": f"x{suffix}",
            "title": {"text": label},
            "rangemode": "tozero",
        }
    shapes = []
    if single is not None:
        shapes.append(_hline(single, "x", "y", _BASELINE))
        shapes.append(_hline(1.0, "x2", "y2", _BASELINE))
    verdict = report.get("verdict", "")
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            **layout,
            "height": 420,
            "margin": {"l": 60, "r": 20, "t": 80, "b": 110},
            "title": {
                "text": "Partitioning algorithms (predicted)"
                + (f"<br><sup>{verdict}</sup>" if verdict else "")
            },
            "shapes": shapes,
        },
    }


def cut_cost_curve(result: dict) -> dict:
    """The mobile-cloud split's cost per cut (thesis Fig. 3-10/3-12): latency split into
    mobile, upload and cloud time (stacked), energy on a second axis, the chosen cut marked.

    ``result`` is the mobile-cloud ``PartitionResult.to_dict()`` (its ``details``).
    """
    details = result.get("details", result)
    curve = [c for c in details.get("curve", []) if c.get("feasible", True)]
    x = [c["position"] for c in curve]
    labels = [c["cut"] for c in curve]
    data = []
    for key, name, color in (
        ("mobile_ms", "mobile", "#4c78a8"),
        ("transfer_ms", "upload", "#9d9d9d"),
        ("cloud_ms", "cloud", "#f58518"),
    ):
        data.append(
            {
                "type": "bar",
                "name": name,
                "x": x,
                "y": [c[key] for c in curve],
                "customdata": labels,
                "marker": {"color": color},
                "hovertemplate": f"cut %{{customdata}}<br>{name}: %{{y:.3f}} ms<extra></extra>",
            }
        )
    if any(c.get("energy_j") is not None for c in curve):
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "energy (J)",
                "x": x,
                "y": [c.get("energy_j") for c in curve],
                "yaxis": "y2",
                "customdata": labels,
                "line": {"color": _BASELINE},
                "hovertemplate": "cut %{customdata}<br>%{y:.4f} J<extra></extra>",
            }
        )
    best = details.get("best_cut") or {}
    shapes = [_vline(best["position"], _BEST, "dash")] if "position" in best else []
    objective = details.get("objective", "latency")
    title = (
        f"Mobile-cloud split over {details.get('network', '?')}, {objective}-first "
        f"(predicted): best cut {best.get('cut', '?')}"
    )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 420,
            "barmode": "stack",
            "title": {"text": title},
            "xaxis": {
                "title": {"text": "cut (ops on the mobile unit)"},
                "tickvals": x[:: max(1, len(x) // 12)],
                "ticktext": labels[:: max(1, len(x) // 12)],
            },
            "yaxis": {"title": {"text": "latency (ms)"}, "rangemode": "tozero"},
            "yaxis2": {
                "title": {"text": "energy (J)"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
            },
            "shapes": shapes,
            "legend": {"orientation": "h", "y": -0.25},
        },
    }


def _vline(x: float, color: str, dash: str) -> dict:
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": {"color": color, "dash": dash, "width": 1.5},
    }


def _hline(y: float, xref: str, yref: str, color: str) -> dict:
    return {
        "type": "line",
        "xref": f"{xref} domain",
        "yref": yref,
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": color, "dash": "dot", "width": 1.5},
    }
