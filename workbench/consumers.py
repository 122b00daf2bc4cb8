"""Live run progress over a websocket: authorize, join, snapshot, then relay."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from workbench.events import user_group
from workbench.models import ACTIVE, Run
from workbench.snapshots import light_stages, run_snapshot

NOT_FOUND = 4404


class RunProgressConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        self.run_id = int(self.scope["url_route"]["kwargs"]["pk"])
        self.group = f"run.{self.run_id}"
        if not user or not user.is_authenticated or not await self._owns_run(user):
            await self.close(code=NOT_FOUND)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Joined before reading: an event that lands meanwhile is a newer copy, never a gap.
        await self.send_json({"type": "snapshot", "run": await self._snapshot()})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_progress(self, event: dict) -> None:
        await self.send_json(
            {"type": "progress", "run": event["run"], "sent_at": event.get("sent_at")}
        )

    @database_sync_to_async
    def _owns_run(self, user) -> bool:
        return Run.objects.filter(pk=self.run_id, owner=user).exists()

    @database_sync_to_async
    def _snapshot(self) -> dict:
        return run_snapshot(Run.objects.prefetch_related("stages").get(pk=self.run_id))


class DashboardConsumer(AsyncJsonWebsocketConsumer):
    """Every run of the signed-in user: the dashboard's live feed. On connect, the
    snapshots of the user's active runs (what changed while the page was away)."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not user or not user.is_authenticated:
            await self.close(code=NOT_FOUND)
            return
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        for run in await self._active(user):
            await self.send_json({"type": "snapshot", "run": run})

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_progress(self, event: dict) -> None:
        await self.send_json(
            {"type": "progress", "run": event["run"], "sent_at": event.get("sent_at")}
        )

    @database_sync_to_async
    def _active(self, user) -> list[dict]:
        runs = Run.objects.filter(owner=user, status__in=ACTIVE).prefetch_related(light_stages())
        return [run_snapshot(r) for r in runs[:50]]
