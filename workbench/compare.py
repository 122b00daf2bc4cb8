"""Runs compared and their headline figures, for the API, the pages and the CLI: the
database side of :mod:`engine.report` (which runs, whose, which reports)."""

from __future__ import annotations

import csv
import io

from engine.report.compare import RunReports, compare_runs
from engine.report.headlines import headline_figures
from workbench.models import Run
from workbench.snapshots import light_stages

MAX_RUNS = 8


class CompareRejected(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def parse_run_ids(text: str | None) -> list[int]:
    """``"12,15"`` -> ``[12, 15]``; :class:`CompareRejected` says what is wrong."""
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if len(parts) < 2:
        raise CompareRejected("give two or more run ids to compare: ?runs=12,15")
    if len(parts) > MAX_RUNS:
        raise CompareRejected(f"compare at most {MAX_RUNS} runs at once")
    ids = []
    for p in parts:
        if not (p.isascii() and p.isdigit()) or len(p) > 12:
            raise CompareRejected(f"'{p[:20]}' is not a run id (run ids are whole numbers)")
        ids.append(int(p))
    if len(set(ids)) != len(ids):
        raise CompareRejected("each run once: the list repeats a run id")
    return ids


def run_label(run: Run) -> str:
    return f"#{run.pk} {run.model.name} on {run.target.name if run.target else 'no target'}"


def reports_of(run: Run) -> RunReports:
    stages = list(run.stages.all())
    return RunReports(
        id=run.pk,
        label=run_label(run),
        results={s.stage: s.result for s in stages if s.status == "succeeded" and s.result},
        status={s.stage: s.status for s in stages},
    )


def own_runs(user, ids: list[int]) -> list[Run]:
    """The user's runs in the order given; another user's id is 404, as a missing one."""
    runs = {
        r.pk: r
        for r in Run.objects.filter(owner=user, pk__in=ids)
        .select_related("model", "target")
        .prefetch_related("stages")
    }
    missing = [str(i) for i in ids if i not in runs]
    if missing:
        raise CompareRejected(
            f"no run {', '.join(missing)} (or it belongs to someone else)", status=404
        )
    return [runs[i] for i in ids]


def compare_for(user, ids: list[int]) -> dict:
    runs = own_runs(user, ids)
    comparison = compare_runs([reports_of(r) for r in runs])
    for entry, run in zip(comparison["runs"], runs, strict=True):
        entry.update(model=run.model_id, target=run.target.name if run.target else None)
        entry["status"] = run.status
    return comparison


def figures_of(run: Run) -> list[dict]:
    """The run's headline figures, from what each succeeded stage stored beside its result
    (prefetch the stages with :func:`light_stages`: no result is read)."""
    figures: list[dict] = []
    for stage in sorted(run.stages.all(), key=lambda s: s.position):
        if stage.status != "succeeded":
            continue
        if stage.figures is None:  # stored before figures were kept, or made by hand
            figures += [f.to_dict() for f in headline_figures({stage.stage: stage.result})]
        else:
            figures += stage.figures
    return figures


def _cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text: node and model names come from uploads,
    and one starting with = + - @ would run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def figures_csv(comparison: dict) -> str:
    """The headline table of a comparison as CSV: one row per figure, a value column per
    run and a delta column per run after the first."""
    out = io.StringIO()
    writer = csv.writer(out)
    ids = [r["id"] for r in comparison["runs"]]
    header = ["figure", "label", "unit", "better"] + [f"run {i}" for i in ids]
    header += [f"delta % run {i}" for i in ids[1:]] + [f"basis run {i}" for i in ids]
    writer.writerow(header)
    for row in comparison["figures"]:
        values = [None if v is None else v["value"] for v in row["values"]]
        deltas = [d["pct"] for d in row["deltas"]]
        bases = [None if v is None else v["basis"] for v in row["values"]]
        writer.writerow(
            [row["key"], row["label"], row["unit"], row["better"] or ""]
            + ["" if v is None else v for v in values]
            + ["" if d is None else f"{d:.2f}" for d in deltas]
            + [_cell(b) for b in bases]
        )
    return out.getvalue()


def ops_csv(comparison: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    ids = [r["id"] for r in comparison["runs"]]
    writer.writerow(
        ["op", "op_type"]
        + [f"latency_us run {i}" for i in ids]
        + [f"delta % run {i}" for i in ids[1:]]
    )
    for row in comparison["ops"]["rows"]:
        writer.writerow(
            [_cell(row["name"]), _cell(row["op_type"])]
            + ["" if v is None else f"{v:.3f}" for v in row["latency_us"]]
            + ["" if d is None else f"{d:.2f}" for d in row["delta_pct"]]
        )
    return out.getvalue()


HISTORY_RUNS = 50


def model_history(model, limit: int = HISTORY_RUNS) -> dict:
    """The headline figures of the model's latest runs, oldest first, and its pinned
    baseline run."""
    runs = list(
        Run.objects.filter(model=model)
        .select_related("target", "model")
        .prefetch_related(light_stages())
        .order_by("-created_at", "-id")[:limit]
    )
    runs.reverse()
    entries = []
    for run in runs:
        figures = figures_of(run)
        entries.append(
            {
                "run": run.pk,
                "created_at": run.created_at.isoformat(),
                "target": run.target.name if run.target else None,
                "status": run.status,
                "figures": {
                    f["key"]: {"value": f["value"], "unit": f["unit"], "measured": f["measured"]}
                    for f in figures
                },
            }
        )
    return {"model": model.pk, "baseline": model.baseline_run_id, "runs": entries}


def pin_baseline(model, run_id: int | None) -> None:
    """Pin one of the model's runs as its baseline (``None`` unpins)."""
    if run_id is not None and not Run.objects.filter(pk=run_id, model=model).exists():
        raise CompareRejected(f"run {run_id} is not a run of this model", status=400)
    model.baseline_run_id = run_id
    model.save(update_fields=["baseline_run"])
