"""Built segments kept by what they were built from: a build of the same segment for the
same target with the same schedules copies the library instead of compiling it again.

A second compile of a model (the same upload gated again in CI, or compiled again with
the tuning records the first one stored) builds the same segments: ResNet-50's took
7.9 s of a 50 s compile, and the layout check and the kernel split build again. The key
(:func:`build_key`) covers what a build reads besides the weights, which are parameters
and go in the artifact's ``.npz`` (written afresh on every hit):

- the segment's Relax module after FuseOps, by structure (:func:`structural_key`, the
  hash the tuning store keys its workloads by), its parameters' names, shapes and types;
- the tuned kernels applied ({workload key: PrimFunc}, each by structure);
- the target as the compile resolved it (kind, target and host attributes, threads,
  cross compiler);
- the compile stage's own code (:func:`code_version`) and TVM's version: a change to our
  lowering or schedules, or a TVM upgrade, misses.

An entry is a directory ``<key[:2]>/<key>/`` holding the files of one build and
``built.json`` (with each file's sha256, checked on every copy out: a damaged entry is
removed and the segment built again); it is written under a temporary name and renamed
into place, so a reader never sees half an entry, and two workers storing the same key
keep the first. The cache keeps to ``max_bytes``, least recently used entries going
first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from engine.fusion.build import BuiltSegment, save_params
from engine.fusion.workloads import code_version, structural_key

DEFAULT_MAX_BYTES = 2 << 30
_STEM = "build"
_META = "built.json"
_FORMAT = 1


class BuildCache:
    """Builds under ``directory``, at most ``max_bytes`` of them."""

    def __init__(self, directory: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0

    def _entry(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def fetch(
        self, key: str, segment, directory: Path, stem: str, *, params: bool = True
    ) -> BuiltSegment | None:
        """The build stored under ``key`` copied into ``directory`` as ``<stem>.*`` (with
        ``segment``'s weights written beside it, unless ``params`` is false), or None."""
        entry = self._entry(key)
        if not entry.exists():
            self.misses += 1
            return None
        try:
            meta = json.loads((entry / _META).read_text())
            if meta.get("format") != _FORMAT:
                raise ValueError(f"format {meta.get('format')}")
            for name, digest in meta["files"].items():
                copy = directory / (stem + name.removeprefix(_STEM))
                shutil.copyfile(entry / name, copy)
                if _sha256(copy) != digest:
                    raise ValueError(f"{name} is not the file stored")
        except (OSError, ValueError, KeyError, AttributeError):
            # pruned meanwhile, or damaged: built again, and stored again in its place
            shutil.rmtree(entry, ignore_errors=True)
            self.misses += 1
            return None
        os.utime(entry / _META)  # recently used: pruned last
        self.hits += 1
        return BuiltSegment(
            library=stem + meta["library"].removeprefix(_STEM),
            params_file=save_params(segment, directory, stem) if params else None,
            param_names=list(segment.imported.params),
            schedules=dict(meta["schedules"]),
            kernel_names=set(meta["kernel_names"]),
            kernels_library=(
                stem + meta["kernels_library"].removeprefix(_STEM)
                if meta["kernels_library"]
                else None
            ),
        )

    def put(self, key: str, directory: Path, stem: str, built: BuiltSegment) -> None:
        """Keep the build ``built`` (its files ``<stem>.*`` in ``directory``, the weights
        left out) under ``key``. A failure to store costs the next compile a build, not
        this one: it is not raised."""
        entry = self._entry(key)
        if entry.exists():
            return
        files = [built.library]
        if built.kernels_library:
            kernels = directory / built.kernels_library
            files += [kernels.name, kernels.with_suffix(".json").name]
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=entry.parent))
            renamed = [_STEM + name.removeprefix(stem) for name in files]
            for name, new in zip(files, renamed, strict=True):
                shutil.copyfile(directory / name, partial / new)
            meta = {
                "format": _FORMAT,
                "files": {new: _sha256(partial / new) for new in renamed},
                "library": renamed[0],
                "kernels_library": renamed[1] if built.kernels_library else None,
                "schedules": built.schedules,
                "kernel_names": sorted(built.kernel_names),
            }
            (partial / _META).write_text(json.dumps(meta))
            try:
                partial.rename(entry)
            except OSError:  # another worker stored it first
                shutil.rmtree(partial, ignore_errors=True)
            self.prune()
        except OSError:
            return

    def prune(self) -> int:
        """Remove the least recently used entries until the cache is within its size, and
        temporary directories a killed worker left; returns the bytes freed."""
        entries, total = [], 0
        for entry in self.directory.glob("*/*"):
            size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
            if entry.name.startswith("."):
                if time.time() - entry.stat().st_mtime > 3600:  # abandoned
                    shutil.rmtree(entry, ignore_errors=True)
                continue
            try:
                used = (entry / _META).stat().st_mtime
            except OSError:
                continue
            entries.append((used, size, entry))
            total += size
        freed = 0
        for _, size, entry in sorted(entries):
            if total - freed <= self.max_bytes:
                break
            shutil.rmtree(entry, ignore_errors=True)
            freed += size
        return freed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def build_key(segment, spec, tuned: dict | None) -> str:
    """What a build of ``segment`` for ``spec`` with ``tuned`` kernels reads (see the
    module's text), as a sha256."""
    import tvm

    params = [
        (name, list(value.shape), str(value.dtype))
        for name, value in segment.imported.params.items()
    ]
    text = json.dumps(
        {
            "format": _FORMAT,
            "module": structural_key(segment.fused),
            "params": params,
            "tuned": sorted((k, structural_key(f)) for k, f in (tuned or {}).items()),
            "target": spec.to_dict() | {"detected_from": None},
            "code": code_version(),
            "tvm": tvm.__version__,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()
