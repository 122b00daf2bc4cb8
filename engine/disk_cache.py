"""Least-recently-used eviction for the on-disk caches (workers' stored-file copies,
prepared models): one entry is one or more files, last used at one time."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Entry:
    key: object  # what ``keep`` names
    last_used: float  # seconds since the epoch
    files: list[tuple[Path, int]] = field(default_factory=list)  # (path, bytes)

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def evict(entries, max_bytes: int, *, now: float, in_use_s: float, keep=None) -> int:
    """Remove the least recently used entries (all their files) until the rest hold at
    most ``max_bytes``, never ``keep`` nor one used within ``in_use_s``; returns the bytes
    freed."""
    entries = sorted(entries, key=lambda e: e.last_used)
    total, freed = sum(e.size for e in entries), 0
    for entry in entries:
        if total <= max_bytes:
            break
        if entry.key == keep or now - entry.last_used < in_use_s:
            continue
        freed += sum(unlink(path, size) for path, size in entry.files)
        total -= entry.size
    return freed


def unlink(path: Path, size: int) -> int:
    """Remove ``path``; ``size`` if it was removed here, 0 if another process was first."""
    try:
        path.unlink()
        return size
    except FileNotFoundError:
        return 0
