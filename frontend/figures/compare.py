"""Figures of a comparison of runs (``engine.report.compare``): per-op latency side by side
and the memory curves overlaid. Pure: comparison dict in, Plotly figure dict out."""

from __future__ import annotations

_LAYOUT = {"margin": {"l": 70, "r": 20, "t": 50, "b": 120}, "template": "plotly_white"}
_TOP_OPS = 25
_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b", "#9d755d")


def ops_bars(comparison: dict, top: int = _TOP_OPS) -> dict | None:
    """The ``top`` slowest aligned ops, one bar per run, the reference's names on the axis."""
    rows = comparison["ops"]["rows"][:top]
    if not rows:
        return None
    data = [
        {
            "type": "bar",
            "name": run["label"],
            "marker": {"color": _PALETTE[i % len(_PALETTE)]},
            "x": [r["name"] for r in rows],
            "y": [r["latency_us"][i] for r in rows],
            "customdata": [[r["op_type"], r["names"][i] or "not aligned"] for r in rows],
            "hovertemplate": "%{customdata[1]} (%{customdata[0]})<br>%{y:.1f} us"
            "<extra>%{fullData.name}</extra>",
        }
        for i, run in enumerate(comparison["runs"])
    ]
    method = comparison["ops"].get("method") or ""
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "barmode": "group",
            "height": 420,
            "title": {"text": f"Slowest ops, aligned {method}"},
            "yaxis": {"title": {"text": "latency per op (us)"}},
            "legend": {"orientation": "h", "y": 1.12},
        },
    }


def memory_overlay(comparison: dict) -> dict | None:
    """Each run's live bytes per op, one line per run, with its best arena dashed."""
    curves = [
        (run, curve)
        for run, curve in zip(comparison["runs"], comparison["memory"], strict=True)
        if curve is not None
    ]
    if len(curves) < 1:
        return None
    data = []
    for run, curve in curves:
        index = comparison["runs"].index(run)
        color = _PALETTE[index % len(_PALETTE)]
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{run['label']}: live bytes",
                "x": list(range(len(curve["live_bytes"]))),
                "y": curve["live_bytes"],
                "line": {"shape": "hv", "color": color},
                "hovertemplate": "op %{x}<br>%{y:,} bytes live<extra>%{fullData.name}</extra>",
            }
        )
        if curve.get("arena_bytes") is not None:
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{run['label']}: arena",
                    "x": [0, max(len(curve["live_bytes"]) - 1, 1)],
                    "y": [curve["arena_bytes"]] * 2,
                    "line": {"dash": "dash", "color": color},
                    "hovertemplate": "arena %{y:,} bytes<extra>%{fullData.name}</extra>",
                }
            )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 380,
            "title": {"text": "Live bytes per op (planned from shapes), runs overlaid"},
            "xaxis": {"title": {"text": "op index (execution order)"}},
            "yaxis": {"title": {"text": "bytes"}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": 1.12},
        },
    }
