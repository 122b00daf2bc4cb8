"""The worker's local copies of stored files: fetched once, checked, bounded."""

from __future__ import annotations

import hashlib
import os
import time

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage

from jobs.localcopy import PARTIAL_PREFIX, StoredFileError, fetch, local_path, prune
from workbench.models import OnnxModel


class RemoteStorage(FileSystemStorage):
    """Stands for a remote store (fetch reads through the storage API only); counts opens."""

    opened = 0

    def _open(self, name, mode="rb"):
        self.opened += 1
        return super()._open(name, mode)


@pytest.fixture
def remote(tmp_path):
    return RemoteStorage(location=tmp_path / "bucket")


def put(storage, name: str, data: bytes) -> str:
    storage.save(name, ContentFile(data))
    return hashlib.sha256(data).hexdigest()


def test_a_stored_file_is_fetched_once_and_checked(remote, tmp_path):
    data = os.urandom(3 << 20)  # several chunks
    sha = put(remote, "models/ab/m.onnx", data)
    cache = tmp_path / "cache"
    path = fetch(remote, "models/ab/m.onnx", sha, cache_dir=cache, max_bytes=1 << 30)
    assert path == cache / sha[:2] / f"{sha}.onnx"
    assert path.read_bytes() == data
    assert remote.opened == 1
    # the second use reads the cached copy, even if the stored file has gone since
    remote.delete("models/ab/m.onnx")
    assert fetch(remote, "models/ab/m.onnx", sha, cache_dir=cache, max_bytes=1 << 30) == path
    assert remote.opened == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial left


def test_bytes_that_are_not_the_recorded_ones_are_refused_and_not_cached(remote, tmp_path):
    put(remote, "inputs/x.npz", b"changed in storage")
    cache = tmp_path / "cache"
    wanted = hashlib.sha256(b"what was uploaded").hexdigest()
    with pytest.raises(StoredFileError, match="was changed or damaged"):
        fetch(remote, "inputs/x.npz", wanted, cache_dir=cache, max_bytes=1 << 30)
    assert not [p for p in cache.rglob("*") if p.is_file()]


def test_a_missing_stored_file_says_so(remote, tmp_path):
    with pytest.raises(StoredFileError, match="missing from storage"):
        fetch(remote, "models/none.onnx", "0" * 64, cache_dir=tmp_path / "c", max_bytes=1)


def test_the_cache_keeps_to_its_bound_dropping_the_least_recently_used(remote, tmp_path):
    cache = tmp_path / "cache"
    shas = [put(remote, f"m{i}.onnx", bytes([i]) * 1000) for i in range(3)]
    paths = [
        fetch(remote, f"m{i}.onnx", s, cache_dir=cache, max_bytes=10**6) for i, s in enumerate(shas)
    ]
    hour_ago = time.time() - 3600
    for age, path in enumerate(paths):  # m0 used longest ago, m2 most recently
        os.utime(path, (hour_ago + age, hour_ago + age))
    abandoned = paths[0].parent / f"{PARTIAL_PREFIX}dead"
    abandoned.write_bytes(b"x" * 10)
    os.utime(abandoned, (hour_ago - 7200, hour_ago - 7200))
    assert prune(cache, 2000) == 1010
    assert [p.exists() for p in paths] == [False, True, True] and not abandoned.exists()
    # a file used within the last minute stays even past the bound: a stage may open it now
    os.utime(paths[1])
    prune(cache, 0)
    assert [p.exists() for p in paths] == [False, True, False]


def test_a_file_on_local_disk_is_used_where_it_is(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.VAR_DIR = tmp_path / "var"
    model = OnnxModel(file="models/ab/m.onnx")
    sha = put(model.file.storage, "models/ab/m.onnx", b"onnx bytes")
    assert local_path(model.file, sha) == tmp_path / "media" / "models" / "ab" / "m.onnx"
    assert not (tmp_path / "var" / "blobs").exists()
