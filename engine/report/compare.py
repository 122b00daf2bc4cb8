"""Runs side by side: headline figures with deltas, per-op and per-kernel times aligned
node by node, memory curves, verdicts.

The first run is the reference every delta is taken against. A delta of a measured
figure within the larger of the two runs' run-to-run spreads is reported as noise, not as
better or worse. Ops are aligned by node name when the runs share names, else by
structure (the longest common sequence of op types in graph order); what cannot be
aligned is listed per run, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher

from engine.report.headlines import HIGHER, LOWER, headline_figures

MAX_STRUCTURE_OPS = 20_000
"""Longer op lists are not aligned by structure (quadratic); their ops are listed."""
NAME_OVERLAP = 0.5
"""Align by name when at least this share of the smaller run's op names occur in both."""


@dataclass
class RunReports:
    """One run as the comparison reads it: its id, a label and its stage reports."""

    id: int
    label: str
    results: dict[str, dict | None]
    status: dict[str, str] = field(default_factory=dict)


def compare_runs(runs: list[RunReports]) -> dict:
    """The comparison of two or more runs, as a JSON-ready dict."""
    if len(runs) < 2:
        raise ValueError("a comparison needs at least two runs")
    figures = [{f.key: f.to_dict() for f in headline_figures(r.results)} for r in runs]
    return {
        "runs": [{"id": r.id, "label": r.label, "stages": r.status} for r in runs],
        "reference": runs[0].id,
        "figures": _figure_rows(figures),
        "ops": _align_ops(runs),
        "kernels": _align_kernels(runs),
        "memory": [_memory_curve(r) for r in runs],
        "schedules": _schedules(runs),
        "noise_rule": (
            "a measured figure's change is noise when it is within the larger of the two "
            "runs' run-to-run spreads (interquartile range / median)"
        ),
    }


def delta(reference: dict | None, other: dict | None) -> dict:
    """How ``other`` differs from ``reference`` (two figure dicts of one key)."""
    if reference is None or other is None:
        return {"direction": "missing", "pct": None, "ratio": None}
    a, b = reference.get("value"), other.get("value")
    if a is None or b is None:
        return {"direction": "unknown", "pct": None, "ratio": None}
    if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
        return {"direction": "same" if a == b else "changed", "pct": None, "ratio": None}
    if bool(reference.get("measured")) != bool(other.get("measured")):
        # a prediction against a measurement: a difference of method, not of speed
        return {"direction": "not comparable (measured vs predicted)", "pct": None, "ratio": None}
    if a == b:
        return {"direction": "same", "pct": 0.0, "ratio": 1.0}
    pct = None if a == 0 else 100.0 * (b - a) / abs(a)
    ratio = None if a == 0 else b / a
    noises = [n for n in (reference.get("noise_pct"), other.get("noise_pct")) if n is not None]
    if pct is not None and noises and abs(pct) <= max(noises):
        direction = "within noise"
    elif reference.get("better") == LOWER:
        direction = "better" if b < a else "worse"
    elif reference.get("better") == HIGHER:
        direction = "better" if b > a else "worse"
    else:
        direction = "changed"
    return {"direction": direction, "pct": pct, "ratio": ratio}


def _figure_rows(figures: list[dict[str, dict]]) -> list[dict]:
    keys: list[str] = []
    for run in figures:
        keys += [k for k in run if k not in keys]
    rows = []
    for key in keys:
        first = next(run[key] for run in figures if key in run)
        cells = [run.get(key) for run in figures]
        rows.append(
            {
                "key": key,
                "label": first["label"],
                "unit": first["unit"],
                "better": first["better"],
                "values": [
                    None
                    if c is None
                    else {k: c[k] for k in ("value", "basis", "measured", "noise_pct")}
                    for c in cells
                ],
                "deltas": [delta(cells[0], c) for c in cells[1:]],
            }
        )
    return rows


def _op_times(report: dict | None) -> list[tuple[str, str, float | None]]:
    """(name, op type, latency in us) per op of a profile report, in graph order."""
    if not isinstance(report, dict):
        return []
    unit = report.get("unit")
    rows = []
    for op in report.get("ops") or []:
        value = op.get("latency_us")
        if isinstance(value, dict):
            value = value.get(unit)
        status = op.get("status")
        if isinstance(status, dict):  # predicted: per unit
            status = status.get(unit)
        if status in ("folded", "constant"):
            continue
        rows.append((op.get("name"), op.get("op_type"), value))
    return rows


def _align_ops(runs: list[RunReports]) -> dict:
    """Per-op latency of every run, aligned to the reference run's ops."""
    tables = [_op_times(r.results.get("profile")) for r in runs]
    if not tables[0] or not any(tables[1:]):
        return {"rows": [], "method": None, "unaligned": [], "note": _missing(runs, tables)}
    ref = tables[0]
    rows = [
        {"name": name, "op_type": op_type, "latency_us": [us], "names": [name]}
        for name, op_type, us in ref
    ]
    unaligned: list[dict] = []
    methods = set()
    for run, table in zip(runs[1:], tables[1:], strict=True):
        if not table:
            for row in rows:
                row["latency_us"].append(None)
                row["names"].append(None)
            continue
        pairs, method = _match(ref, table)
        methods.add(method)
        matched = dict(pairs)
        for i, row in enumerate(rows):
            j = matched.get(i)
            row["latency_us"].append(None if j is None else table[j][2])
            row["names"].append(None if j is None else table[j][0])
        used = set(matched.values())
        left = [table[j][0] for j in range(len(table)) if j not in used]
        if left:
            unaligned.append({"run": run.id, "ops": left})
    ref_left = [row["name"] for row in rows if all(n is None for n in row["names"][1:])]
    if ref_left:
        unaligned.insert(0, {"run": runs[0].id, "ops": ref_left})
    for row in rows:
        a = row["latency_us"][0]
        row["delta_pct"] = [
            None if (a in (None, 0) or b is None) else 100.0 * (b - a) / a
            for b in row["latency_us"][1:]
        ]
    rows.sort(key=lambda r: -max((v or 0.0) for v in r["latency_us"]))
    return {"rows": rows, "method": " and ".join(sorted(methods)), "unaligned": unaligned}


