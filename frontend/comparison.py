"""How a comparison of runs appears on the compare page and in its HTML export."""

from __future__ import annotations

from frontend.figures.compare import memory_overlay, ops_bars, schedule_bars
from frontend.units import format_delta, format_figure


def comparison_context(comparison: dict) -> dict:
    """Template context: the headline rows formatted, kernel rows, the figures."""
    rows = []
    for row in comparison["figures"]:
        cells = []
        for i, value in enumerate(row["values"]):
            cell = {"text": "—" if value is None else format_figure(value["value"], row["unit"])}
            if i > 0:
                d = row["deltas"][i - 1]
                cell.update(delta=format_delta(d), direction=d["direction"])
            cells.append(cell)
        bases = dict.fromkeys(v["basis"] for v in row["values"] if v is not None)
        rows.append(
            {"key": row["key"], "label": row["label"], "cells": cells, "basis": " / ".join(bases)}
        )
    kernel_rows = [
        {
            "kernel": k["kernel"],
            "cells": ["—" if v is None else f"{v:.1f}" for v in k["us_per_call"]]
            + [
                format_delta({"pct": d, "direction": ""}) if d is not None else ""
                for d in k["delta_pct"]
            ],
        }
        for k in comparison["kernels"]["rows"]
    ]
    return {
        "comparison": comparison,
        "runs": comparison["runs"],
        "ids": ",".join(str(r["id"]) for r in comparison["runs"]),
        "rows": rows,
        "kernel_rows": kernel_rows,
        "agreement": [
            {"run": run["id"], **a}
            for run, a in zip(
                comparison["runs"][1:], comparison["schedules"]["placement_agreement"], strict=True
            )
            if a is not None
        ],
        "figures": {
            "ops": ops_bars(comparison),
            "memory": memory_overlay(comparison),
            "schedules": schedule_bars(comparison),
        },
    }
