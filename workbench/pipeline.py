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
from kombu.exceptions import OperationalError as KombuOperationalError

from engine.options import OptionsError
from engine.report.headlines import headline_figures
from engine.stages import STAGES, RunOptions
from workbench import limits, queues, workers
from workbench.celery import app
from workbench.events import publish_run
from workbench.models import ACTIVE, Artifact, OnnxModel, Run, StageResult, Status, Target

log = logging.getLogger(__name__)

RUN_STAGE_TASK = "workbench.run_stage"
MAX_ATTEMPTS = 5


def create_run(
    *, owner, model: OnnxModel, target: Target, options: RunOptions, limited: bool = True
) -> Run:
    """Create a run with one queued StageResult per stage; enqueue the first after commit.

    ``options`` were validated by :meth:`RunOptions.from_dict` (the form and the API call
    it), so what is stored is complete: every stage's options with their defaults.
    ``limited``: a run a user asks for counts against the run rate and the active-run
    quota (:mod:`workbench.limits`, raising ``LimitExceeded``); the workbench's own (sample
    analyses) do not."""
    if limited:
        limits.check_active_runs(owner)
        limits.hit("runs", str(owner.pk))
    with transaction.atomic():
        run = Run.objects.create(owner=owner, model=model, target=target, config=options.to_dict())
        StageResult.objects.bulk_create(
            StageResult(run=run, stage=name, position=i) for i, name in enumerate(options.stages)
        )
        first = run.stages.order_by("position").first()
        transaction.on_commit(lambda: enqueue_stage(first))
    return run


def default_target() -> Target | None:
    """The built-in host target, latest version: where a fresh upload is analyzed."""
    return Target.objects.filter(owner__isnull=True, name="host").order_by("-version").first()


def start_analysis(owner, model: OnnxModel) -> Run:
    """The analysis every new upload gets, from the web page and the API alike."""
    return create_run(
        owner=owner,
        model=model,
        target=default_target(),
        options=RunOptions.from_dict(["analyze"]),
    )


class RetryRefused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


KEPT_ON_RETRY = (Status.SUCCEEDED, Status.NOT_APPLICABLE)


def retry_run(run: Run) -> Run:
    """A new attempt at a failed or cancelled run: a new run (``retry_of`` the old one, which
    stays as it was) with the same model, target and options, where every stage that
    succeeded (or did not apply) is kept with its result and artifacts, and the others run
    again. Counts against the run limits like any run."""
    if run.status not in (Status.FAILED, Status.CANCELLED):
        raise RetryRefused(
            f"only a failed or cancelled run can be retried; run {run.pk} is {run.status}"
        )
    limits.check_active_runs(run.owner)
    limits.hit("runs", str(run.owner.pk))
    now = timezone.now()
    with transaction.atomic():
        new = Run.objects.create(
            owner=run.owner,
            model=run.model,
            target=run.target,
            config=run.config,
            retry_of=run,
        )
        for old in run.stages.order_by("position"):
            kept = old.status in KEPT_ON_RETRY
            StageResult.objects.create(
                run=new,
                stage=old.stage,
                position=old.position,
                status=old.status if kept else Status.QUEUED,
                progress=1.0 if kept else 0.0,
                message=f"kept from run {run.pk}" if kept else "",
                result=old.result if kept else None,
                figures=old.figures if kept else None,
                started_at=old.started_at if kept else None,
                finished_at=old.finished_at if kept else None,
                worker=old.worker if kept else "",
            )
            if kept:
                for artifact in old.run.artifacts.filter(stage=old.stage):
                    Artifact.objects.create(
                        run=new,
                        stage=artifact.stage,
                        kind=artifact.kind,
                        file=artifact.file,  # the same stored file, now used by two rows
                        name=artifact.name,
                        sha256=artifact.sha256,
                        size_bytes=artifact.size_bytes,
                    )
        if not new.stages.filter(status=Status.QUEUED).exists():
            Run.objects.filter(pk=new.pk).update(
                status=Status.SUCCEEDED, progress=1.0, started_at=now, finished_at=now
            )
        else:
            _advance(new.pk, now)
    publish_run(new.pk)
    return new


