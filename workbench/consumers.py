"""Live run progress over a websocket: authorize, join, snapshot, then relay."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from workbench.events import run_group, user_group
from workbench.models import ACTIVE, Run
from workbench.snapshots import light_stages, run_snapshot

NOT_FOUND = 4404


class _RunFeed(AsyncJsonWebsocketConsumer):
    """A group of run events relayed as they come: ``join`` after authorizing, then send
    the snapshots read after joining (an event that lands meanwhile is a newer copy, never
    a gap)."""

    group: str

    async def join(self, group: str) -> None:
        self.group = group
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_progress(self, event: dict) -> None:
        await self.send_json(
            {"type": "progress", "run": event["run"], "sent_at": event.get("sent_at")}
        )


class RunProgressConsumer(_RunFeed):
    """One run, for its page."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["pk"])
        if not user or not user.is_authenticated or not await self._owns_run(user):
            await self.close(code=NOT_FOUND)
            return
        await self.join(run_group(self.run_id))
        await self.send_json({"type": "snapshot", "run": await self._snapshot()})

    @database_sync_to_async
    def _owns_run(self, user) -> bool:
        return Run.objects.filter(pk=self.run_id, owner=user).exists()

    @database_sync_to_async
    def _snapshot(self) -> dict:
        return run_snapshot(Run.objects.prefetch_related(light_stages()).get(pk=self.run_id))


class DashboardConsumer(_RunFeed):
    """Every run of the signed-in user: the dashboard's and every page's live feed. On
    connect, the snapshots of the user's active runs (what changed while the page was
    away)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not user or not user.is_authenticated:
            await self.close(code=NOT_FOUND)
            return
        await self.join(user_group(user.pk))
        for run in await self._active(user):
            await self.send_json({"type": "snapshot", "run": run})

    @database_sync_to_async
    def _active(self, user) -> list[dict]:
        runs = Run.objects.filter(owner=user, status__in=ACTIVE).prefetch_related(light_stages())
        return [run_snapshot(r) for r in runs[:50]]
