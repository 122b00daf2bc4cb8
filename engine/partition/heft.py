"""HEFT list scheduling (Topcuoglu et al., 2002), the StarPU-style baseline of the thesis.

Ops are taken by decreasing upward rank (mean latency plus the costliest path to an exit);
each goes to the unit where it finishes earliest, counting the transfers of its inputs and,
for ops that produce graph outputs, the copy back to the home unit. Insertion-based: an op
may fill an idle gap on a unit between ops already placed there.
"""

from __future__ import annotations

from bisect import bisect_left, insort

from engine.partition.problem import PartitionProblem
from engine.partition.ranks import rank_order
from engine.partition.registry import Plan, register


@register("heft")
def schedule_heft(problem: PartitionProblem, options, progress) -> Plan:
    priority = rank_order(problem)
    starts, placement = heft_times(problem, priority)
    position = {op: k for k, op in enumerate(priority)}
    order = tuple(sorted(range(problem.n), key=lambda i: (starts[i], position[i])))
    return Plan(placement=placement, order=order)


def heft_times(
    problem: PartitionProblem, priority: tuple[int, ...]
) -> tuple[list[float], tuple[int, ...]]:
    """Place ops in ``priority`` order; return their start times and units."""
    n, units = problem.n, len(problem.units)
    start, finish = [0.0] * n, [0.0] * n
    placement = [-1] * n
    slots: list[list[tuple[float, float]]] = [[] for _ in range(units)]
    tensors = problem.tensors
    for i in priority:
        best: tuple[float, float, int, float] | None = None
        for u in problem.supported[i]:
            ready = problem.release_us[i][u]
            for k in problem.in_tensors[i]:
                t = tensors[k]
                if t.src is None:
                    continue
                at = finish[t.src] + problem.transfer_us(t.bytes, placement[t.src], u)
                ready = max(ready, at)
            lat = problem.latency_us[i][u]
            begin = _earliest_gap(slots[u], ready, lat)
            key = (begin + lat + problem.output_us[i][u], begin + lat, u, begin)
            if best is None or key < best:
                best = key
        assert best is not None
        _, end, u, begin = best
        start[i], finish[i], placement[i] = begin, end, u
        insort(slots[u], (begin, end))
    return start, tuple(placement)


def _earliest_gap(slots: list[tuple[float, float]], ready: float, length: float) -> float:
    """Earliest start >= ``ready`` where ``length`` fits between the sorted busy ``slots``."""
    k = max(bisect_left(slots, (ready, ready)) - 1, 0)
    begin = ready
    for s, e in slots[k:]:
        if begin + length <= s:
            return begin
        begin = max(begin, e)
    return begin
