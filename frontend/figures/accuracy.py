"""Figures for the accuracy stage, from the report's JSON (``AccuracyReport.to_dict()``).

Numbers here are measured: the candidate and the reference both ran on the same inputs.
"""

from __future__ import annotations

import math

PASS_COLOR, FAIL_COLOR, NEUTRAL_COLOR = "#54a24b", "#e45756", "#4c78a8"
EXACT_FLOOR = 1e-12  # where a log axis shows an error of exactly zero
_LAYOUT = {
    "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
    "height": 380,
    "template": "plotly_white",
}
_METRIC_COLUMNS = [
    ("name", "output"),
    ("max_abs", "max abs error"),
    ("mean_rel", "mean rel error"),
    ("max_rel", "max rel error"),
    ("cosine", "cosine"),
    ("snr_db", "SNR (dB)"),
    ("top1", "top-1"),
    ("top5", "top-5"),
]


def verdict_card(report: dict) -> dict:
    """What the verdict card shows: verdict, reason, colour, first divergent layer."""
    passed = report.get("verdict") == "pass"
    first = report.get("first_divergent") or {}
    candidate = report.get("candidate") or {}
    return {
        "verdict": report.get("verdict", "unknown"),
        "color": PASS_COLOR if passed else FAIL_COLOR,
        "reason": report.get("reason", ""),
        "candidate": candidate.get("name"),
        "first_divergent_node": report.get("first_divergent_node"),
        "first_divergent_op": first.get("op_type"),
        "kept_fp32": len(candidate.get("kept_fp32") or []) if "kept_fp32" in candidate else None,
        "warnings": list(report.get("warnings") or []),
    }


def metric_table(report: dict) -> dict:
    """Rows of per-output metrics with the thresholds they were judged by.

    ``{"columns": [labels], "rows": [{"cells": [text], "passed", "reasons"}],
    "thresholds": [text]}``; a missing metric (top-k of a non-classifier) is "-".
    """
    rows = []
    for output in report.get("outputs", []):
        cells = [_cell(key, output.get(key)) for key, _ in _METRIC_COLUMNS]
        rows.append(
            {
                "cells": cells,
                "passed": bool(output.get("passed")),
                "reasons": list(output.get("reasons") or []),
            }
        )
    limits = report.get("thresholds") or {}
    shown = [
        f"{key} {'≤' if key in ('max_abs', 'mean_rel', 'max_rel') else '≥'} {_number(value)}"
        for key, value in limits.items()
        if value is not None and key != "rel_floor"
    ]
    return {"columns": [label for _, label in _METRIC_COLUMNS], "rows": rows, "thresholds": shown}


def error_by_layer(report: dict) -> dict:
    """Max abs error of each compared layer along the execution order, on a log axis,
    failing layers in red and the first divergent one marked."""
    layers = report.get("layers") or []
    x = list(range(len(layers)))
    y = [_positive(layer.get("max_abs")) for layer in layers]
    colors = [PASS_COLOR if layer.get("passed") else FAIL_COLOR for layer in layers]
    custom = [
        [
            layer.get("node"),
            layer.get("op_type"),
            layer.get("tensor"),
            _number(layer.get("snr_db")),
            _number(layer.get("cosine")),
        ]
        for layer in layers
    ]
    shapes, annotations = [], []
    first = report.get("first_divergent_node")
    index = next((i for i, layer in enumerate(layers) if layer.get("node") == first), None)
    if index is not None:
        shapes.append(
            {
                "type": "line",
                "x0": index,
                "x1": index,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": FAIL_COLOR, "dash": "dot"},
            }
        )
        annotations.append(
            {
                "x": index,
                "yref": "paper",
                "y": 1.0,
                "text": f"first divergent: {first}",
                "showarrow": False,
                "yanchor": "bottom",
                "font": {"color": FAIL_COLOR},
            }
        )
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "x": x,
                "y": y,
                "customdata": custom,
                "marker": {"color": colors, "size": 6},
                "line": {"color": "#bbbbbb", "width": 1},
                "hovertemplate": "%{customdata[0]} (%{customdata[1]}) → %{customdata[2]}<br>"
                "max abs error %{y:.3g}<br>SNR %{customdata[3]} dB, cosine %{customdata[4]}"
                "<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {"text": "Error by layer, in execution order (measured)"},
            "xaxis": {"title": {"text": "layer (execution order)"}},
            "yaxis": {"title": {"text": "max abs error"}, "type": "log"},
            "shapes": shapes,
            "annotations": annotations,
        },
    }


