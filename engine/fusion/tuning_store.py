"""Where tuning records live between runs, keyed by workload and target.

A store holds, per (target key, workload key), one JSON entry: the workload (TVM's JSON
of the kernel's IRModule), its best tuning record (MetaSchedule's JSON), the default and
tuned times on the machine that tuned it, and the trial budget it was tuned under. The
engine ships a directory backend; the job layer passes any object with the same two
methods (the workbench's is a PostgreSQL table) -- see :class:`RecordStore`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class RecordStore(Protocol):
    """The store interface: entries are plain JSON objects.

    An entry is ``{"workload": str, "records": [str, ...], "default_us": float | None,
    "tuned_us": float | None, "budget_trials": int, "kernel": str, "target": dict,
    "tvm": str}``. Several workers may write the same key at once: ``put`` stores
    :func:`merge_entries` of the stored entry and the new one, atomically.
    """

    def get(self, target_key: str, workload_key: str) -> dict | None:
        """The entry of this workload on this target, or None."""

    def put(self, target_key: str, workload_key: str, entry: dict) -> None:
        """Merge ``entry`` into the entry of this workload on this target."""


def merge_entries(stored: dict | None, new: dict) -> dict:
    """The entry a store keeps when ``new`` arrives: the new one, but with the faster of
    the two tuning records and the larger of the two budgets, so that no writer -- one
    that left the kernel untuned, or a slower concurrent tuning -- loses a better one."""
    if not stored:
        return new
    merged = dict(new)
    merged["budget_trials"] = max(stored.get("budget_trials") or 0, new.get("budget_trials") or 0)
    if stored.get("records") and not _faster(new, stored):
        merged["records"], merged["tuned_us"] = stored["records"], stored.get("tuned_us")
    return merged


def _faster(entry: dict, other: dict) -> bool:
    if not entry.get("records") or entry.get("tuned_us") is None:
        return False
    return other.get("tuned_us") is None or entry["tuned_us"] < other["tuned_us"]


class DirectoryStore:
    """One JSON file per workload under ``<root>/<target key>/``; a file lock makes each
    write atomic between the processes of one machine."""

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
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # read, merge and write as one step
            merged = merge_entries(self.get(target_key, workload_key), entry)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(merged))
            os.replace(temporary, path)

    def count(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))

    def _path(self, target_key: str, workload_key: str) -> Path:
        return self.root / _safe(target_key) / f"{_safe(workload_key)}.json"


def open_store(store: str | os.PathLike | RecordStore) -> RecordStore:
    """A store object as is; a path as a :class:`DirectoryStore` on that directory."""
    if isinstance(store, str | os.PathLike):
        return DirectoryStore(store)
    if not isinstance(store, RecordStore):
        raise TypeError(f"not a tuning store: {store!r} (a path or an object with get/put)")
    return store


def target_key(target_dict: dict, tvm_version: str) -> str:
    """Records are valid for one target description and one TVM version."""
    text = json.dumps({"target": target_dict, "tvm": tvm_version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in key)[:128]
