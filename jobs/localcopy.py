"""Stored files as local paths, for the stages that need one (onnxruntime and TVM open files).

On local disk the stored file is its own path. Any other storage (S3) is fetched into a
cache on this worker, ``WORKBENCH_VAR_DIR/blobs/<ab>/<sha256><suffix>``: content-addressed,
so a model is downloaded once per worker whatever its name or owner, and no worker needs
another's disk. A download streams into a temporary file beside its place, is checked
against the sha256 its row records, and is renamed into place (atomic: a concurrent stage
sees the whole file or none). The cache is bounded by ``WORKBENCH_BLOB_CACHE_BYTES``: after
each download the least recently used files go, except any used in the last minute.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path, PurePosixPath

from django.conf import settings
from django.db.models.fields.files import FieldFile

from engine.disk_cache import Entry, evict, unlink
from workbench.storage import open_stream

CHUNK_BYTES = 1 << 20
IN_USE_S = 60.0  # a file returned this recently may be about to be opened: never evicted
PARTIAL_PREFIX = ".part-"
STALE_PARTIAL_S = 3600.0  # a download this old was abandoned (its worker died)


class StoredFileError(Exception):
    """A stored file is missing, or its bytes are not the ones its row records."""


def local_path(file: FieldFile, sha256: str) -> Path:
    """A path on this machine holding ``file``'s bytes (``sha256``, as its row records)."""
    try:
        return Path(file.storage.path(file.name))
    except NotImplementedError:  # not on this machine's disk
        pass
    return fetch(
        file.storage,
        file.name,
        sha256,
        cache_dir=Path(settings.VAR_DIR) / "blobs",
        max_bytes=settings.BLOB_CACHE_BYTES,
    )


def fetch(storage, name: str, sha256: str, *, cache_dir: Path, max_bytes: int) -> Path:
    """The cached copy of the stored file ``name``, downloaded first if absent."""
    place = cache_dir / sha256[:2] / (sha256 + PurePosixPath(name).suffix)
    try:
        os.utime(place)  # recently used: kept longest
        return place
    except FileNotFoundError:
        pass
    place.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=place.parent, prefix=PARTIAL_PREFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            digest = _copy_hashing(storage, name, out)
        if digest != sha256:
            raise StoredFileError(
                f"the stored file {name} has sha256 {digest}, not the {sha256} recorded for "
                "it: it was changed or damaged in storage"
            )
        os.replace(partial, place)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    prune(cache_dir, max_bytes, keep=place)
    return place


def _copy_hashing(storage, name: str, out) -> str:
    digest = hashlib.sha256()
    try:
        source = open_stream(name, storage)
    except FileNotFoundError as e:
        raise StoredFileError(f"the stored file {name} is missing from storage") from e
    try:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
            out.write(chunk)
    finally:
        source.close()
    return digest.hexdigest()


def prune(cache_dir: Path, max_bytes: int, *, keep: Path | None = None) -> int:
    """Remove the least recently used files until the cache holds at most ``max_bytes``
    (and abandoned partial downloads); returns the bytes freed."""
    now = time.time()
    entries, freed = [], 0
    for path in cache_dir.glob("*/*"):
        try:
            stat = path.stat()
        except FileNotFoundError:  # another process removed it
            continue
        if path.name.startswith(PARTIAL_PREFIX):
            if now - stat.st_mtime > STALE_PARTIAL_S:
                freed += unlink(path, stat.st_size)
            continue
        entries.append(Entry(path, stat.st_mtime, [(path, stat.st_size)]))
    return freed + evict(entries, max_bytes, now=now, in_use_s=IN_USE_S, keep=keep)
