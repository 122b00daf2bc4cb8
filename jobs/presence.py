"""A worker's presence: the targets it declared, the queues it consumes, and its row in
the worker registry, refreshed by a heartbeat.

The heartbeat is a consumer bootstep with a thread of its own in the worker's main
process, so it beats whatever the pool does, and a slow database never stalls the loop
that talks to the broker. Each beat it writes the worker's row, starts consuming the
queue of any target it now serves (a worker that declares nothing serves every new
target; ``workbench.queues``), and keeps the "waiting for a worker" messages of queued
stages true. Queues are added with the consumer's ``add_task_queue`` through
``call_soon``, the path Celery's ``add_consumer`` remote-control command takes, so the
thread never touches the broker connection itself.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from celery import bootsteps
from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from workbench import queues, workers

log = logging.getLogger(__name__)

# How long a stopping worker waits for a heartbeat in flight (a slow database) to end.
JOIN_TIMEOUT_S = 5.0


def declared_targets(option: str | None) -> list[str]:
    """The worker's ``--targets a,b`` option, else ``WORKBENCH_WORKER_TARGETS``."""
    if option:
        return [name.strip() for name in option.split(",") if name.strip()]
    return list(settings.WORKER_TARGETS)


def wanted_queues(targets: list[str]) -> set[str]:
    """The targets' queues, and the builds queue: every worker builds tuning candidates
    for the others when it is idle (``jobs.builds``)."""
    served = queues.declared_queues(targets) if targets else queues.every_target_queue()
    return served | {queues.builds_queue()}


class Presence(bootsteps.StartStopStep):
    """Registers the worker, consumes its targets' queues, beats until shutdown."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, c, **kwargs) -> None:
        super().__init__(c, **kwargs)
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.first = True

    def start(self, c) -> None:
        self.targets = getattr(c.controller, "workbench_targets", None) or []
        self.consuming = {q.name for q in c.task_consumer.queues}
        self._beat(c)
        log.info("serving %s on %s", ", ".join(self.targets) or "every target", self.consuming)
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(c, self.stopping), name="workbench-presence", daemon=True
        )
        self.thread.start()

    def stop(self, c) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=JOIN_TIMEOUT_S)
            self.thread = None

    def _run(self, c, stopping: threading.Event) -> None:
        try:
            while not stopping.wait(settings.RUN_HEARTBEAT_SECONDS):
                self._beat(c)
        finally:
            connections.close_all()  # this thread's own connections

    def _beat(self, c) -> None:
        try:
            close_old_connections()  # a long-lived thread honours CONN_MAX_AGE and health checks
            # consuming starts in the consumer's own loop (where a delivered message finds
            # its handler), as Celery's add_consumer command does it
            for queue in self._new_queues():
                c.call_soon(c.add_task_queue, queue)
            self._record(c)
            workers.refresh_waiting()
        except Exception:  # noqa: BLE001 - a beat that fails (database restarting) is retried next time
            log.exception("worker heartbeat failed")

    def _new_queues(self) -> set[str]:
        new = wanted_queues(self.targets) - self.consuming
        self.consuming |= new
        return new

    def _record(self, c) -> None:
        fields = {
            "machine": socket.gethostname(),
            "pid": os.getpid(),
            "targets": self.targets,
            "queues": sorted(self.consuming),
            "concurrency": c.controller.concurrency or 1,
            "load_avg": [round(x, 2) for x in os.getloadavg()],
        }
        if self.first:
            fields["started_at"] = timezone.now()
            self.first = False
        workers.record_heartbeat(c.hostname, **fields)
