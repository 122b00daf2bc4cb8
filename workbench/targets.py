"""Users' own targets: created from a JSON profile (often a preset's copy), validated by
the engine's schema, versioned on every edit so earlier runs keep their profile."""

from __future__ import annotations

import json

from django.db import transaction
from django.db.models import Max, Q

from engine.targets.schema import ProfileError, validate_profile
from workbench.models import Target


class TargetRejected(ValueError):
    def __init__(self, message: str, problems: list[dict] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []


def visible_targets(user):
    return Target.objects.filter(Q(owner__isnull=True) | Q(owner=user))


def latest_versions(queryset):
    """One row per (owner, name): its newest version."""
    newest = queryset.values("owner", "name").annotate(v=Max("version"))
    keys = Q(pk__in=[])
    for row in newest:
        keys |= Q(owner=row["owner"], name=row["name"], version=row["v"])
    return queryset.filter(keys)


def parse_profile(text_or_document, *, parsed: bool = False) -> dict:
    """A target profile document from JSON text (the form's) or, ``parsed``, from a body
    the API already decoded; anything but a JSON object is a :class:`TargetRejected` that
    says what was given."""
    document = text_or_document
    if not parsed and isinstance(document, str | bytes):
        try:
            document = json.loads(document)
        except json.JSONDecodeError as e:
            raise TargetRejected(
                f"the profile is not valid JSON: {e.msg} at line {e.lineno}"
            ) from e
        except RecursionError:
            raise TargetRejected("the profile is nested too deeply to read") from None
    if not isinstance(document, dict):
        raise TargetRejected(
            f'a target profile is a JSON object ({{"name": ..., "units": [...]}}), '
            f"not {_json_kind(document)}"
        )
    return document


def _json_kind(value) -> str:
    kinds = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    for kind, name in kinds.items():
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, int | float) else type(value).__name__


def save_user_target(owner, document: dict) -> Target:
    """Validate and store a new version of the owner's target named in the document."""
    try:
        profile = validate_profile(document)
    except ProfileError as e:
        problems = [{"field": field, "reason": reason} for field, reason in e.problems]
        raise TargetRejected(e.message, problems) from e
    if profile.kind == Target.Kind.MEASURED:
        raise TargetRejected(
            "measured targets are registered by the workers themselves; describe hardware you "
            "cannot measure here as kind 'modeled'",
            [{"field": "kind", "reason": "use 'modeled' (or 'remote')"}],
        )
    if Target.objects.filter(owner__isnull=True, name=profile.name).exists():
        raise TargetRejected(
            f"'{profile.name}' is a built-in target's name: give your copy another name",
            [{"field": "name", "reason": "taken by a built-in target"}],
        )
    with transaction.atomic():
        current = (
            Target.objects.select_for_update()
            .filter(owner=owner, name=profile.name)
            .order_by("-version")
            .first()
        )
        version = current.version + 1 if current else 1
        stored = {**profile.to_dict(), "version": version}
        if current is not None and {**current.profile, "version": version} == stored:
            return current  # nothing changed: no new version
        return Target.objects.create(
            owner=owner,
            name=profile.name,
            kind=profile.kind,
            description=profile.description,
            profile=stored,
            version=version,
        )


def delete_user_target(target: Target) -> None:
    """Delete all versions of an owned target that no run refers to."""
    versions = Target.objects.filter(owner=target.owner, name=target.name)
    used = versions.filter(runs__isnull=False).distinct().count()
    if used:
        raise TargetRejected(
            f"'{target.name}' is used by runs ({used} version(s)); delete those runs first"
        )
    versions.delete()
