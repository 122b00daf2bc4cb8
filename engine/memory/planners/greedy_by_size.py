"""Greedy by size for offsets (Pisarchyk & Lee, arXiv:2001.03288; TFLite's
``GreedyBySizeAssignment``, summarised in tflite_gpu section 2.7.4, which marks it as
external to the paper): largest buffer first, each into the smallest gap among the placed
buffers whose lifetimes intersect it, else above them.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.memory.lifetimes import Buffer
from engine.memory.planners.gaps import place_in_order
from engine.memory.planners.registry import Placement, PlannerOptions, register


def size_order(buffers: Sequence[Buffer]) -> list[int]:
    """Indices by non-increasing size, ties by position (a stable sort, as TFLite's)."""
    return sorted(range(len(buffers)), key=lambda i: -buffers[i].size)


@register("greedy-by-size", kind="offsets")
def plan_greedy_by_size(
    buffers: Sequence[Buffer], steps: int, options: PlannerOptions
) -> Placement:
    """TFLite greedy by size: largest first, smallest fitting gap."""
    offsets, arena = place_in_order(buffers, size_order(buffers), steps)
    return Placement(offsets, arena)
