"""The on-disk cache of prepared models: ``<key>.onnx`` and ``<key>.json`` side by side.

Written to a temporary name and renamed, so a reader never sees half a file and two
workers preparing the same model at once both end with a whole one. A cache entry that
does not read back (damaged, or written by another version) is ignored and rebuilt.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import onnx

from engine.graph.ir import build_graph
from engine.graph.loader import ModelHeader
from engine.graph.prepared import PREPARE_VERSION, PreparationReport, PreparedModel
from engine.graph.tensors import TensorSpec


def store(directory: Path, prepared: PreparedModel) -> Path:
    """Write ``prepared`` under its key; returns the path of the prepared .onnx."""
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
    _write_atomic(path, prepared.model.SerializeToString())
    _write_atomic(directory / f"{prepared.key}.json", json.dumps(meta).encode())
    return path


def load(directory: Path, key: str) -> PreparedModel | None:
    """The cached preparation under ``key``, or ``None``."""
    path, meta_path = directory / f"{key}.onnx", directory / f"{key}.json"
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("version") != PREPARE_VERSION or meta.get("key") != key:
            return None
        model = onnx.load(str(path))
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


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
