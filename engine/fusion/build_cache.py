"""Built segments kept by what they were built from: a build of the same segment for the
same target with the same schedules copies the library instead of compiling it again.

A second compile of a model (the same upload gated again in CI, or compiled again with
the tuning records the first one stored) builds the same segments: ResNet-50's took
7.9 s of a 50 s compile, and the layout check and the kernel split build again. The key
(:func:`build_key`) covers what a build reads besides the weights, which are parameters
and go in the artifact's ``.npz`` (written afresh on every hit):

- the segment's Relax module after FuseOps (the sha256 of TVM's serialization of it), its
  parameters' names, shapes and types;
- the tuned kernels applied ({workload key: PrimFunc}, each by structure);
- the target as the compile resolved it (kind, target and host attributes, threads,
  cross compiler, whether the kernels get a library of their own);
- the compile stage's own code (:func:`code_version`) and TVM's (version, commit, LLVM,
  tvm-ffi): a change to our lowering or schedules, or another TVM, misses.

An entry is a directory ``<key[:2]>/<key>/`` holding the files of one build and
``built.json`` (with each file's sha256, checked on every copy out: a damaged entry is
removed and the segment built again); it is written under a temporary name and renamed
into place, so a reader never sees half an entry, and two workers storing the same key
keep the first. The cache keeps to ``max_bytes``, least recently used entries going
first.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from engine.fusion.build import BuiltSegment, kernel_arguments_file, save_params
from engine.fusion.workloads import code_version

DEFAULT_MAX_BYTES = 2 << 30
ABANDONED_S = 3600.0  # a temporary directory or an entry with no record this old is left over
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
            files = dict(meta["files"])
            library, kernels = meta["library"], meta["kernels_library"]
            if library not in files or (kernels is not None and kernels not in files):
                raise ValueError("a library the entry does not hold")
            found = BuiltSegment(
                library=stem + library.removeprefix(_STEM),
                params_file=None,
                param_names=list(segment.imported.params),
                schedules={str(k): str(v) for k, v in dict(meta["schedules"]).items()},
                kernel_names={str(n) for n in meta["kernel_names"]},
                kernels_library=stem + kernels.removeprefix(_STEM) if kernels else None,
            )
            for name, digest in files.items():
                copy = directory / (stem + name.removeprefix(_STEM))
                shutil.copyfile(entry / name, copy)
                if _sha256(copy) != digest:
                    raise ValueError(f"{name} is not the file stored")
        except (OSError, ValueError, KeyError, AttributeError, TypeError):
            # pruned meanwhile, or damaged: built again, and stored again in its place
            shutil.rmtree(entry, ignore_errors=True)
            self.misses += 1
            return None
        with contextlib.suppress(OSError):  # pruned since: the copies are whole and checked
            os.utime(entry / _META)  # recently used: pruned last
        self.hits += 1
        if params:
            found.params_file = save_params(segment, directory, stem)
        return found

    def put(self, key: str, directory: Path, stem: str, built: BuiltSegment) -> None:
        """Keep the build ``built`` (its files ``<stem>.*`` in ``directory``, the weights
        left out) under ``key``. A failure to store costs the next compile a build, not
        this one: it is not raised."""
        entry = self._entry(key)
        if entry.exists():
            return
        files = [built.library]
        if built.kernels_library:
            files += [built.kernels_library, kernel_arguments_file(built.kernels_library)]
        partial = None
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
            partial.rename(entry)
            partial = None
        except OSError:  # another worker stored it first, or the disk refused
            pass
        finally:
            if partial is not None:
                shutil.rmtree(partial, ignore_errors=True)
        self.prune()

    def prune(self) -> int:
        """Remove the least recently used entries until the cache is within its size, and
        what a killed or interrupted worker left (a temporary directory, an entry with no
        ``built.json``) after an hour; returns the bytes freed."""
        entries, total, now = [], 0, time.time()
        for entry in self.directory.glob("*/*"):
            try:
                size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
                meta = entry / _META
                if entry.name.startswith(".") or not meta.exists():
                    if now - entry.stat().st_mtime > ABANDONED_S:
                        shutil.rmtree(entry, ignore_errors=True)
                    continue
                entries.append((meta.stat().st_mtime, size, entry))
            except OSError:  # removed by another worker meanwhile
                continue
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


def tuned_part(tuned: dict | None) -> list:
    """The tuned kernels' part of :func:`build_key`, computed once for every segment."""
    import tvm

    return sorted(
        (k, hashlib.sha256(tvm.ir.save_json(f).encode()).hexdigest())
        for k, f in (tuned or {}).items()
    )


@functools.cache
def tvm_identity() -> dict:
    """TVM as this process loaded it: its version, build options and the size and time
    of each of its libraries (a source build keeps its version string across commits)."""
    import tvm
    import tvm_ffi

    libraries = {}
    for name, lib in sorted(getattr(tvm.base, "_LOADED_LIBS", {}).items()):
        try:
            stat = os.stat(lib._name)
            libraries[name] = [stat.st_size, stat.st_mtime_ns]
        except (AttributeError, OSError, TypeError):
            libraries[name] = None
    return {
        "version": tvm.__version__,
        "ffi": tvm_ffi.__version__,
        "libinfo": dict(tvm.support.libinfo()),
        "libraries": libraries,
    }


def build_key(segment, spec, tuned: dict | None, tuned_key: list | None = None) -> str:
    """What a build of ``segment`` for ``spec`` with ``tuned`` kernels reads (see the
    module's text), as a sha256. ``tuned_key``: :func:`tuned_part` of ``tuned``, when the
    caller computed it already."""
    import tvm

    params = [
        (name, list(value.shape), str(value.dtype))
        for name, value in segment.imported.params.items()
    ]
    text = json.dumps(
        {
            "format": _FORMAT,
            # the whole module as TVM serializes it: a 64-bit structural hash alone could
            # serve one model another's library
            "module": hashlib.sha256(tvm.ir.save_json(segment.fused).encode()).hexdigest(),
            "params": params,
            "tuned": tuned_part(tuned) if tuned_key is None else tuned_key,
            "target": spec.to_dict() | {"detected_from": None},
            "kernels_library": bool(spec.kernels_library),
            "code": code_version(),
            "tvm": tvm_identity(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()
