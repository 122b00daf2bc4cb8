"""Progress events: the Run row is the source of truth; the channel group carries copies."""

from __future__ import annotations

import logging
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from workbench.models import Run
from workbench.snapshots import run_snapshot

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def publish_run(run_id: int) -> None:
    """Send the run's current snapshot to its group. Losing an event is harmless: the page
    re-reads the database on reconnect, so a channel-layer failure is logged, not raised."""
    try:
        run = Run.objects.prefetch_related("stages").get(pk=run_id)
    except Run.DoesNotExist:
        return
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            run_group(run_id),
            # sent_at: when it left, so a client can tell how late progress reaches it
            {"type": "run.progress", "run": run_snapshot(run), "sent_at": time.time()},
        )
    except Exception:  # noqa: BLE001 - progress is best effort; the DB row already holds it
        log.warning("could not publish progress of run %s", run_id, exc_info=True)
