"""Where tuning records live between runs, keyed by workload and target.

A store holds, per (target key, workload key), the workload (TVM's JSON of the kernel's
IRModule) and its best tuning records (MetaSchedule's JSON). The engine ships a
directory backend; the job layer can pass any object with the same two methods (e.g. one
backed by a PostgreSQL table) -- see :class:`RecordStore`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Protocol


class RecordStore(Protocol):
    """The store interface: records are plain JSON values."""

    def get(self, target_key: str, workload_key: str) -> dict | None:
        """``{"workload": json, "records": [json, ...], "default_us": float | None}``."""

    def put(self, target_key: str, workload_key: str, entry: dict) -> None:
        """Replace the entry of this workload on this target."""


class DirectoryStore:
    """One JSON file per workload under ``<root>/<target key>/``; writes are atomic."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def get(self, target_key: str, workload_key: str) -> dict | None:
        path = self._path(target_key, workload_key)
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def put(self, target_key: str, workload_key: str, entry: dict) -> None:
        path = self._path(target_key, workload_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(entry))
        os.replace(temporary, path)

    def count(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))

    def _path(self, target_key: str, workload_key: str) -> Path:
        return self.root / _safe(target_key) / f"{_safe(workload_key)}.json"


def target_key(target_dict: dict, tvm_version: str) -> str:
    """Records are valid for one target description and one TVM version."""
    text = json.dumps({"target": target_dict, "tvm": tvm_version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key)[:128]
