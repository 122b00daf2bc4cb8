"""Figures for NN-Stretch's plan (the partition stage's ``nn-stretch`` result): the branch
design table, the branched graph coloured by processor, the spatial schedule, the
candidates left after each constraint, and the predicted speedup next to the measured one.

Times are predicted by the shared simulator from the model the result names; a measured
figure says where it was measured (machine, runs, threads). Nothing here is an accuracy:
the branched model must be retrained first.
"""

from __future__ import annotations

from frontend.units import format_bytes

_LAYOUT = {"template": "plotly_white", "margin": {"l": 110, "r": 30, "t": 60, "b": 60}}
_PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#eeca3b")
_HOME, _LINK, _BARRIER = "#8c8c8c", "#9d9d9d", "#333333"
_ROLE_SYMBOL = {"head": "square", "tail": "square", "meet": "diamond", "restore": "triangle-up"}


def unit_colors(plan: dict) -> dict[str, str]:
    """One colour per processor, in the plan's unit order."""
    return {u: _PALETTE[k % len(_PALETTE)] for k, u in enumerate(plan.get("units", []))}


def design_rows(plan: dict) -> list[dict]:
    """The branch design table: a row per branch of every segment."""
    rows = []
    for s in plan["design"]["segments"]:
        for k, b in enumerate(s["branches"]):
            rows.append(
                {
                    "segment": s["segment"],
                    "first": k == 0,
                    "span": len(s["branches"]),
                    "stages": ", ".join(str(x) for x in s["stages"]),
                    "meeting_point": s["meeting_point"],
                    "original": f"({s['depth']}, {s['width']})",
                    "unit": b["unit"],
                    "branch": f"({b['depth']}, {b['width']})",
                    "depth_ratio": b["depth_ratio"],
                    "width_ratio": b["width_ratio"],
                    "restore": b["restore_channels"],
                    "flops_share": b["flops_share"],
                    "throughput_share": b["throughput_share"],
                    "latency_ms": b["latency_ms"],
                    "straggler_ratio": b["straggler_ratio"],
                    "comm_ms": b["comm_in_ms"] + b["comm_out_ms"],
                    "segment_comm_ratio": s["constraints"]["comm_over_segment"],
                    "capacity": s["constraints"]["capacity"],
                }
            )
    return rows


