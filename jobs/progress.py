"""The engine's progress callback, as seen from a worker: throttled writes to the Run row,
a copy to the channel group, and cancellation surfaced as engine.errors.Cancelled."""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import close_old_connections

from engine.errors import Cancelled
from jobs import pipeline
from jobs.events import publish_run


class ProgressSink:
    def __init__(self, stage_id: int, run_id: int) -> None:
        self.stage_id = stage_id
        self.run_id = run_id
        self.min_interval_s = settings.PROGRESS_MIN_INTERVAL_SECONDS
        self._last_write = 0.0
        self._last_message = ""
        self._stopped = threading.Event()

    def stop(self) -> None:
        """Called by the heartbeat when it finds the stage no longer running."""
        self._stopped.set()

    def __call__(self, fraction: float, message: str) -> None:
        if self._stopped.is_set():
            raise Cancelled("the run was cancelled")
        now = time.monotonic()
        if message == self._last_message and now - self._last_write < self.min_interval_s:
            return
        self._last_write, self._last_message = now, message
        if not pipeline.record_progress(self.stage_id, self.run_id, fraction, message):
            raise Cancelled("the run was cancelled")
        publish_run(self.run_id)


class Heartbeat:
    """Background thread that proves the worker is alive while a stage runs."""

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
                    return
        finally:
            from django.db import connection

            connection.close()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=5)
