"""Reading stored files without holding them whole, on any storage backend.

Callers use :func:`open_stream` and :func:`download_url`; a backend that can do better
than Django's ``Storage.open`` (``workbench.s3storage.S3Storage``) offers methods of the
same names, and local disk falls back to ``open``.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from django.core.files import File
from django.core.files.storage import Storage, default_storage


class _LocalFile(File):
    """A file on this machine that the storage may take (local disk moves it, not copies)."""

    def temporary_file_path(self) -> str:
        return self.file.name


def save_file(name: str, path: Path, *, replace: bool = False, move: bool = False) -> str:
    """Store the local file ``path`` as ``name``, streamed (S3: a multipart upload); returns
    the name it was stored under.

    Content-addressed names keep an existing file (``replace=False``: the same name holds
    the same bytes); ``replace=True`` writes it again (a stage run again). ``move=True``
    lets local disk rename a scratch file into place instead of copying it.
    """
    storage = default_storage
    if storage.exists(name):
        if not replace:
            return name
        storage.delete(name)
    with open(path, "rb") as f:
        return storage.save(name, _LocalFile(f) if move else File(f))


def open_stream(name: str, storage: Storage | None = None) -> BinaryIO:
    """The stored file ``name`` opened for reading in chunks (``read(n)``, ``close()``);
    FileNotFoundError when it is missing."""
    storage = storage or default_storage
    opener = getattr(storage, "open_stream", None)
    return opener(name) if opener else storage.open(name, "rb")


def download_url(name: str, *, filename: str, expire_s: int, storage: Storage | None = None):
    """A link the client may fetch the file from directly, or None when the storage has
    none (local disk)."""
    storage = storage or default_storage
    maker = getattr(storage, "download_url", None)
    return maker(name, filename=filename, expire_s=expire_s) if maker else None
