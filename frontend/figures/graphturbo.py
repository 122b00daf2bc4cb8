"""Figures for GraphTurbo's plan on a DSA (the partition stage's ``graphturbo`` result):
kernels against one per layer, off-core bytes by level pair, the Fig. 15 ablation, the
instance graph coloured by subgraph, the per-core / per-cluster / DMA Gantt and the local
buffer's occupancy over time. Bytes come from the planner's replay and times from the
target's numbers: predicted."""

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


_SUBGRAPH_COLORS = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6",
    "#9d755d", "#bab0ac",
)  # fmt: skip


def _subgraph_color(g: int) -> str:
    return _SUBGRAPH_COLORS[g % len(_SUBGRAPH_COLORS)]


def instance_graph(plan: dict) -> dict:
    """Instances (x: their subgraph, y: their index in it), coloured by subgraph, with the
    edges kept after removing the redundant ones."""
    ig = plan["instance_graph"]
    groups, index = ig["group"], ig["index"]
    counts: dict[int, int] = {}
    for g in groups:
        counts[g] = counts.get(g, 0) + 1
    ys = [i - (counts[g] - 1) / 2 for g, i in zip(groups, index, strict=True)]
    edge_x, edge_y = [], []
    for p, q in ig["edges"]:
        edge_x += [groups[p], groups[q], None]
        edge_y += [ys[p], ys[q], None]
    names = {s["id"]: s["nodes"][0] for s in plan.get("subgraphs", [])}
    data = [
        {
            "type": "scatter",
            "mode": "lines",
            "x": edge_x,
            "y": edge_y,
            "line": {"color": "#c8c8c8", "width": 1},
            "hoverinfo": "skip",
            "showlegend": False,
        },
        {
            "type": "scatter",
            "mode": "markers",
            "x": groups,
            "y": ys,
            "marker": {"color": [_subgraph_color(g) for g in groups], "size": 10,
                       "line": {"width": 0.5, "color": "#fff"}},
            "customdata": [[g, i, names.get(g, "")] for g, i in zip(groups, index, strict=True)],
            "hovertemplate": "subgraph %{customdata[0]} (from %{customdata[2]}), "
            "instance %{customdata[1]}<extra></extra>",
            "showlegend": False,
        },
    ]  # fmt: skip
    edges = plan.get("edges", {})
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 420,
            "title": {
                "text": f"Instance graph: {len(groups)} instances of {plan['kernels']} subgraphs, "
                f"{edges.get('kept', len(ig['edges']))} edges kept of {edges.get('total', '?')}"
            },
            "xaxis": {"title": {"text": "subgraph (kernel)"}, "dtick": 1},
            "yaxis": {"title": {"text": "instance"}, "zeroline": False},
        },
    }


