"""Greedy shared objects: TFLite's Algorithm 1 (tflite_gpu section 2.7.3a).

Walk the execution order; each tensor produced at a step takes the free object whose
size is nearest its own (growing it if smaller) or a new one; then the tensors whose
last use is this step free their objects. Outputs are assigned before inputs are
released, so an op's input and output never share an object. The paper keeps the free
objects in a BST; a sorted list with bisection does the same here.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from engine.memory.lifetimes import Buffer
from engine.memory.planners.registry import Placement, PlannerOptions, objects_placement, register


@register("greedy-objects", kind="objects")
def plan_greedy_objects(
    buffers: Sequence[Buffer], steps: int, options: PlannerOptions
) -> Placement:
    """TFLite greedy: reuse the free object of nearest size, else open a new one."""
    starting: list[list[int]] = [[] for _ in range(steps)]
    ending: list[list[int]] = [[] for _ in range(steps)]
    for i, b in enumerate(buffers):
        starting[b.first].append(i)
        ending[b.last].append(i)
    objects = [0] * len(buffers)
    sizes: list[int] = []
    free: list[tuple[int, int]] = []  # (size, object), sorted
    for step in range(steps):
        for i in starting[step]:
            size = buffers[i].size
            if not free:
                objects[i] = len(sizes)
                sizes.append(size)
                continue
            at = bisect.bisect_left(free, (size, -1))
            nearby = [j for j in (at - 1, at) if 0 <= j < len(free)]
            # Nearest size wins; on a tie the larger object, which need not grow.
            pick = min(nearby, key=lambda j: (abs(free[j][0] - size), -free[j][0]))
            _, obj = free.pop(pick)
            sizes[obj] = max(sizes[obj], size)
            objects[i] = obj
        for i in ending[step]:
            obj = objects[i]
            bisect.insort(free, (sizes[obj], obj))
    return objects_placement(objects, sizes)