def candidate_funnel(plan: dict) -> dict:
    """Candidates left after each step, on a log scale (log10 of the count)."""
    steps = plan["candidate_counts"]
    colors = {"space": "#9d9d9d", "accuracy": "#54a24b", "latency": "#4c78a8", "search": "#f58518"}
    return {
        "data": [
            {
                "type": "bar",
                "orientation": "h",
                "y": [s["step"] for s in steps],
                "x": [s["log10"] if s["log10"] is not None else 0 for s in steps],
                "text": [_count_text(s["count"]) for s in steps],
                "textposition": "outside",
                "marker": {"color": [colors.get(s["kind"], "#4c78a8") for s in steps]},
                "customdata": [[s["kind"], s["detail"]] for s in steps],
                "hovertemplate": "%{y} (%{customdata[0]}): %{text} designs<br>"
                "%{customdata[1]}<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "margin": {"l": 260, "r": 60, "t": 60, "b": 50},
            "height": 120 + 32 * len(steps),
            "title": {"text": "Design space after each constraint (counted exactly)"},
            "xaxis": {"title": {"text": "log10(designs)"}, "rangemode": "tozero"},
            "yaxis": {"autorange": "reversed", "type": "category"},
        },
    }


def branched_graph(plan: dict) -> dict:
    """The branched model's nodes by depth (x) and lane (y: head, tail and meeting points
    on the home lane, each branch on its processor's lane), coloured by processor."""
    g = plan["graph"]
    colors = unit_colors(plan)
    units = plan.get("units", [])
    home = plan.get("home")
    lane = {}
    for k, (role, branch) in enumerate(zip(g["role"], g["branch"], strict=True)):
        lane[k] = 0.0 if role in ("head", "tail", "meet") else 1.0 + (branch or 0)
    xs, ys = g["level"], [lane[k] for k in range(len(g["level"]))]
    edge_x, edge_y = [], []
    for p, q in g["edges"]:
        edge_x += [xs[p], xs[q], None]
        edge_y += [ys[p], ys[q], None]
    data = [
        {
            "type": "scattergl" if len(xs) > 1500 else "scatter",
            "mode": "lines",
            "x": edge_x,
            "y": edge_y,
            "line": {"color": "#c8c8c8", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
        }
    ]
    for unit in units:
        picked = [k for k, u in enumerate(g["unit"]) if u == unit]
        if not picked:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": unit + (" (home: head, meeting points, tail)" if unit == home else ""),
                "x": [xs[k] for k in picked],
                "y": [ys[k] for k in picked],
                "marker": {
                    "color": colors[unit],
                    "size": [11 if g["role"][k] == "meet" else 7 for k in picked],
                    "symbol": [_ROLE_SYMBOL.get(g["role"][k], "circle") for k in picked],
                    "line": {"width": 0.5, "color": "#fff"},
                },
                "customdata": [
                    [g["name"][k], g["op_type"][k], g["role"][k], _segment(g, k)] for k in picked
                ],
                "hovertemplate": "%{customdata[0]} (%{customdata[1]})<br>%{customdata[2]}"
                "%{customdata[3]}<extra>" + unit + "</extra>",
            }
        )
    branches = max((b for b in g["branch"] if b is not None), default=0) + 1
    ticks = [0.0] + [1.0 + b for b in range(branches)]
    labels = ["home"] + [f"branch {b}" for b in range(branches)]
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 200 + 70 * branches,
            "title": {
                "text": f"Branched model ({len(xs)} nodes): meeting points are diamonds, "
                "restore 1x1 convs triangles"
            },
            "xaxis": {"title": {"text": "depth (longest path from the input)"}},
            "yaxis": {"tickvals": ticks, "ticktext": labels, "autorange": "reversed"},
            "legend": {"orientation": "h", "y": -0.25},
        },
    }


def spatial_gantt(plan: dict) -> dict:
    """The simulator's schedule: a lane per processor, a lane per link (communication),
    barriers at the meeting points, head and tail shaded."""
    sched = plan["schedule"]
    colors = unit_colors(plan)
    units = sched["units"]
    links = sorted({t["link"] for t in sched["transfers"]})
    lanes = units + [f"comm {link}" for link in links]
    data = []
    groups = [
        (
            unit,
            colors[unit],
            [o for o in sched["ops"] if o["unit"] == unit and o["role"] not in ("head", "tail")],
        )
        for unit in units
    ]
    groups.append(("head and tail (unparallelised)", _HOME,
                   [o for o in sched["ops"] if o["role"] in ("head", "tail")]))  # fmt: skip
    for name, color, ops in groups:
        if not ops:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": name,
                "y": [o["unit"] for o in ops],
                "base": [o["start_us"] / 1e3 for o in ops],
                "x": [(o["finish_us"] - o["start_us"]) / 1e3 for o in ops],
                "marker": {"color": color, "line": {"width": 0.3, "color": "#fff"}},
                "customdata": [
                    [o["op"], o["op_type"], o["role"], o["start_us"] / 1e3, o["finish_us"] / 1e3]
                    for o in ops
                ],
                "hovertemplate": "%{customdata[0]} (%{customdata[1]}, %{customdata[2]})<br>"
                "%{customdata[3]:.3f} - %{customdata[4]:.3f} ms<extra>%{y}</extra>",
            }
        )
    if sched["transfers"]:
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": "communication",
                "y": [f"comm {t['link']}" for t in sched["transfers"]],
                "base": [t["start_us"] / 1e3 for t in sched["transfers"]],
                "x": [(t["finish_us"] - t["start_us"]) / 1e3 for t in sched["transfers"]],
                "marker": {"color": _LINK, "opacity": 0.7},
                "customdata": [[t["tensor"], format_bytes(t["bytes"])] for t in sched["transfers"]],
                "hovertemplate": "%{customdata[0]} (%{customdata[1]})<extra>%{y}</extra>",
            }
        )
    shapes = [
        {
            "type": "line", "xref": "x", "yref": "paper", "x0": b["at_us"] / 1e3,
            "x1": b["at_us"] / 1e3, "y0": 0, "y1": 1,
            "line": {"color": _BARRIER, "width": 1, "dash": "dot"},
        }
        for b in sched["barriers"]
    ]  # fmt: skip
    annotations = [
        {
            "x": b["at_us"] / 1e3, "y": 1.02, "xref": "x", "yref": "paper", "showarrow": False,
            "text": f"meet {b['segment']}", "font": {"size": 10},
        }
        for b in sched["barriers"]
    ]  # fmt: skip
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 140 + 40 * max(len(lanes), 1),
            "barmode": "overlay",
            "title": {
                "text": f"Spatial schedule (predicted, {plan['model']}): "
                f"{sched['makespan_ms']:.3f} ms; head and tail {sched['head_tail_share']:.0%}, "
                f"communication {sched['comm_share']:.0%} of it"
            },
            "xaxis": {"title": {"text": "time (ms)"}, "rangemode": "tozero"},
            "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": lanes[::-1]},
            "shapes": shapes,
            "annotations": annotations,
            "legend": {"orientation": "h", "y": -0.2},
        },
    }


