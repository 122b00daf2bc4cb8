"""Files a stage produces (compiled library, sub-models, plans), kept in storage with their
sha256 so users and CI can verify what they download."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from django.conf import settings

from workbench.models import Artifact, StageResult


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_artifact(stage: StageResult, kind: str, path: Path, name: str | None = None) -> Artifact:
    """Copy `path` into the run's artifact folder and record it."""
    name = name or path.name
    relative = f"artifacts/run-{stage.run_id}/{stage.stage}/{name}"
    target = Path(settings.MEDIA_ROOT) / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    artifact, _ = Artifact.objects.update_or_create(
        run_id=stage.run_id,
        stage=stage.stage,
        name=name,
        defaults={
            "kind": kind,
            "file": relative,
            "sha256": _sha256(target),
            "size_bytes": target.stat().st_size,
        },
    )
    return artifact
