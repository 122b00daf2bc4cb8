"""Files a stage produces (compiled library, sub-models, plans), kept in storage with their
sha256 so users and CI can verify what they download.

The worker uploads them through Django's storage (streamed: a multipart upload on S3), so
the web process serves them without sharing the worker's disk.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.db.models import Sum

from workbench import limits
from workbench.models import Artifact, StageResult
from workbench.storage import save_file


def check_quota(stage: StageResult, paths: list[Path]) -> None:
    """Raise ``limits.LimitExceeded`` when storing ``paths`` as the stage's artifacts would
    take the run's owner over the storage quota (artifacts count as uploads do).

    Checked here, when the files exist, not when the run starts: most stages store nothing
    or a few kB, and what compile or partition will store is known only once they have
    produced it, so refusing a run up front would refuse runs that fit (a user over the
    quota can still analyze and profile). The stage fails with the quota's message and
    keeps nothing: no artifact is half-stored and no result links a missing file. A stage
    run again replaces its artifacts, so those already stored do not count twice."""
    if not paths:
        return
    replaced = Artifact.objects.filter(
        run_id=stage.run_id, stage=stage.stage, name__in=[p.name for p in paths]
    ).aggregate(total=Sum("size_bytes"))["total"]
    adding = sum(p.stat().st_size for p in paths) - (replaced or 0)
    if adding > 0:
        limits.check_storage(stage.run.owner, adding, what=f"the {stage.stage} stage's artifacts")


def save_artifact(stage: StageResult, kind: str, path: Path, name: str | None = None) -> Artifact:
    """Store `path` in the run's artifact folder and record it."""
    name = name or path.name
    with path.open("rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    # a stage run again writes its artifact again
    stored = save_file(f"artifacts/run-{stage.run_id}/{stage.stage}/{name}", path, replace=True)
    artifact, _ = Artifact.objects.update_or_create(
        run_id=stage.run_id,
        stage=stage.stage,
        name=name,
        defaults={
            "kind": kind,
            "file": stored,
            "sha256": sha256,
            "size_bytes": path.stat().st_size,
        },
    )
    return artifact
