"""The worker registry: which workers are alive, which targets they serve, and the
"waiting for a worker" message of a stage whose target nobody serves.

Workers write their own rows (``jobs.presence``); this module reads them and keeps the
waiting messages of queued stages true. It imports no worker code: the web process
uses it too.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from workbench.events import publish_run
from workbench.models import ACTIVE, StageResult, Status, Target, Worker
from workbench.queues import machine_bound, queue_for

log = logging.getLogger(__name__)

WAITING = "waiting for a worker that serves {target}"
QUEUED = "queued"
# A worker row nobody has heard of for this long is deleted (it shows as stale until then).
FORGET_AFTER = timedelta(days=1)


def _stale_cutoff():
    return timezone.now() - timedelta(seconds=settings.RUN_STALE_SECONDS)


def state_of(worker: Worker) -> str:
    if worker.stopped_at is not None:
        return Worker.State.GONE
    if worker.heartbeat_at < _stale_cutoff():
        return Worker.State.STALE
    return Worker.State.ALIVE


def live_workers():
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=_stale_cutoff())


def serves(worker: Worker, target: Target) -> bool:
    """Whether the worker consumes the target's queue (a worker that declares nothing will
    at its next heartbeat, so it counts for every target but other machines')."""
    if queue_for(target) in worker.queues:
        return True
    return worker.serves_all and not machine_bound(target)


def serving_counts(targets: Iterable[Target]) -> dict[int, int]:
    """Live workers serving each target, by target primary key."""
    workers = list(live_workers())
    return {t.pk: sum(serves(w, t) for w in workers) for t in targets}


def waiting_message(target: Target, workers: list[Worker] | None = None) -> str | None:
    """The message of a stage queued for ``target`` when no live worker serves it."""
    workers = list(live_workers()) if workers is None else workers
    if any(serves(w, target) for w in workers):
        return None
    return WAITING.format(target=target.name)


def refresh_waiting() -> int:
    """Say "waiting for a worker that serves X" on every enqueued stage no live worker
    serves, and take it back once one does. Returns how many stages changed."""
    workers = list(live_workers())
    queued = (
        StageResult.objects.filter(status=Status.QUEUED, run__status__in=ACTIVE)
        .exclude(task_id="")
        .select_related("run__target")
        .only("pk", "run_id", "message", "run__target")
    )
    verdicts: dict[int, str] = {}
    changed = 0
    for stage in queued:
        target = stage.run.target
        if target.pk not in verdicts:
            verdicts[target.pk] = waiting_message(target, workers) or QUEUED
        message = verdicts[target.pk]
        was_waiting = stage.message.startswith(WAITING.format(target=""))
        if message == QUEUED and not was_waiting:
            continue  # served: whatever else the stage says stays
        if message == stage.message:
            continue
        changed += StageResult.objects.filter(pk=stage.pk, status=Status.QUEUED).update(
            message=message
        )
        publish_run(stage.run_id)
    return changed


def record_heartbeat(hostname: str, **fields) -> Worker:
    """Create or refresh a worker's row (a restarted worker keeps its node name's row; its
    first heartbeat passes ``started_at``)."""
    now = timezone.now()
    worker, created = Worker.objects.update_or_create(
        hostname=hostname,
        defaults={**fields, "heartbeat_at": now, "stopped_at": None},
        create_defaults={"started_at": now, **fields, "heartbeat_at": now},
    )
    if created:
        Worker.objects.filter(heartbeat_at__lt=now - FORGET_AFTER).delete()
    return worker


def retire(hostname: str) -> None:
    """A worker shut down cleanly: gone at once, not stale a minute later."""
    Worker.objects.filter(hostname=hostname, stopped_at__isnull=True).update(
        stopped_at=timezone.now()
    )


def current_stages(hostnames: Iterable[str]) -> dict[str, list[StageResult]]:
    """The stages each worker is running now."""
    running = StageResult.objects.filter(worker__in=list(hostnames), status=Status.RUNNING).only(
        "pk", "run_id", "stage", "worker", "progress"
    )
    out: dict[str, list[StageResult]] = {}
    for stage in running:
        out.setdefault(stage.worker, []).append(stage)
    return out


_STATE_ORDER = {Worker.State.ALIVE: 0, Worker.State.STALE: 1, Worker.State.GONE: 2}


def worker_list() -> list[dict]:
    """Every known worker for the admin list and the API: alive first, then stale, gone."""
    rows = list(Worker.objects.all())
    running = current_stages(w.hostname for w in rows)
    out = []
    for w in rows:
        load = (list(w.load_avg) + [None, None, None])[:3]
        out.append(
            {
                "hostname": w.hostname,
                "machine": w.machine,
                "pid": w.pid,
                "state": state_of(w),
                "serves_all": w.serves_all,
                "targets": list(w.targets),
                "queues": list(w.queues),
                "concurrency": w.concurrency,
                "load_1m": load[0],
                "load_5m": load[1],
                "load_15m": load[2],
                "current": [
                    {"run": s.run_id, "stage": s.stage, "progress": s.progress}
                    for s in running.get(w.hostname, [])
                ],
                "started_at": w.started_at,
                "heartbeat_at": w.heartbeat_at,
                "stopped_at": w.stopped_at,
            }
        )
    return sorted(out, key=lambda row: (_STATE_ORDER[row["state"]], row["hostname"]))