def run_options(run: Run) -> RunOptions:
    """The run's stored options, validated again (stored by :func:`create_run`). Runs
    stored by an earlier version (input shapes under ``analyze``, options since removed)
    are read with what still applies."""
    config = run.config or {}
    stages = config.get("stages") or ["analyze"]
    options = dict(config.get("options") or {})
    if "input_shapes" in config:
        shapes = config["input_shapes"]
    else:
        shapes = (options.get("analyze") or {}).get("input_shapes") or {}
    data: dict = {"input_shapes": shapes}
    for name, values in options.items():
        if name in STAGES and isinstance(values, dict):
            known = {s.name for s in STAGES[name].options.spec()}
            data[name] = {k: v for k, v in values.items() if k in known}
    return RunOptions.from_dict(stages, data)


def queue_for(target: Target) -> str:
    """The target's own queue (:mod:`workbench.queues` says which, and who consumes it)."""
    return queues.queue_for(target)


def stage_time_limit(name: str) -> float:
    """A stage's time limit: ``WORKBENCH_TIME_LIMIT_<STAGE>`` seconds when set, else the
    stage registry's."""
    return settings.STAGE_TIME_LIMITS.get(name) or STAGES[name].time_limit_s


def enqueue_stage(stage: StageResult) -> None:
    """Send the stage to its target's queue (declared durable as it is published, so the
    broker keeps it until a worker serving the target comes); when no live worker serves
    the target, the stage says so until one does (:func:`workers.refresh_waiting`)."""
    limit = stage_time_limit(stage.stage)
    target = stage.run.target
    try:
        result = app.send_task(
            RUN_STAGE_TASK,
            args=[stage.pk],
            queue=queue_for(target),
            soft_time_limit=limit,
            time_limit=limit + 60,
        )
    except (KombuOperationalError, OSError):
        # The broker is down (restarting): the run is stored and stays queued, saying so;
        # the reaper sends it again once the broker answers (resend_unsent).
        log.warning("could not send stage %s to the broker; it waits", stage.pk, exc_info=True)
        StageResult.objects.filter(pk=stage.pk, status=Status.QUEUED).update(message=BROKER_DOWN)
        publish_run(stage.run_id)
        return
    StageResult.objects.filter(pk=stage.pk).update(task_id=result.id)
    StageResult.objects.filter(pk=stage.pk, message=BROKER_DOWN).update(message="queued")
    waiting = workers.waiting_message(target)
    if waiting and StageResult.objects.filter(pk=stage.pk, status=Status.QUEUED).update(
        message=waiting
    ):
        publish_run(stage.run_id)


def claim_stage(stage_id: int, *, worker: str) -> StageResult | None:
    """Atomically take a queued stage (or one whose worker died) for this worker.

    Returns None when the stage is not ours to run: already finished, cancelled, or held by
    a worker whose heartbeat is still fresh (a redelivered message after a worker restart).
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RUN_STALE_SECONDS)
    claimable = Q(status=Status.QUEUED) | Q(status=Status.RUNNING, heartbeat_at__lt=stale)
    # The stage's own conditions stay on the UPDATE itself, not in a join: PostgreSQL then
    # checks them again on the row a concurrent reaper or cancel just changed (a join makes
    # Django move every condition into a subquery, whose old snapshot would let this claim
    # revive a stage the reaper had failed a moment before).
    live_runs = Run.objects.exclude(status__in=[Status.CANCELLED, Status.FAILED]).values("pk")
    with transaction.atomic():
        taken = StageResult.objects.filter(
            claimable, pk=stage_id, attempts__lt=MAX_ATTEMPTS, run_id__in=live_runs
        ).update(
            status=Status.RUNNING,
            worker=worker,
            heartbeat_at=now,
            started_at=now,
            attempts=F("attempts") + 1,
            progress=0.0,
            message="started",
        )
        if not taken:
            return None
        stage = StageResult.objects.select_related("run__model", "run__target").get(pk=stage_id)
        Run.objects.filter(pk=stage.run_id, status=Status.QUEUED).update(
            status=Status.RUNNING, started_at=now
        )
    publish_run(stage.run_id)
    return stage


def stage_figures(stage: str, result: dict | None) -> list[dict] | None:
    """The headline figures of one stage's result, as stored beside it."""
    if not result:
        return None
    return [f.to_dict() for f in headline_figures({stage: result})]


