"""The energy-vs-latency trade-off of the partition stage (its ``trade_off`` entry).

Every point is a plan, its makespan and energy predicted by the shared schedule simulator
from the target's cost model and power figures (none is measured); the Pareto front joins
the plans no other beats on both, and each compared algorithm's plan is marked by name so
a user sees whether it sits on the front or could be cheaper at the same speed.
"""

from __future__ import annotations

_LAYOUT = {"margin": {"l": 80, "r": 20, "t": 70, "b": 60}, "template": "plotly_white"}
_FRONT, _CANDIDATE, _BEST = "#4c78a8", "#c7c7c7", "#54a24b"
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "pentagon")


def trade_off_curve(report: dict) -> dict | None:
    """Scatter of every candidate plan, the front as a line, the compared plans marked; the
    best for the run's objective in green. ``None`` when the report has no trade-off."""
    trade = report.get("trade_off") or {}
    if not trade.get("available"):
        return None
    points, front = trade.get("points", []), trade.get("front", [])
    data = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "other plans (sweep)",
            "x": [p["makespan_ms"] for p in points],
            "y": [p["energy_mj"] for p in points],
            "customdata": [[p["algorithm"], _weight(p["weight"])] for p in points],
            "marker": {"color": _CANDIDATE, "size": 7},
            "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>%{x:.3f} ms, "
            "%{y:.3f} mJ<extra></extra>",
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "Pareto front",
            "x": [p["makespan_ms"] for p in front],
            "y": [p["energy_mj"] for p in front],
            "customdata": [[p["algorithm"], _weight(p["weight"])] for p in front],
            "line": {"color": _FRONT, "shape": "hv"},
            "marker": {"color": _FRONT, "size": 8},
            "hovertemplate": "front: %{customdata[0]} (%{customdata[1]})<br>%{x:.3f} ms, "
            "%{y:.3f} mJ<extra></extra>",
        },
    ]
    best = report.get("best")
    for k, (name, plan) in enumerate(trade.get("plans", {}).items()):
        where = "on the front" if plan["on_front"] else "dominated"
        data.append(
            {
                "type": "scatter",
                "mode": "markers+text",
                "name": f"{name}{' (best)' if name == best else ''}",
                "x": [plan["makespan_ms"]],
                "y": [plan["energy_mj"]],
                "text": [name],
                "textposition": "top center",
                "marker": {
                    "symbol": _SYMBOLS[k % len(_SYMBOLS)],
                    "size": 13 if name == best else 11,
                    "color": _BEST if name == best else "rgba(0,0,0,0)",
                    "line": {"color": "#333", "width": 1.5},
                },
                "hovertemplate": f"{name}, {where}<br>%{{x:.3f}} ms, %{{y:.3f}} mJ<extra></extra>",
            }
        )
    objective = (report.get("objective_detail") or {}).get("description", "latency-first")
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 460,
            "title": {
                "text": "Energy vs latency of the plans (predicted)"
                f"<br><sup>objective {objective}; {trade.get('method', '')}</sup>"
            },
            "xaxis": {"title": {"text": "makespan, predicted (ms)"}, "rangemode": "tozero"},
            "yaxis": {"title": {"text": "energy, predicted (mJ)"}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.2},
        },
    }


def _weight(weight) -> str:
    if weight == "compared":
        return "compared plan"
    return f"latency weight {weight:g}"
