"""Placing buffers one by one into the gaps between placed, time-overlapping buffers.

The placement step of TFLite's offset planners (tflite_gpu section 2.7.4, from the later
TFLite source): given the buffers already placed whose lifetimes intersect the new one,
scanned by offset, put the new one in the smallest gap that holds it ("best" fit) or the
lowest one ("first" fit); if none does, just above the highest of them.

Finding the intersecting buffers must not cost a scan of all placed ones (that is
quadratic on a 20,000-tensor graph). :class:`TimeIndex` answers it with two segment trees
over the steps: buffers that contain the new one's first step, plus buffers that start
inside its lifetime.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from engine.memory.lifetimes import Buffer


class TimeIndex:
    """The placed buffers, queryable by lifetime intersection."""

    def __init__(self, steps: int) -> None:
        self._n = max(1, 1 << max(steps - 1, 0).bit_length())
        # Segment-tree nodes -> keys; dicts, since most nodes of a long order stay empty.
        self._covering: defaultdict[int, list[int]] = defaultdict(list)
        self._starting: defaultdict[int, list[int]] = defaultdict(list)

    def add(self, key: int, first: int, last: int) -> None:
        lo, hi = first + self._n, last + self._n + 1
        while lo < hi:
            if lo & 1:
                self._covering[lo].append(key)
                lo += 1
            if hi & 1:
                hi -= 1
                self._covering[hi].append(key)
            lo >>= 1
            hi >>= 1
        node = first + self._n
        while node:
            self._starting[node].append(key)
            node >>= 1

    def overlapping(self, first: int, last: int) -> list[int]:
        """Keys of the buffers live at some step of ``[first, last]``, each once."""
        found: list[int] = []
        covering, starting = self._covering, self._starting
        node = first + self._n
        while node:
            if node in covering:
                found += covering[node]
            node >>= 1
        lo, hi = first + 1 + self._n, last + self._n + 1
        while lo < hi:
            if lo & 1:
                if lo in starting:
                    found += starting[lo]
                lo += 1
            if hi & 1:
                hi -= 1
                if hi in starting:
                    found += starting[hi]
            lo >>= 1
            hi >>= 1
        return found


def choose_offset(size: int, taken: Iterable[tuple[int, int]], fit: str = "best") -> int:
    """Offset for ``size`` bytes among ``taken`` ``(offset, end)`` ranges."""
    best, best_gap = -1, -1
    top = 0
    for offset, end in sorted(taken):
        gap = offset - top
        if gap >= size and (best < 0 or gap < best_gap):
            best, best_gap = top, gap
            if fit == "first":
                return best
        top = max(top, end)
    return best if best >= 0 else top


def place_in_order(
    buffers: Sequence[Buffer], order: Iterable[int], steps: int, fit: str = "best"
) -> tuple[list[int], int]:
    """Place ``buffers`` in the given order; returns ``(offsets, arena_bytes)``."""
    index = TimeIndex(steps)
    offsets = [0] * len(buffers)
    ends = [0] * len(buffers)
    arena = 0
    for i in order:
        b = buffers[i]
        taken = [(offsets[j], ends[j]) for j in index.overlapping(b.first, b.last)]
        offset = choose_offset(b.size, taken, fit)
        offsets[i], ends[i] = offset, offset + b.size
        arena = max(arena, ends[i])
        index.add(i, b.first, b.last)
    return offsets, arena
