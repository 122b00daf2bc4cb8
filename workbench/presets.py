"""Built-in targets: the engine's presets, created after every migrate and refreshed by
each worker at start-up."""

from __future__ import annotations

from django.db import transaction

from engine.targets.catalog import load_presets
from workbench.models import Target


def upsert_builtin_target(profile: dict, *, queue: str = "") -> Target:
    """Create a built-in target, or a new version of it when its profile changed (so runs
    keep pointing at the profile they were made with)."""
    with transaction.atomic():
        current = (
            Target.objects.select_for_update()
            .filter(owner__isnull=True, name=profile["name"])
            .order_by("-version")
            .first()
        )
        unchanged = current is not None and _without_version(current.profile) == _without_version(
            profile
        )
        if unchanged and current.queue == queue:
            return current
        version = current.version + 1 if current else 1
        return Target.objects.create(
            name=profile["name"],
            kind=profile["kind"],
            description=profile.get("description", ""),
            profile={**profile, "version": version},
            version=version,
            queue=queue,
        )


def _without_version(profile: dict) -> dict:
    return {key: value for key, value in profile.items() if key != "version"}


def ensure_presets() -> list[Target]:
    return [upsert_builtin_target(p.to_dict()) for p in load_presets()]


def on_post_migrate(sender, **kwargs) -> None:
    if sender.name == "workbench":
        ensure_presets()
