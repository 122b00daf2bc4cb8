"""The run state machine: create, enqueue, claim, finish, cancel, reap.

Every transition is a conditional UPDATE on the row's current status, so two actors (a
worker finishing, a user cancelling, the reaper) can never both win. The web layer calls
create/cancel; the worker calls claim/finish; anyone may reap. Nothing here imports the
engine: this module is safe for the web process.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from jobs.celery import app
from jobs.events import publish_run
from jobs.stages import STAGE_ORDER, STAGES
from workbench.models import ACTIVE, OnnxModel, Run, StageResult, Status, Target

log = logging.getLogger(__name__)

RUN_STAGE_TASK = "workbench.run_stage"
MAX_ATTEMPTS = 5


class PipelineError(ValueError):
    """A run request that cannot be honoured (unknown stage, stage not for this target)."""


def ordered_stages(requested: Iterable[str]) -> list[str]:
    wanted = set(requested)
    unknown = wanted - set(STAGE_ORDER)
    if unknown:
        raise PipelineError(
            f"unknown stage(s): {', '.join(sorted(unknown))}; available: {', '.join(STAGE_ORDER)}"
        )
    if not wanted:
        raise PipelineError("choose at least one stage")
    # Every later stage reads the analysis, so analyze always runs first.
    wanted.add("analyze")
    return [name for name in STAGE_ORDER if name in wanted]


def create_run(
    *, owner, model: OnnxModel, target: Target, stages: Iterable[str], options: dict | None = None
) -> Run:
    """Create a run with one queued StageResult per stage; enqueue the first after commit."""
    names = ordered_stages(stages)
    with transaction.atomic():
        run = Run.objects.create(
            owner=owner,
            model=model,
            target=target,
            config={"stages": names, "options": options or {}},
        )
        StageResult.objects.bulk_create(
            StageResult(run=run, stage=name, position=i) for i, name in enumerate(names)
        )
        first = run.stages.order_by("position").first()
        transaction.on_commit(lambda: enqueue_stage(first))
    return run


def queue_for(target: Target) -> str:
    """Measured targets run on the workers attached to them; the rest on the shared queue."""
    return target.queue or settings.CELERY_TASK_DEFAULT_QUEUE


def enqueue_stage(stage: StageResult) -> None:
    limit = STAGES[stage.stage].time_limit_s
    result = app.send_task(
        RUN_STAGE_TASK,
        args=[stage.pk],
        queue=queue_for(stage.run.target),
        soft_time_limit=limit,
        time_limit=limit + 60,
    )
    StageResult.objects.filter(pk=stage.pk).update(task_id=result.id)


def claim_stage(stage_id: int, *, worker: str) -> StageResult | None:
    """Atomically take a queued stage (or one whose worker died) for this worker.

    Returns None when the stage is not ours to run: already finished, cancelled, or held by
    a worker whose heartbeat is still fresh (a redelivered message after a worker restart).
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RUN_STALE_SECONDS)
    claimable = Q(status=Status.QUEUED) | Q(status=Status.RUNNING, heartbeat_at__lt=stale)
    with transaction.atomic():
        taken = (
            StageResult.objects.filter(claimable, pk=stage_id, attempts__lt=MAX_ATTEMPTS)
            .exclude(run__status__in=[Status.CANCELLED, Status.FAILED])
            .update(
                status=Status.RUNNING,
                worker=worker,
                heartbeat_at=now,
                started_at=now,
                attempts=F("attempts") + 1,
                progress=0.0,
                message="started",
            )
        )
        if not taken:
            return None
        stage = StageResult.objects.select_related("run__model", "run__target").get(pk=stage_id)
        Run.objects.filter(pk=stage.run_id, status=Status.QUEUED).update(
            status=Status.RUNNING, started_at=now
        )
    publish_run(stage.run_id)
    return stage


def finish_stage(stage: StageResult, *, result: dict | None = None, log_excerpt: str = "") -> bool:
    """Mark a running stage succeeded, then enqueue the next stage or finish the run."""
    now = timezone.now()
    with transaction.atomic():
        done = StageResult.objects.filter(pk=stage.pk, status=Status.RUNNING).update(
            status=Status.SUCCEEDED,
            progress=1.0,
            message="done",
            finished_at=now,
            result=result,
            log_excerpt=log_excerpt[-4000:],
        )
        if not done:  # cancelled or reaped meanwhile: the result is dropped on purpose
            return False
        nxt = (
            StageResult.objects.filter(run_id=stage.run_id, status=Status.QUEUED)
            .order_by("position")
            .first()
        )
        if nxt is None:
            Run.objects.filter(pk=stage.run_id, status=Status.RUNNING).update(
                status=Status.SUCCEEDED, progress=1.0, finished_at=now
            )
        else:
            _update_run_progress(stage.run_id)
            transaction.on_commit(lambda: enqueue_stage(nxt))
    publish_run(stage.run_id)
    return True