def instance_gantt(plan: dict) -> dict:
    """Per-core, per-cluster and DMA lanes of the timeline: each instance on its cluster and
    its cores in its subgraph's colour, its DMA (and hidden prefetch) on the cluster's DMA
    lane."""
    t = plan["timeline"]
    rows = t["instances"]
    lanes = (
        [f"core {c}" for c in range(t["cores"])]
        + [f"cluster {k}" for k in range(t["clusters"])]
        + [f"DMA {k}" for k in range(t["clusters"])]
    )
    data = []
    core_y, core_base, core_x, core_color, core_info = [], [], [], [], []
    for r in rows:
        for c in range(*r["cores"]):
            core_y.append(f"core {c}")
            core_base.append(r["compute_start_us"] / 1e3)
            core_x.append((r["end_us"] - r["compute_start_us"]) / 1e3)
            core_color.append(_subgraph_color(r["group"]))
            core_info.append([r["group"], r["index"]])
    data.append(_bars("compute on cores", core_y, core_base, core_x, core_color, core_info))
    data.append(
        _bars(
            "instance on cluster",
            [f"cluster {r['cluster']}" for r in rows],
            [r["start_us"] / 1e3 for r in rows],
            [(r["end_us"] - r["start_us"]) / 1e3 for r in rows],
            [_subgraph_color(r["group"]) for r in rows],
            [[r["group"], r["index"]] for r in rows],
        )
    )
    dma = [r for r in rows if r["dma_us"] > 0]
    data.append(
        _bars(
            "DMA (inputs, spills, exposed weights)",
            [f"DMA {r['cluster']}" for r in dma],
            [(r["start_us"] + r["launch_us"]) / 1e3 for r in dma],
            [r["dma_us"] / 1e3 for r in dma],
            ["#7f7f7f"] * len(dma),
            [[r["group"], r["index"]] for r in dma],
        )
    )
    hidden = [r for r in rows if r["prefetch_us"] > 0]
    data.append(
        {
            **_bars(
                "weight prefetch (hidden)",
                [f"DMA {r['cluster']}" for r in hidden],
                [r["prefetch_start_us"] / 1e3 for r in hidden],
                [r["prefetch_us"] / 1e3 for r in hidden],
                ["#bdbdbd"] * len(hidden),
                [[r["group"], r["index"]] for r in hidden],
            ),
            "opacity": 0.6,
        }
    )
    return {
        "data": data,
        "layout": {
            **_LAYOUT,
            "height": 160 + 14 * len(lanes),
            "barmode": "overlay",
            "title": {
                "text": f"Timeline (predicted): {t['makespan_us'] / 1e3:.3f} ms as a list schedule "
                f"of the chosen order; the replay's latency is {t['replay_latency_us'] / 1e3:.3f} ms"
            },
            "xaxis": {"title": {"text": "time (ms)"}, "rangemode": "tozero"},
            "yaxis": {
                "type": "category",
                "categoryorder": "array",
                "categoryarray": lanes[::-1],
                "tickfont": {"size": 9},
            },
            "legend": {"orientation": "h", "y": -0.08},
        },
    }


def local_occupancy(plan: dict) -> dict:
    """The local buffer in use (every core's pooled) when each instance starts."""
    t = plan["timeline"]
    rows = sorted(t["instances"], key=lambda r: r["start_us"])
    total = t["local_total_bytes"]
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv", "color": _PLAN},
                "x": [r["start_us"] / 1e3 for r in rows] + [t["makespan_us"] / 1e3],
                "y": [100 * r["occupancy_bytes"] / total for r in rows]
                + [100 * rows[-1]["occupancy_bytes"] / total if rows else 0],
                "customdata": [[r["occupancy_bytes"], r["group"], r["index"]] for r in rows],
                "hovertemplate": "%{y:.1f}% (%{customdata[0]:,} bytes) at instance "
                "%{customdata[1]}.%{customdata[2]}<extra></extra>",
                "name": "in use",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": f"Local buffer occupancy over time (of {total:,} bytes, all cores)"},
            "xaxis": {"title": {"text": "time (ms)"}, "rangemode": "tozero"},
            "yaxis": {"title": {"text": "% of the local buffers"}, "range": [0, 105]},
        },
    }


def _bars(name, ys, bases, widths, colors, info) -> dict:
    return {
        "type": "bar",
        "orientation": "h",
        "name": name,
        "y": ys,
        "base": bases,
        "x": widths,
        "marker": {"color": colors, "line": {"width": 0.3, "color": "#fff"}},
        "customdata": info,
        "hovertemplate": "subgraph %{customdata[0]}, instance %{customdata[1]}<br>"
        "%{base:.4f} ms + %{x:.4f} ms<extra>" + name + "</extra>",
    }


def graphturbo_figures(plan: dict) -> dict[str, dict]:
    """Every GraphTurbo figure of a valid plan, by name (the timeline's three need the
    target's throughput and bandwidths: without them there is no timeline)."""
    if not plan.get("valid"):
        return {}
    figures = {
        "gt_kernels": kernel_counts(plan),
        "gt_offcore": offcore_bytes(plan),
        "gt_ablation": ablation_bars(plan),
    }
    if plan.get("instance_graph"):
        figures["gt_instances"] = instance_graph(plan)
    if plan.get("timeline"):
        figures["gt_gantt"] = instance_gantt(plan)
        figures["gt_occupancy"] = local_occupancy(plan)
    return figures