def error_histogram(report: dict, output: str | None = None) -> dict:
    """Counts of element-wise absolute errors of one output (the first by default) in
    log-spaced bins; exact matches, which a log axis cannot place, are in the title."""
    histograms = report.get("histograms") or []
    hist = next((h for h in histograms if output in (None, h.get("output"))), None) or {}
    edges, counts = hist.get("edges") or [], hist.get("counts") or []
    centers = [math.sqrt(a * b) for a, b in zip(edges, edges[1:], strict=False)]
    widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
    zeros = hist.get("zeros", 0)
    name = hist.get("output", output or "")
    if not any(counts):
        why = (
            f"every element of '{name}' matches exactly ({zeros})"
            if zeros
            else f"no element of '{name}' has a finite error to place (NaN or inf on a side)"
            if hist
            else "no error histogram in this result"
        )
        return {"data": [], "layout": {}, "empty": f"No error histogram: {why}."}
    return {
        "data": [
            {
                "type": "bar",
                "x": centers,
                "y": counts,
                "width": widths,
                "marker": {"color": NEUTRAL_COLOR},
                "hovertemplate": "|error| ≈ %{x:.3g}: %{y} elements<extra></extra>",
            }
        ],
        "layout": {
            **_LAYOUT,
            "title": {
                "text": f"Element-wise |error| of '{name}' ({zeros} elements exact, measured)"
            },
            "xaxis": {"title": {"text": "absolute error"}, "type": "log"},
            "yaxis": {"title": {"text": "elements"}},
            "bargap": 0,
        },
    }


def layer_errors_by_node(report: dict) -> dict[str, dict]:
    """Per node name the worst compared tensor's ``max_abs``, ``snr_db`` and ``passed``,
    for colouring the graph view."""
    found: dict[str, dict] = {}
    for layer in report.get("layers") or []:
        node = layer.get("node")
        snr = layer.get("snr_db")
        current = found.get(node)
        if current is None or (snr is not None and snr < (current["snr_db"] or math.inf)):
            found[node] = {
                "max_abs": layer.get("max_abs"),
                "snr_db": snr,
                "passed": bool(layer.get("passed")),
            }
    return found


def fp16_variant_table(report: dict) -> dict | None:
    """The three fp16 builds and the scale factors (candidate ``fp16-scaled`` only).

    ``{"measured", "overflows_avoided", "rows": [{"variant", "verdict", "cells"}],
    "factors": [{"node", "op_type", "kind", "factor", "formula", "range_in"}]}``.
    """
    section = report.get("fp16_variants")
    if not section:
        return None
    rows = [
        {
            "variant": name,
            "verdict": row.get("verdict", "unknown"),
            "cells": [
                _number(row.get("max_abs")),
                _number(row.get("mean_rel")),
                _cell("snr_db", row.get("snr_db")),
                _number(row.get("overflowed_tensors")),
            ],
        }
        for name, row in section.get("variants", {}).items()
    ]
    factors = [
        {
            **{k: f.get(k) for k in ("node", "op_type", "kind", "formula")},
            "factor": f"2^{f['log2']}" if f.get("log2") is not None else _number(f.get("factor")),
            "range_in": _number(f.get("range_in")),
        }
        for f in section.get("scaling", {}).get("factors", [])
    ]
    return {
        "measured": section.get("measured", ""),
        "overflows_avoided": section.get("overflows_avoided"),
        "rows": rows,
        "factors": factors,
    }


def _positive(value) -> float:
    return value if isinstance(value, int | float) and value > 0 else EXACT_FLOOR


def _cell(key: str, value) -> str:
    if key == "name":
        return str(value)
    if key in ("top1", "top5") and value is not None:
        return f"{100 * value:.0f}%"
    if key == "snr_db" and value is not None:
        return f"{value:.1f}"
    return _number(value)


def _number(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6f}" if 0.99 <= value < 1.0 else f"{value:.3g}"
    return str(value)
