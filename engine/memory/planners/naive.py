"""Naive: one allocation per tensor, the baseline of tflite_gpu section 2.7.2 (a)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.memory.lifetimes import Buffer
from engine.memory.planners.registry import Placement, PlannerOptions, objects_placement, register


@register("naive", kind="objects")
def plan_naive(buffers: Sequence[Buffer], steps: int, options: PlannerOptions) -> Placement:
    """One object per buffer: no sharing at all."""
    return objects_placement(list(range(len(buffers))), [b.size for b in buffers])
