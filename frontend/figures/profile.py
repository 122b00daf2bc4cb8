"""Figures for the profile stage: data (a profile's ``to_dict()``) in, plotly figure dict out.

Every title says whether its numbers were measured (where, how many runs) or predicted (by
which cost model, for which target and unit).
"""

from __future__ import annotations

_LAYOUT = {
    "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
    "height": 420,
    "template": "plotly_white",
}
_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6"]


def basis_label(profile: dict, unit: str | None = None) -> str:
    """``measured on <cpu>, median of N runs`` or ``predicted for <target>/<unit> by <model>``."""
    if profile.get("measured"):
        machine = profile.get("environment", {}).get("machine", {}).get("cpu_model", "this CPU")
        return f"measured on {machine}, median of {profile.get('runs', '?')} runs"
    unit = unit or profile.get("best_unit") or "?"
    return f"predicted for {profile.get('target')}/{unit} by {profile.get('model')}"


def op_latencies(profile: dict, unit: str | None = None) -> list[dict]:
    """``[{name, op_type, latency_us, flops, bytes}]`` for the ops that have a latency."""
    rows = []
    for op in profile.get("ops", []):
        if profile.get("measured"):
            latency = op.get("latency_us")
        else:
            latency = op.get("latency_us", {}).get(unit or profile.get("best_unit"))
        if latency:
            row = {k: op.get(k) for k in ("name", "op_type", "flops", "bytes")}
            rows.append({**row, "latency_us": latency})
    return rows


def op_latency_bars(profile: dict, top: int = 20, unit: str | None = None) -> dict:
    """The ``top`` slowest ops as horizontal bars, slowest on top, coloured by op type."""
    rows = sorted(op_latencies(profile, unit), key=lambda r: -r["latency_us"])[:top]
    total = sum(r["latency_us"] for r in op_latencies(profile, unit)) or 1.0
    types = sorted({r["op_type"] for r in rows})
    data = []
    for i, op_type in enumerate(types):
        mine = [r for r in reversed(rows) if r["op_type"] == op_type]
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": op_type,
                "y": [r["name"] for r in mine],
                "x": [r["latency_us"] / 1e3 for r in mine],
                "customdata": [100.0 * r["latency_us"] / total for r in mine],
                "marker": {"color": _COLORS[i % len(_COLORS)]},
                "hovertemplate": "%{y}: %{x:.3f} ms (%{customdata:.1f}%)<extra>"
                + op_type
                + "</extra>",
            }
        )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": max(320, 24 * len(rows) + 120),
            "title": {"text": f"Slowest {len(rows)} ops ({basis_label(profile, unit)})"},
            "xaxis": {"title": {"text": "latency (ms)"}},
            "yaxis": {
                "categoryorder": "array",
                "categoryarray": [r["name"] for r in reversed(rows)],
                "automargin": True,
            },
            "barmode": "stack",
        },
    }


def roofline(profile: dict, roofs: dict | None = None, unit: str | None = None) -> dict:
    """Ops by arithmetic intensity (FLOPs/byte) against achieved GFLOPS (FLOPs / latency),
    under the unit's roofs: ``roofs = {"peak_gflops", "mem_bw_gbps"}`` (for a predicted
    profile they are read from the unit when not given)."""
    if roofs is None and not profile.get("measured"):
        name = unit or profile.get("best_unit")
        found = next((u for u in profile.get("units", []) if u["name"] == name), None)
        if found:
            roofs = {
                "peak_gflops": found.get("peak_gflops"),
                "mem_bw_gbps": found.get("mem_bw_gbps"),
            }
    rows = [r for r in op_latencies(profile, unit) if r.get("flops") and r.get("bytes")]
    by_type: dict[str, list[dict]] = {}
    for r in rows:
        by_type.setdefault(r["op_type"], []).append(r)
    data = []
    for i, (op_type, mine) in enumerate(sorted(by_type.items())):
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": op_type,
                "x": [r["flops"] / r["bytes"] for r in mine],
                "y": [r["flops"] / r["latency_us"] / 1e3 for r in mine],
                "text": [r["name"] for r in mine],
                "marker": {"color": _COLORS[i % len(_COLORS)], "size": 8, "opacity": 0.8},
                "hovertemplate": "%{text}<br>%{x:.2f} FLOP/B, %{y:.2f} GFLOPS<extra>"
                + op_type
                + "</extra>",
            }
        )
    intensities = [r["flops"] / r["bytes"] for r in rows] or [1.0]
    # Measured roofs (engine.profiling.roofs) name the dtype: peak_gflops_fp32.
    peak = (roofs or {}).get("peak_gflops") or (roofs or {}).get("peak_gflops_fp32")
    bandwidth = (roofs or {}).get("mem_bw_gbps")
    if peak and bandwidth:
        ridge = peak / bandwidth
        lo, hi = min(min(intensities) / 2, ridge / 4), max(max(intensities) * 2, ridge * 4)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"roof: {peak:.0f} GFLOPS, {bandwidth:.1f} GB/s",
                "x": [lo, ridge, hi],
                "y": [bandwidth * lo, peak, peak],
                "line": {"color": "#333", "dash": "dash"},
                "hoverinfo": "skip",
            }
        )
        roof_text = ""
    else:
        roof_text = ", roofs unknown"
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "title": {"text": f"Roofline ({basis_label(profile, unit)}{roof_text})"},
            "xaxis": {"title": {"text": "arithmetic intensity (FLOP/byte)"}, "type": "log"},
            "yaxis": {"title": {"text": "achieved GFLOPS"}, "type": "log"},
        },
    }