def speedup_bars(plan: dict) -> dict:
    """Predicted speedup over the best single processor, and the measured one beside it
    where the target is this machine; each bar labelled with where it comes from."""
    labels = [f"predicted ({plan['model']})"]
    values = [plan["speedup"]]
    hover = [
        f"{plan['latency_ms']:.3f} ms vs {plan['best_single_unit_ms']:.3f} ms on "
        f"{plan['best_single_unit']} alone, simulated"
    ]
    colors = ["#4c78a8"]
    m = plan.get("measured")
    if m:
        machine = m["machine"]
        labels.append(
            f"measured ({machine['cpu_model']}, {m['reps']} runs, "
            f"{m['groups']} x {m['threads_per_group']} thread(s))"
        )
        values.append(m["speedup"])
        hover.append(
            f"{m['branched']['median_ms']:.3f} ms vs {m['original_one_group']['median_ms']:.3f} "
            f"ms (median, onnxruntime, load {m['load_average']['before']})"
        )
        colors.append("#f58518")
    return {
        "data": [
            {
                "type": "bar",
                "x": labels,
                "y": values,
                "text": [f"{v:.2f}x" for v in values],
                "textposition": "outside",
                "marker": {"color": colors},
                "customdata": hover,
                "hovertemplate": "%{x}: %{y:.2f}x<br>%{customdata}<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "height": 360,
            "title": {"text": f"Speedup over {plan['best_single_unit']} alone"},
            "yaxis": {"title": {"text": "speedup (x)"}, "rangemode": "tozero"},
            "shapes": [
                {
                    "type": "line",
                    "xref": "paper",
                    "x0": 0,
                    "x1": 1,
                    "yref": "y",
                    "y0": 1,
                    "y1": 1,
                    "line": {"color": "#e45756", "dash": "dash"},
                }
            ],  # fmt: skip
        },
    }


def nnstretch_figures(plan: dict) -> dict[str, dict]:
    """Every NN-Stretch figure of a valid plan, by name."""
    if not plan.get("valid"):
        return {}
    return {
        "ns_graph": branched_graph(plan),
        "ns_gantt": spatial_gantt(plan),
        "ns_candidates": candidate_funnel(plan),
        "ns_speedup": speedup_bars(plan),
    }


def _segment(g: dict, k: int) -> str:
    seg, branch = g["segment"][k], g["branch"][k]
    if seg is None:
        return ""
    return f", segment {seg}" + ("" if branch is None else f", branch {branch}")


def _count_text(count: int) -> str:
    if count < 1_000_000:
        return f"{count:,}"
    exponent = len(str(count)) - 1
    return f"{count / 10**exponent:.1f}e{exponent}"
