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


def schedule_bars(comparison: dict) -> dict | None:
    """Busy time per compute unit of each run's best partition plan, runs side by side,
    each run's makespan in its legend entry."""
    plans = [
        (run, plan)
        for run, plan in zip(comparison["runs"], comparison["schedules"]["plans"], strict=True)
        if plan is not None
    ]
    if not plans:
        return None
    units: list[str] = []
    for _, plan in plans:
        units += [u for u in plan["unit_busy_us"] if u not in units]
    data = [
        {
            "type": "bar",
            "name": f"{run['label']}: {plan['algorithm']}, makespan "
            + ("unknown" if plan["makespan_ms"] is None else f"{plan['makespan_ms']:.3f} ms"),
            "x": units,
            "y": [(plan["unit_busy_us"].get(u) or 0.0) / 1000.0 for u in units],
            "marker": {"color": _PALETTE[comparison["runs"].index(run) % len(_PALETTE)]},
            "hovertemplate": "%{x}: busy %{y:.3f} ms<extra>%{fullData.name}</extra>",
        }
        for run, plan in plans
    ]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "barmode": "group",
            "height": 360,
            "title": {"text": "Partition plans: busy time per compute unit (predicted)"},
            "yaxis": {"title": {"text": "busy (ms)"}},
            "legend": {"orientation": "h", "y": 1.15},
        },
    }


HISTORY_KEYS = (
    "profile.latency_ms",
    "compile.latency_ms",
    "compile.speed_vs_onnxruntime",
    "memory.arena_bytes",
    "accuracy.cosine",
    "partition.makespan_ms",
)


def history_lines(history: dict, keys: tuple[str, ...] = HISTORY_KEYS) -> dict | None:
    """One small panel per headline figure over the model's runs (x: when the run was
    made): one line per target and kind (measured or predicted), so a change of target or
    of method is not drawn as a regression; the pinned baseline's value dashed."""
    panels = []
    for key in keys:
        lines: dict[tuple, list] = {}
        for h in history["runs"]:
            figure = h["figures"].get(key) or {}
            value = figure.get("value")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue  # unknown or not a number: no point
            group = (h["target"], bool(figure.get("measured")))
            lines.setdefault(group, []).append((h["created_at"], value, h["run"]))
        if lines:
            panels.append((key, lines))
    if not panels:
        return None
    n = len(panels)
    gap = 0.08
    height = (1.0 - gap * (n - 1)) / n
    baseline = history.get("baseline")
    data, shapes, axes = [], [], {}
    colors: dict[tuple, str] = {}
    for i, (key, lines) in enumerate(panels):
        axis = "" if i == 0 else str(i + 1)
        top = 1.0 - i * (height + gap)
        axes[f"yaxis{axis}"] = {
            "domain": [top - height, top],
            "title": {"text": key, "font": {"size": 11}},
            "rangemode": "tozero",
        }
        axes[f"xaxis{axis}"] = {"anchor": f"y{axis}", "type": "date"}
        if i:
            axes[f"xaxis{axis}"]["matches"] = "x"
        for group, points in lines.items():
            target, measured = group
            color = colors.setdefault(group, _PALETTE[len(colors) % len(_PALETTE)])
            name = f"{target}, {'measured' if measured else 'predicted'}"
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": name,
                    "legendgroup": name,
                    "showlegend": i == 0 or group not in {g for _, ls in panels[:i] for g in ls},
                    "x": [p[0] for p in points],
                    "y": [p[1] for p in points],
                    "customdata": [p[2] for p in points],
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "marker": {
                        "color": color,
                        "size": [12 if p[2] == baseline else 7 for p in points],
                        "symbol": ["star" if p[2] == baseline else "circle" for p in points],
                    },
                    "line": {"color": color, "dash": "solid" if measured else "dot"},
                    "hovertemplate": "run %{customdata}<br>%{y:.4g}"
                    f"<extra>{key}: {name}</extra>",
                }
            )
            base = next((p[1] for p in points if p[2] == baseline), None)
            if base is not None:
                shapes.append(
                    {
                        "type": "line",
                        "xref": f"x{axis} domain",
                        "yref": f"y{axis}",
                        "x0": 0,
                        "x1": 1,
                        "y0": base,
                        "y1": base,
                        "line": {"dash": "dash", "color": "#888", "width": 1},
                    }
                )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "margin": {"l": 90, "r": 20, "t": 60, "b": 40},
            "height": 140 * n + 80,
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom"},
            "title": {"text": "History: headline figures per run (star: the pinned baseline)"},
            "shapes": shapes,
            **axes,
        },
    }
