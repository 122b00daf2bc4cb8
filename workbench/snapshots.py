"""The JSON view of a run's state, shared by the websocket, the API and the run page."""

from __future__ import annotations

from django.db.models import Prefetch

from workbench.models import Run, StageResult


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def light_stages() -> Prefetch:
    """A run's stages without their results (which can be megabytes): for snapshots, lists
    and headline figures (stored beside each result)."""
    return Prefetch("stages", queryset=StageResult.objects.defer("result", "log_excerpt"))


SNAPSHOT_STAGE_FIELDS = (
    "id",
    "run_id",
    "stage",
    "position",
    "status",
    "progress",
    "message",
    "attempts",
    "worker",
    "started_at",
    "finished_at",
    "error_code",
    "error_message",
)


def snapshot_stages() -> Prefetch:
    """A run's stages with what :func:`run_snapshot` reads and nothing else (no result, no
    headline figures): for the API's runs, polled by every CI job."""
    return Prefetch("stages", queryset=StageResult.objects.only(*SNAPSHOT_STAGE_FIELDS))


def run_snapshot(run: Run) -> dict:
    # the API's hot reads (workbench/api/hot_reads.py) hand the stages over in order
    stages = getattr(run, "snapshot_stages", None)
    if stages is None:
        stages = sorted(run.stages.all(), key=lambda s: s.position)
    return {
        "id": run.pk,
        "status": run.status,
        "progress": round(run.progress, 4),
        "error_code": run.error_code,
        "error_message": run.error_message,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "stages": [
            {
                "stage": stage.stage,
                "status": stage.status,
                "progress": round(stage.progress, 4),
                "message": stage.message,
                "attempts": stage.attempts,
                "worker": stage.worker,
                "started_at": _iso(stage.started_at),
                "finished_at": _iso(stage.finished_at),
                "error_code": stage.error_code,
                "error_message": stage.error_message,
            }
            for stage in stages
        ],
    }
