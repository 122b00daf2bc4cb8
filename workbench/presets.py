"""Built-in targets, created after every migrate so a fresh database has them."""

from __future__ import annotations

from engine.targets.host import host_target_profile
from workbench.models import Target


def ensure_presets() -> list[Target]:
    profile = host_target_profile()
    host = Target.objects.filter(owner__isnull=True, name="host").order_by("-version").first()
    if host is None:
        host = Target.objects.create(
            name="host",
            kind=Target.Kind.MEASURED,
            description=profile["description"],
            profile=profile,
            version=1,
        )
    elif host.profile.get("machine") != profile["machine"]:
        # The machine changed (new worker hardware): keep history, add a version.
        host = Target.objects.create(
            name="host",
            kind=Target.Kind.MEASURED,
            description=profile["description"],
            profile=profile,
            version=host.version + 1,
        )
    return [host]


def on_post_migrate(sender, **kwargs) -> None:
    if sender.name == "workbench":
        ensure_presets()