def fail_stage(stage_id: int, *, code: str, message: str, log_excerpt: str = "") -> bool:
    """Mark a running stage failed, skip the stages after it and fail the run."""
    now = timezone.now()
    with transaction.atomic():
        failed = StageResult.objects.filter(pk=stage_id, status=Status.RUNNING).update(
            status=Status.FAILED,
            finished_at=now,
            error_code=code,
            error_message=message,
            message="failed",
            log_excerpt=log_excerpt[-4000:],
        )
        if not failed:
            return False
        run_id = StageResult.objects.values_list("run_id", flat=True).get(pk=stage_id)
        StageResult.objects.filter(run_id=run_id, status=Status.QUEUED).update(
            status=Status.SKIPPED, message="skipped: an earlier stage failed"
        )
        Run.objects.filter(pk=run_id, status__in=ACTIVE).update(
            status=Status.FAILED, finished_at=now, error_code=code, error_message=message
        )
    publish_run(run_id)
    return True


def cancel_run(run: Run) -> bool:
    """Cancel a queued or running run. A running stage stops at its next progress report."""
    now = timezone.now()
    with transaction.atomic():
        changed = Run.objects.filter(pk=run.pk, status__in=ACTIVE).update(
            status=Status.CANCELLED,
            finished_at=now,
            error_code="cancelled",
            error_message="cancelled by the user",
        )
        if not changed:
            return False
        StageResult.objects.filter(run_id=run.pk, status__in=ACTIVE).update(
            status=Status.CANCELLED, finished_at=now, message="cancelled"
        )
    publish_run(run.pk)
    return True


def record_progress(stage_id: int, run_id: int, fraction: float, message: str) -> bool:
    """Store a stage's progress; False when the stage is no longer running (cancelled)."""
    now = timezone.now()
    alive = StageResult.objects.filter(pk=stage_id, status=Status.RUNNING).update(
        progress=max(0.0, min(1.0, fraction)), message=message[:300], heartbeat_at=now
    )
    if alive:
        _update_run_progress(run_id)
    return bool(alive)


def release_stage(stage_id: int) -> None:
    """Put a running stage back in the queue before a retry for a transient error."""
    StageResult.objects.filter(pk=stage_id, status=Status.RUNNING).update(
        status=Status.QUEUED, message="waiting to retry after an infrastructure error"
    )


def beat(stage_id: int) -> bool:
    return bool(
        StageResult.objects.filter(pk=stage_id, status=Status.RUNNING).update(
            heartbeat_at=timezone.now()
        )
    )


def reap_stale_stages(*, run_ids: Iterable[int] | None = None) -> int:
    """Fail running stages whose worker stopped sending heartbeats (killed, crashed, lost)."""
    cutoff = timezone.now() - timedelta(seconds=settings.RUN_STALE_SECONDS)
    stale = StageResult.objects.filter(status=Status.RUNNING, heartbeat_at__lt=cutoff)
    if run_ids is not None:
        stale = stale.filter(run_id__in=list(run_ids))
    reaped = 0
    for stage in stale.only("pk", "worker", "heartbeat_at"):
        seen = timezone.localtime(stage.heartbeat_at).strftime("%H:%M:%S %Z")
        message = (
            f"the worker running this stage ({stage.worker or 'unknown'}) stopped responding; "
            f"last heartbeat at {seen}. It was probably killed or ran out of memory. "
            "Start the run again; if it keeps happening, check the worker's log."
        )
        reaped += fail_stage(stage.pk, code="worker_lost", message=message)
    if reaped:
        log.warning("reaped %d stage(s) whose worker was lost", reaped)
    return reaped


def _update_run_progress(run_id: int) -> None:
    rows = list(StageResult.objects.filter(run_id=run_id).values_list("status", "progress"))
    if not rows:
        return
    total = sum(1.0 if status == Status.SUCCEEDED else progress for status, progress in rows)
    Run.objects.filter(pk=run_id, status__in=ACTIVE).update(progress=total / len(rows))
