"""The on-disk cache of prepared models: ``<key>.onnx`` and ``<key>.json`` side by side.

Written to a temporary name and renamed, so a reader never sees half a file and two
workers preparing the same model at once both end with a whole one. A cache entry that
does not read back (damaged, or written by another version) is ignored and rebuilt.

Bounded: with ``max_bytes``, each new entry is followed by a prune that removes the least
recently used entries (a read marks its entry used) until the cache holds at most that,
except the entry just written and any used in the last minute (a stage about to read it),
and removes temporary files a killed worker left behind. Before, every model and every
shape a worker ever prepared stayed on its disk.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import onnx

from engine.disk_cache import Entry, evict, unlink
from engine.graph.ir import build_graph
from engine.graph.loader import ModelHeader
from engine.graph.prepared import PREPARE_VERSION, PreparationReport, PreparedModel
from engine.graph.tensors import TensorSpec

IN_USE_S = 60.0  # an entry read or written this recently may be about to be used: kept
STALE_TEMP_S = 3600.0  # a temporary file this old was abandoned (its worker died)


def store(directory: Path, prepared: PreparedModel, max_bytes: int | None = None) -> Path:
    """Write ``prepared`` under its key; returns the path of the prepared .onnx. With
    ``max_bytes``, the cache is then pruned to that size (see the module's text)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{prepared.key}.onnx"
    meta = {
        "version": PREPARE_VERSION,
        "key": prepared.key,
        "source_sha256": prepared.source_sha256,
        "header": prepared.header.to_dict(),
        "report": prepared.report.to_dict(),
        "user_nodes": {k: list(v) for k, v in prepared.user_nodes.items()},
        "folded_nodes": list(prepared.folded_nodes),
    }
    write_atomic(path, prepared.model.SerializeToString())
    write_atomic(directory / f"{prepared.key}.json", json.dumps(meta).encode())
    if max_bytes is not None:
        prune(directory, max_bytes, keep=prepared.key)
    return path


def prune(directory: Path, max_bytes: int, *, keep: str | None = None) -> int:
    """Remove the least recently used entries (both files) until the cache holds at most
    ``max_bytes``, and abandoned temporary files; returns the bytes freed."""
    now = time.time()
    entries: dict[str, Entry] = {}
    freed = 0
    for path in directory.iterdir():
        try:
            stat = path.stat()
        except FileNotFoundError:  # another worker removed it
            continue
        if path.name.startswith("."):  # write_atomic's temporary name
            if now - stat.st_mtime > STALE_TEMP_S:
                freed += unlink(path, stat.st_size)
            continue
        if path.suffix not in (".onnx", ".json"):
            continue
        entry = entries.setdefault(path.stem, Entry(path.stem, 0.0))
        if path.suffix == ".onnx":
            entry.last_used = stat.st_mtime  # a read touches the model
        entry.files.append((path, stat.st_size))
    return freed + evict(entries.values(), max_bytes, now=now, in_use_s=IN_USE_S, keep=keep)


def load(directory: Path, key: str) -> PreparedModel | None:
    """The cached preparation under ``key``, or ``None``."""
    path, meta_path = directory / f"{key}.onnx", directory / f"{key}.json"
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("version") != PREPARE_VERSION or meta.get("key") != key:
            return None
        model = onnx.load(str(path))
        os.utime(path)  # used now: the prune keeps it longest
        header = meta["header"]
        return PreparedModel(
            model=model,
            graph=build_graph(model),
            header=ModelHeader(
                ir_version=header["ir_version"],
                opsets=header["opsets"],
                producer=header["producer"],
                graph_name=header["graph_name"],
                node_count=header["node_count"],
                inputs=[TensorSpec(**s) for s in header["inputs"]],
                outputs=[TensorSpec(**s) for s in header["outputs"]],
            ),
            key=key,
            source_sha256=meta["source_sha256"],
            report=PreparationReport.from_dict(meta["report"]),
            user_nodes={k: tuple(v) for k, v in meta["user_nodes"].items()},
            folded_nodes=tuple(meta["folded_nodes"]),
            path=path,
        )
    except Exception:  # noqa: BLE001 - missing, damaged or foreign: rebuild rather than fail
        return None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: readers in other processes see the
    old file, the new one, or none (a temporary ``.<name>.*`` beside it, then renamed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
