"""Files nothing refers to any more: removed when their last row goes, and found by
``manage.py orphans`` (report; ``--delete`` removes them).

Uploads are stored once per content (``models/ab/<sha256>.onnx``), so one file may back
several rows (two accounts uploading the same model): a file goes only when no model, input
set or artifact row names it. Prepared models (``var/prepared/<key>.onnx|.json``) go with
the last model of their source's sha256. Upload scratch files (``tmp/``) older than a day
are orphans too (a web process killed mid-upload leaves them).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

STORED_DIRS = ("models", "inputs", "artifacts")
SCRATCH_MAX_AGE_S = 24 * 3600


def _media() -> Path:
    return Path(settings.MEDIA_ROOT)


def _prepared_dir() -> Path:
    return Path(settings.VAR_DIR) / "prepared"


def referenced_files() -> set[str]:
    from workbench.models import Artifact, InputData, OnnxModel

    names: set[str] = set()
    for model in (OnnxModel, InputData, Artifact):
        names.update(str(f) for f in model.objects.values_list("file", flat=True))
    return names


def _referenced_sources() -> set[str]:
    from workbench.models import OnnxModel

    return set(OnnxModel.objects.values_list("sha256", flat=True))


@dataclass
class Orphans:
    files: list[Path] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(p.stat().st_size for p in self.files if p.exists())


def find_orphans() -> Orphans:
    media = _media()
    referenced = referenced_files()
    found = Orphans()
    for top in STORED_DIRS:
        root = media / top
        if root.exists():
            for path in root.rglob("*"):
                if path.is_file() and str(path.relative_to(media)) not in referenced:
                    found.files.append(path)
    scratch = media / "tmp"
    if scratch.exists():
        now = time.time()
        found.files += [
            p
            for p in scratch.iterdir()
            if p.is_file() and now - p.stat().st_mtime > SCRATCH_MAX_AGE_S
        ]
    sources = _referenced_sources()
    found.files += _prepared_files(lambda source: source not in sources)
    return found


def _prepared_files(drop) -> list[Path]:
    """The prepared cache's files (``<key>.json`` and ``<key>.onnx``) of every entry whose
    source sha256 ``drop(source)`` is true for (``None``: an unreadable entry)."""
    prepared = _prepared_dir()
    files: list[Path] = []
    for meta in prepared.glob("*.json") if prepared.exists() else ():
        try:
            source = json.loads(meta.read_text()).get("source_sha256")
        except (OSError, ValueError):
            source = None
        if drop(source):
            files += [p for p in (meta, meta.with_suffix(".onnx")) if p.exists()]
    return files


def remove(paths: list[Path]) -> int:
    """Delete ``paths`` and the directories they leave empty; returns bytes freed."""
    freed = 0
    media = _media()
    for path in paths:
        try:
            size = path.stat().st_size
            path.unlink()
            freed += size
        except FileNotFoundError:
            continue
        parent = path.parent
        while parent != media and media in parent.parents:
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break
            parent = parent.parent
    return freed


def _forget_file(name: str, sha256: str | None = None) -> None:
    """After commit: remove the stored file ``name`` if no row names it any more (and, for a
    model, its prepared copies if no model of that content is left)."""
    if not name:
        return

    def later() -> None:
        if name in referenced_files():
            return
        paths = [_media() / name]
        if sha256 and sha256 not in _referenced_sources():
            paths += _prepared_files(lambda source: source == sha256)
        freed = remove(paths)
        if freed:
            log.info("removed %s (%d bytes) with its last row", name, freed)

    transaction.on_commit(later)


def on_model_deleted(sender, instance, **kwargs) -> None:
    _forget_file(str(instance.file), instance.sha256)


def on_file_row_deleted(sender, instance, **kwargs) -> None:
    _forget_file(str(instance.file))


def connect() -> None:
    from django.db.models.signals import post_delete

    from workbench.models import Artifact, InputData, OnnxModel

    post_delete.connect(on_model_deleted, sender=OnnxModel, dispatch_uid="wb-forget-model")
    post_delete.connect(on_file_row_deleted, sender=InputData, dispatch_uid="wb-forget-inputs")
    post_delete.connect(on_file_row_deleted, sender=Artifact, dispatch_uid="wb-forget-artifact")
