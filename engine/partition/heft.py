"""HEFT list scheduling (Topcuoglu et al., 2002), the StarPU-style baseline of the thesis.

Ops are taken by decreasing upward rank (mean latency plus the costliest path to an exit);
each goes to the unit where it finishes earliest, counting the transfers of its inputs and,
for ops that produce graph outputs, the copy back to the home unit. Insertion-based: an op
may fill an idle gap on a unit between ops already placed there.

Under an energy or weighted objective (:mod:`engine.partition.objective`) the unit is the
one with the least :meth:`~engine.partition.objective.Objective.step_cost` of the op's
finish time and its energy (above idle, plus uploads of its inputs), as energy-aware HEFT
variants do; ties still go to the earliest finish. A latency cap is met by shifting the
weight towards latency (:func:`~engine.partition.objective.within_cap`).
"""

from __future__ import annotations

from bisect import bisect_left, insort

from engine.partition.energy import op_energy_uj, upload_w
from engine.partition.objective import Objective, objective_for, within_cap
from engine.partition.problem import PartitionProblem
from engine.partition.ranks import rank_order
from engine.partition.registry import Plan, register


@register("heft")
def schedule_heft(problem: PartitionProblem, options, progress) -> Plan:
    objective = objective_for(problem, options)
    return within_cap(problem, objective, lambda o: _heft(problem, o), "heft")


def _heft(problem: PartitionProblem, objective: Objective) -> Plan:
    priority = rank_order(problem)
    starts, placement = heft_times(problem, priority, objective)
    position = {op: k for k, op in enumerate(priority)}
    order = tuple(sorted(range(problem.n), key=lambda i: (starts[i], position[i])))
    return Plan(placement=placement, order=order)


def heft_times(
    problem: PartitionProblem, priority: tuple[int, ...], objective: Objective | None = None
) -> tuple[list[float], tuple[int, ...]]:
    """Place ops in ``priority`` order; return their start times and units."""
    energy = None if objective is None or not objective.uses_energy else op_energy_uj(problem)
    n, units = problem.n, len(problem.units)
    start, finish = [0.0] * n, [0.0] * n
    placement = [-1] * n
    slots: list[list[tuple[float, float]]] = [[] for _ in range(units)]
    tensors = problem.tensors
    for i in priority:
        best: tuple[float, ...] | None = None
        for u in problem.supported[i]:
            ready = problem.release_us[i][u]
            spent = 0.0 if energy is None else energy[i][u]
            for k in problem.in_tensors[i]:
                t = tensors[k]
                src = problem.home if t.src is None else placement[t.src]
                moved = problem.transfer_us(t.bytes, src, u)
                if energy is not None:
                    spent += upload_w(problem, src, u) * moved
                if t.src is not None:
                    ready = max(ready, finish[t.src] + moved)
            lat = problem.latency_us[i][u]
            begin = _earliest_gap(slots[u], ready, lat)
            done = begin + lat + problem.output_us[i][u]
            key = (done, begin + lat, u, begin)
            if energy is not None:
                key = (objective.step_cost(done, spent), *key)
            if best is None or key < best:
                best = key
        assert best is not None
        end, u, begin = best[-3:]
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
