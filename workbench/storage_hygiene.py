"""Files nothing refers to any more: removed when their last row goes, and found by
``manage.py orphans`` (report; ``--delete`` removes them). Stored files are listed and
deleted through Django's storage API, so this works on local disk and on S3 alike.

Uploads are stored once per content (``models/ab/<sha256>.onnx``), so one file may back
several rows (two accounts uploading the same model): a file goes only when no model, input
set or artifact row names it. Prepared models (``var/prepared/<key>.onnx|.json``) go with
the last model of their source's sha256. Upload scratch files (``MEDIA_ROOT/tmp/``, on the
web machine) older than a day are orphans too (a web process killed mid-upload leaves them).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction

log = logging.getLogger(__name__)

STORED_DIRS = ("models", "inputs", "artifacts")
SCRATCH_MAX_AGE_S = 24 * 3600


def _scratch_dir() -> Path:
    return Path(settings.MEDIA_ROOT) / "tmp"


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
    """Stored files (storage names) and this machine's files (paths) nothing uses."""

    stored: list[str] = field(default_factory=list)
    local: list[Path] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return self.stored + [str(p) for p in self.local]

    @property
    def bytes(self) -> int:
        total = sum(p.stat().st_size for p in self.local if p.exists())
        for name in self.stored:
            try:
                total += default_storage.size(name)
            except FileNotFoundError:
                continue
        return total


def _walk(top: str):
    """Every stored file's name under ``top``, through the storage API (any backend)."""
    try:
        dirs, files = default_storage.listdir(top)
    except FileNotFoundError:  # local disk: nothing stored there yet
        return
    for name in files:
        yield f"{top}/{name}"
    for sub in dirs:
        yield from _walk(f"{top}/{sub}")


def find_orphans() -> Orphans:
    referenced = referenced_files()
    found = Orphans()
    for top in STORED_DIRS:
        found.stored += [name for name in _walk(top) if name not in referenced]
    scratch = _scratch_dir()
    if scratch.exists():
        now = time.time()
        found.local += [
            p
            for p in scratch.iterdir()
            if p.is_file() and now - p.stat().st_mtime > SCRATCH_MAX_AGE_S
        ]
    sources = _referenced_sources()
    found.local += _prepared_files(lambda source: source not in sources)
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


def remove(orphans: Orphans) -> int:
    """Delete the orphans (and, on local disk, the folders they leave empty); returns
    bytes freed."""
    freed = 0
    for name in orphans.stored:
        try:
            size = default_storage.size(name)
        except FileNotFoundError:
            continue
        default_storage.delete(name)
        freed += size
        _remove_empty_folders(name)
    for path in orphans.local:
        try:
            size = path.stat().st_size
            path.unlink()
            freed += size
        except FileNotFoundError:
            continue
    return freed


def _remove_empty_folders(name: str) -> None:
    """Local disk keeps folders (object stores have none): drop those ``name`` emptied."""
    try:
        root = Path(default_storage.path(""))
        parent = Path(default_storage.path(name)).parent
    except NotImplementedError:
        return
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
        parent = parent.parent


def _forget_file(name: str, sha256: str | None = None) -> None:
    """After commit: remove the stored file ``name`` if no row names it any more (and, for a
    model, its prepared copies if no model of that content is left)."""
    if not name:
        return

    def later() -> None:
        if name in referenced_files():
            return
        orphans = Orphans(stored=[name])
        if sha256 and sha256 not in _referenced_sources():
            orphans.local = _prepared_files(lambda source: source == sha256)
        freed = remove(orphans)
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