def sweep_chart(sweep: dict) -> dict:
    """Median latency (p90 as the error bar) per setting; for batch, throughput too."""
    points = sorted((p for p in sweep["points"] if p["status"] == "ok"), key=lambda p: p["value"])
    x = [p["value"] for p in points]
    median = [p["latency_ms"]["median"] for p in points]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "median latency",
            "x": x,
            "y": median,
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": [p["latency_ms"]["p90"] - m for p, m in zip(points, median, strict=True)],
                "arrayminus": [0] * len(points),
            },
            "marker": {"color": _COLORS[0]},
            "hovertemplate": f"{sweep['kind']} %{{x}}: %{{y:.3f}} ms<extra>median, bar p90</extra>",
        }
    ]
    machine = sweep.get("environment", {}).get("machine", {}).get("cpu_model", "this CPU")
    knob = "intra-op threads" if sweep["kind"] == "threads" else "batch size"
    layout = {
        **_LAYOUT,
        "title": {"text": f"Latency by {sweep['kind']} (measured on {machine})"},
        "xaxis": {"title": {"text": knob}, "type": "log", "tickvals": x},
        "yaxis": {"title": {"text": "latency (ms)"}, "rangemode": "tozero"},
    }
    if sweep["kind"] == "batch":
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "throughput",
                "x": x,
                "y": [p["throughput_per_s"] for p in points],
                "yaxis": "y2",
                "marker": {"color": _COLORS[1]},
                "hovertemplate": "batch %{x}: %{y:.1f} inferences/s<extra>throughput</extra>",
            }
        )
        layout["yaxis2"] = {
            "title": {"text": "inferences / s"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
        }
    failed = [p for p in sweep["points"] if p["status"] != "ok"]
    if failed:
        text = "failed: " + ", ".join(f"{sweep['kind']} {p['value']}" for p in failed)
        layout["annotations"] = [
            {"text": text, "xref": "paper", "yref": "paper", "x": 0, "y": 1.08, "showarrow": False}
        ]
    return {"data": data, "layout": layout}


def unit_comparison(predicted: dict) -> dict:
    """Whole-model latency per unit of a predicted profile; units that cannot run every op
    are hatched and say how many ops they miss."""
    units = [u for u in predicted.get("units", []) if u.get("latency_ms") is not None]
    return {
        "data": [
            {
                "type": "bar",
                "x": [u["name"] for u in units],
                "y": [u["latency_ms"] for u in units],
                "text": [_missing(u) for u in units],
                "marker": {
                    "color": [_COLORS[0] if u["complete"] else "#bbbbbb" for u in units],
                    "pattern": {"shape": ["" if u["complete"] else "/" for u in units]},
                },
                "hovertemplate": "%{x}: %{y:.3f} ms %{text}<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {
                "text": f"Whole-model latency per unit (predicted for {predicted.get('target')} "
                f"by {predicted.get('model')})"
            },
            "xaxis": {"title": {"text": "compute unit"}},
            "yaxis": {"title": {"text": "latency (ms)"}},
        },
    }


def _missing(unit: dict) -> str:
    missing = len(unit["unsupported"]) + len(unit["unknown"]) + len(unit["not_costed"])
    return "" if unit["complete"] else f"{missing} ops missing"


def profile_figures(profile: dict, roofs: dict | None = None) -> dict[str, dict]:
    figures = {"top_ops": op_latency_bars(profile), "roofline": roofline(profile, roofs)}
    if not profile.get("measured"):
        figures["units"] = unit_comparison(profile)
    return figures
