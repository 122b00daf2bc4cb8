"""Greedy by breadth, here for offsets in one arena.

From Pisarchyk & Lee (arXiv:2001.03288; tflite_gpu section 2.7.4, external to the paper):
the breadth of an operator is the total size of the tensors live at it; visit operators
by non-increasing breadth and, at each, its not yet placed tensors by non-increasing
size. TFLite assigns shared objects in that order; we place offsets instead, with the
same smallest-gap rule as greedy by size, so the two differ only in the order.

A buffer is placed at the first visited operator it is live at, i.e. the one of lowest
visiting rank in its lifetime: a range-minimum query (sparse table) instead of walking
every operator's live set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.memory.lifetimes import Buffer, live_bytes
from engine.memory.planners.gaps import place_in_order
from engine.memory.planners.registry import Placement, PlannerOptions, register


def breadth_order(buffers: Sequence[Buffer], steps: int) -> list[int]:
    """Buffer indices in greedy-by-breadth order."""
    if not buffers:
        return []
    breadth = np.asarray(live_bytes(buffers, steps), dtype=np.int64)
    visit = np.lexsort((np.arange(steps), -breadth))  # by breadth desc, then step
    rank = np.empty(steps, dtype=np.int64)
    rank[visit] = np.arange(steps)
    first = np.fromiter((b.first for b in buffers), np.int64, len(buffers))
    last = np.fromiter((b.last for b in buffers), np.int64, len(buffers))
    size = np.fromiter((b.size for b in buffers), np.int64, len(buffers))
    key = _range_min(rank, first, last)
    return np.lexsort((np.arange(len(buffers)), -size, key)).tolist()


def _range_min(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``min(values[lo[k]:hi[k] + 1])`` for every k, with a sparse table."""
    table = [values]
    while (1 << len(table)) <= len(values):
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.minimum(prev[:-half], prev[half:]))
    level = np.frexp((hi - lo + 1).astype(np.float64))[1].astype(np.int64) - 1
    out = np.empty(len(lo), dtype=values.dtype)
    for k in np.unique(level):
        sel = level == k
        row, width = table[k], 1 << int(k)
        out[sel] = np.minimum(row[lo[sel]], row[hi[sel] - width + 1])
    return out


@register("greedy-by-breadth", kind="offsets")
def plan_greedy_by_breadth(
    buffers: Sequence[Buffer], steps: int, options: PlannerOptions
) -> Placement:
    """Greedy by breadth: widest operator first, its tensors largest first, smallest gap."""
    offsets, arena = place_in_order(buffers, breadth_order(buffers, steps), steps)
    return Placement(offsets, arena)
