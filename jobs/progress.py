"""The engine's progress callback, as seen from a worker: throttled writes to the Run row,
a copy to the channel group, and cancellation surfaced as engine.errors.Cancelled."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import psutil
from billiard.process import current_process
from django.conf import settings
from django.db import close_old_connections

from engine.errors import Cancelled
from workbench import pipeline
from workbench.events import publish_run

log = logging.getLogger(__name__)


class StageTimedOut(Cancelled):
    """The stage ran past its time limit (raised from the progress callback, so it leaves
    the engine the way a cancel does, through whatever the engine catches)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"the stage ran past its {limit_s:g} s limit")
        self.limit_s = limit_s


class ProgressSink:
    def __init__(self, stage_id: int, run_id: int, time_limit_s: float | None = None) -> None:
        self.stage_id = stage_id
        self.run_id = run_id
        self.time_limit_s = time_limit_s
        self._deadline = time.monotonic() + time_limit_s if time_limit_s else None
        self.min_interval_s = settings.PROGRESS_MIN_INTERVAL_SECONDS
        self._last_write = 0.0
        self._last_message = ""
        self._stopped = threading.Event()

    def past_deadline(self) -> bool:
        """The stage's time limit has passed (whatever error the engine made of it)."""
        return self._deadline is not None and time.monotonic() > self._deadline

    def stop(self) -> None:
        """Called by the heartbeat when it finds the stage no longer running."""
        self._stopped.set()

    def __call__(self, fraction: float, message: str) -> None:
        if self._stopped.is_set():
            raise Cancelled("the run was cancelled")
        now = time.monotonic()
        if self._deadline is not None and now > self._deadline:
            # Celery's soft limit too, but an engine that catches broad exceptions around a
            # step could swallow its SoftTimeLimitExceeded; this one it lets through.
            raise StageTimedOut(self.time_limit_s)
        if message == self._last_message and now - self._last_write < self.min_interval_s:
            return
        self._last_write, self._last_message = now, message
        if not pipeline.record_progress(self.stage_id, self.run_id, fraction, message):
            raise Cancelled("the run was cancelled")
        publish_run(self.run_id)


def _in_pool_child() -> bool:
    return current_process().name.startswith("ForkPoolWorker")


def hard_stop() -> None:
    """End this pool process: Celery's parent replaces it. Only used for a cancelled stage
    stuck in native code (one long inference, a compiler call) that never reports back."""
    log.warning("cancelled stage did not stop within the grace period; ending pool process")
    os.kill(os.getpid(), signal.SIGKILL)


class Heartbeat:
    """Background thread that proves the worker is alive while a stage runs, and notices
    when the stage was cancelled: it tells the sink, then ends the pool process if the
    stage does not return within RUN_CANCEL_GRACE_SECONDS. It also watches the process's
    memory: past ``STAGE_MEMORY_LIMIT_BYTES`` the stage fails with ``memory_limit`` and is
    stopped the same way (before the kernel's OOM killer takes the worker, and the run's
    reason with it)."""

    def __init__(self, stage_id: int, sink: ProgressSink) -> None:
        self.stage_id = stage_id
        self.sink = sink
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"heartbeat-{stage_id}", daemon=True
        )

    def _loop(self) -> None:
        try:
            while not self._done.wait(settings.RUN_HEARTBEAT_SECONDS):
                close_old_connections()
                if not pipeline.beat(self.stage_id):
                    self.sink.stop()
                    break
                if self._over_memory():
                    self.sink.stop()
                    break
            else:
                return
        finally:
            from django.db import connection

            connection.close()
        # Cancelled: the stage raises at its next progress report, unless it is stuck.
        if not self._done.wait(settings.RUN_CANCEL_GRACE_SECONDS) and _in_pool_child():
            hard_stop()

    def _over_memory(self) -> bool:
        limit = settings.STAGE_MEMORY_LIMIT_BYTES
        if not limit:
            return False
        rss = psutil.Process().memory_info().rss
        if rss <= limit:
            return False
        pipeline.fail_stage(
            self.stage_id,
            code="memory_limit",
            message=(
                f"the stage used {rss / 1e9:.2f} GB of memory, over the worker's limit of "
                f"{limit / 1e9:.2f} GB (WORKBENCH_STAGE_MEMORY_BYTES), and was stopped. Try "
                "smaller input shapes or fewer options, or ask the administrator to raise it."
            ),
        )
        return True

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=5)
