"""Progress events: the Run row is the source of truth; the channel group carries copies."""

from __future__ import annotations

import logging
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from workbench.models import Run
from workbench.snapshots import light_stages, run_snapshot

log = logging.getLogger(__name__)


def run_group(run_id: int) -> str:
    return f"run.{run_id}"


def user_group(user_id: int) -> str:
    """Every run of one user: the dashboard's feed."""
    return f"user.{user_id}"


def publish_run(run_id: int) -> None:
    """Send the run's current snapshot to its group. Losing an event is harmless: the page
    re-reads the database on reconnect, so a channel-layer failure is logged, not raised."""
    try:
        run = Run.objects.prefetch_related(light_stages()).get(pk=run_id)
    except Run.DoesNotExist:
        return
    layer = get_channel_layer()
    if layer is None:
        return
    # sent_at: when it left, so a client can tell how late progress reaches it
    event = {"type": "run.progress", "run": run_snapshot(run), "sent_at": time.time()}
    for group in (run_group(run_id), user_group(run.owner_id)):
        try:
            async_to_sync(layer.group_send)(group, event)
        except Exception:  # noqa: BLE001 - best effort; the DB row already holds it
            log.warning("could not publish progress of run %s to %s", run_id, group, exc_info=True)
