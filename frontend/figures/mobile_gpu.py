"""Figures and table rows for the mobile-GPU analysis of a predicted profile (its
``mobile_gpu`` section, :mod:`engine.profiling.mobile_gpu`): data in, plotly dict out.

Every title says the numbers are predicted from the TFLite GPU delegate's layout rules.
"""

from __future__ import annotations

_LAYOUT = {"margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "template": "plotly_white"}
TOP = 25
"""Tensors shown in the waste chart."""


def basis(section: dict) -> str:
    return f"{section.get('basis', 'predicted')}, {section.get('api')} on {section.get('unit')}"


def phwc4_waste_bars(section: dict, top: int = TOP) -> dict:
    """The ``top`` tensors with the most PHWC4 padding: their data and the zero channels
    padded onto it, stacked, with the waste share in the hover."""
    padded = [t for t in section.get("tensors", []) if t["layout"] and t["layout"]["waste_bytes"]]
    rows = sorted(padded, key=lambda t: -t["layout"]["waste_bytes"])[:top]
    rows.reverse()  # largest on top
    names = [t["name"] for t in rows]
    shares = [100 * t["layout"]["waste_fraction"] for t in rows]
    channels = [t["layout"]["bhwc"]["c"] for t in rows]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "data",
            "y": names,
            "x": [t["layout"]["bytes"] / 1e6 for t in rows],
            "marker": {"color": "#4c78a8"},
            "hovertemplate": "%{y}: %{x:.3f} MB of data<extra></extra>",
        },
        {
            "type": "bar",
            "orientation": "h",
            "name": "padding (zero channels)",
            "y": names,
            "x": [t["layout"]["waste_bytes"] / 1e6 for t in rows],
            "customdata": [[s, c] for s, c in zip(shares, channels, strict=True)],
            "marker": {"color": "#e45756"},
            "hovertemplate": "%{y}: C=%{customdata[1]}, %{x:.3f} MB padding "
            "(%{customdata[0]:.0f}% of the buffer)<extra></extra>",
        },
    ]
    layout = {
        **_LAYOUT,
        "height": max(300, 22 * len(rows) + 140),
        "barmode": "stack",
        "title": {"text": f"PHWC4 buffers with channel padding ({basis(section)})"},
        "xaxis": {"title": {"text": "bytes (MB)"}},
        "yaxis": {"automargin": True, "categoryorder": "array", "categoryarray": names},
    }
    if not rows:
        layout["annotations"] = [
            {
                "text": "no padding: every GPU tensor's channel count is a multiple of 4",
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "showarrow": False,
            }
        ]
    return {"data": data, "layout": layout}


def partition_rows(section: dict) -> list[dict]:
    """One row per GPU partition: its nodes, kernels and the bytes crossing into and out
    of it (None when a crossing's size is unknown)."""
    kernels: dict[int, int] = {}
    for k in section.get("kernels", []):
        kernels[k["partition"]] = kernels.get(k["partition"], 0) + 1
    rows = []
    for p in section.get("partitions", []):
        crossing = [b for b in section.get("boundaries", []) if b["partition"] == p["index"]]
        rows.append(
            {
                "index": p["index"],
                "size": p["size"],
                "first": p["nodes"][0],
                "last": p["nodes"][-1],
                "kernels": kernels.get(p["index"], 0),
                "in_bytes": _total(b for b in crossing if b["direction"] == "cpu->gpu"),
                "out_bytes": _total(b for b in crossing if b["direction"] == "gpu->cpu"),
            }
        )
    return rows


def _total(boundaries) -> int | None:
    sizes = [b["bytes"] for b in boundaries]
    return None if None in sizes else sum(sizes)


def kernel_rows(section: dict, top: int = TOP) -> list[dict]:
    """The kernels with the most stub threads (grid rounding)."""
    rows = [k for k in section.get("kernels", []) if k["grid"]]
    return sorted(rows, key=lambda k: -k["grid"]["stub_threads"])[:top]


def support_rows(section: dict) -> list[dict]:
    """The op-support table with one cell per API, in ``section["apis"]`` order."""
    apis = section.get("apis", [])
    return [{**r, "cells": [r.get(api, False) for api in apis]} for r in section.get("support", [])]