def pairs_by_name(ref: list[tuple], other: list[tuple]) -> list[tuple[int, int]]:
    names = {name: j for j, (name, _, _) in enumerate(other)}
    return [
        (i, names[r[0]])
        for i, r in enumerate(ref)
        if r[0] in names and r[1] == other[names[r[0]]][1]
    ]


def _match(ref: list[tuple], other: list[tuple]) -> tuple[list[tuple[int, int]], str]:
    names = {name for name, _, _ in other}
    shared = sum(1 for name, _, _ in ref if name in names)
    if shared >= NAME_OVERLAP * min(len(ref), len(other)):
        return pairs_by_name(ref, other), "by name"
    if len(ref) * len(other) > MAX_STRUCTURE_OPS**2 / 4:
        return pairs_by_name(ref, other), "by name only (too many ops to align by structure)"
    matcher = SequenceMatcher(None, [t for _, t, _ in ref], [t for _, t, _ in other], False)
    pairs = [
        (block.a + k, block.b + k)
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    ]
    return pairs, "by structure (op types in graph order)"


def _kernel_times(results: dict) -> dict[str, float | None]:
    """Per TVM kernel (``<id> <function>``): its measured time per call (us) in this run's
    build, from the compile stage, else the profile stage's TVM kernel profile."""
    compile_report = results.get("compile") or {}
    times = {
        f"{k.get('id')} {k.get('func')}": k.get("time_us")
        for k in compile_report.get("kernels") or []
    }
    if times:
        return times
    kernels = (results.get("profile") or {}).get("tvm_kernels") or {}
    return {
        f"{k.get('id')} {k.get('func')}": k.get("median_us") for k in kernels.get("kernels") or []
    }


def _align_kernels(runs: list[RunReports]) -> dict:
    tables = [_kernel_times(r.results) for r in runs]
    names: list[str] = []
    for table in tables:
        names += [n for n in table if n not in names]
    rows = []
    for name in names:
        values = [t.get(name) for t in tables]
        a = values[0]
        rows.append(
            {
                "kernel": name,
                "us_per_call": values,
                "delta_pct": [
                    None if (a in (None, 0) or b is None) else 100.0 * (b - a) / a
                    for b in values[1:]
                ],
            }
        )
    rows.sort(key=lambda r: -max((v or 0.0) for v in r["us_per_call"]))
    unaligned = [
        {"run": run.id, "kernels": [n for n in names if n not in table]}
        for run, table in zip(runs, tables, strict=True)
        if table and any(n not in table for n in names)
    ]
    return {"rows": rows, "unaligned": unaligned, "note": _missing(runs, tables, "TVM kernel")}


def _schedules(runs: list[RunReports]) -> dict:
    """Each run's best partition plan: busy time per compute unit, its makespan, and how
    many of the reference's ops the other runs place on the same unit."""
    plans = []
    for run in runs:
        partition = run.results.get("partition")
        best = (partition or {}).get("best")
        result = ((partition or {}).get("results") or {}).get(best)
        if not result:
            plans.append(None)
            continue
        plans.append(
            {
                "run": run.id,
                "target": partition.get("target"),
                "algorithm": best,
                "makespan_ms": result.get("makespan_ms"),
                "unit_busy_us": result.get("unit_busy_us") or {},
                "placement": result.get("placement") or {},
            }
        )
    same = []
    reference = plans[0]
    for plan in plans[1:]:
        if reference is None or plan is None:
            same.append(None)
            continue
        shared = [op for op in reference["placement"] if op in plan["placement"]]
        agree = sum(1 for op in shared if reference["placement"][op] == plan["placement"][op])
        same.append({"ops": len(shared), "same_unit": agree})
    for plan in plans:
        if plan is not None:
            del plan["placement"]  # per op: large, and in each run's own report
    return {"plans": plans, "placement_agreement": same}


def _memory_curve(run: RunReports) -> dict | None:
    memory = run.results.get("memory")
    if not isinstance(memory, dict) or not memory.get("live_bytes"):
        return None
    best = memory.get("best")
    return {
        "run": run.id,
        "live_bytes": memory["live_bytes"],
        "arena_bytes": (memory.get("planners") or {}).get(best),
        "lower_bound_bytes": memory.get("lower_bound_bytes"),
    }


def _missing(runs: list[RunReports], tables: list, what: str = "per-op profile") -> str | None:
    without = [str(r.id) for r, t in zip(runs, tables, strict=True) if not t]
    if not without:
        return None
    return f"no {what} times in run {', '.join(without)}"