def finish_stage(
    stage: StageResult,
    *,
    result: dict | None = None,
    log_excerpt: str = "",
    status: str = Status.SUCCEEDED,
    message: str = "done",
) -> bool:
    """Mark a running stage succeeded (or not applicable, with the reason as
    ``message``), then enqueue the next stage or finish the run."""
    now = timezone.now()
    with transaction.atomic():
        done = StageResult.objects.filter(pk=stage.pk, status=Status.RUNNING).update(
            status=status,
            progress=1.0,
            message=message[:300],
            finished_at=now,
            result=result,
            figures=stage_figures(stage.stage, result),
            log_excerpt=log_excerpt[-4000:],
        )
        if not done:  # cancelled or reaped meanwhile: the result is dropped on purpose
            return False
        _advance(stage.run_id, now)
    publish_run(stage.run_id)
    return True


def fail_stage(
    stage_id: int,
    *,
    code: str,
    message: str,
    log_excerpt: str = "",
    skip_all: bool = False,
) -> bool:
    """Mark a running stage failed and skip the queued stages that need its result (all of
    them with ``skip_all``: the model itself could not be prepared). The others still run;
    the run fails once no stage is left."""
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
        stage = StageResult.objects.select_related("run").get(pk=stage_id)
        queued = StageResult.objects.filter(run_id=stage.run_id, status=Status.QUEUED)
        if skip_all:
            queued.update(status=Status.SKIPPED, message="skipped: the model could not be prepared")
        else:
            needing = dependents(stage.run, stage.stage)
            for name in needing:
                queued.filter(stage=name).update(
                    status=Status.SKIPPED,
                    message=f"skipped: it needs the {stage.stage} stage, which failed",
                )
        _advance(stage.run_id, now)
    publish_run(stage.run_id)
    return True


def dependents(run: Run, failed: str) -> list[str]:
    """The run's stages that need ``failed``'s result, directly or through another."""
    try:
        options = run_options(run)
    except OptionsError:
        return [s for s in run.config.get("stages", []) if s != failed]
    lost, found = {failed}, []
    for name in options.stages:
        if set(STAGES[name].needs(options.options[name])) & lost:
            lost.add(name)
            found.append(name)
    return found


def _advance(run_id: int, now) -> None:
    """Enqueue the next queued stage, or end the run: failed if a stage failed."""
    nxt = StageResult.objects.filter(run_id=run_id, status=Status.QUEUED).order_by("position")
    nxt = nxt.first()
    if nxt is not None:
        _update_run_progress(run_id)
        transaction.on_commit(lambda: enqueue_stage(nxt))
        return
    failed = (
        StageResult.objects.filter(run_id=run_id, status=Status.FAILED).order_by("position").first()
    )
    if failed is None:
        Run.objects.filter(pk=run_id, status=Status.RUNNING).update(
            status=Status.SUCCEEDED, progress=1.0, finished_at=now
        )
        return
    Run.objects.filter(pk=run_id, status__in=ACTIVE).update(
        status=Status.FAILED,
        finished_at=now,
        error_code=failed.error_code,
        error_message=f"{failed.stage}: {failed.error_message}",
    )


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


BROKER_DOWN = (
    "waiting: the job queue (the broker) could not be reached; the stage is sent again "
    "as soon as it answers"
)


def resend_unsent() -> int:
    """Send again the stages whose message never reached the broker (it was down)."""
    unsent = StageResult.objects.filter(status=Status.QUEUED, task_id="", message=BROKER_DOWN)
    sent = 0
    for stage in unsent.select_related("run__target"):
        enqueue_stage(stage)
        sent += StageResult.objects.filter(pk=stage.pk).exclude(task_id="").exists()
    return sent


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
    if run_ids is None:
        resend_unsent()
    return reaped


def _update_run_progress(run_id: int) -> None:
    rows = list(StageResult.objects.filter(run_id=run_id).values_list("status", "progress"))
    if not rows:
        return
    total = sum(progress if status in ACTIVE else 1.0 for status, progress in rows)
    Run.objects.filter(pk=run_id, status__in=ACTIVE).update(progress=total / len(rows))
