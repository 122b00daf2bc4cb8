"""Single-unit baselines: every op on one unit, in topological order.

The best of them is what every partitioned plan must beat to be worth its complexity.
"""

from __future__ import annotations

from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.registry import SINGLE_PREFIX, Plan, register, register_family
from engine.partition.simulator import simulate


def single_unit(problem: PartitionProblem, unit: str) -> Plan:
    """All ops on ``unit``; raises :class:`PartitionError` if it cannot run them all."""
    u = problem.unit_index.get(unit)
    if u is None:
        raise PartitionError(f"unknown unit '{unit}'", code="usage")
    if u not in problem.full_units:
        raise PartitionError(f"unit '{unit}' cannot run every op", code="unplaceable")
    return Plan(placement=(u,) * problem.n, order=tuple(range(problem.n)))


def single_unit_makespans(problem: PartitionProblem) -> dict[str, float]:
    """Simulated makespan in microseconds on each unit that runs every op, leaving out a
    unit that would need a tensor of unknown size moved (from or to the home unit)."""
    return {
        problem.units[u]: simulate(problem, (u,) * problem.n, range(problem.n)).makespan_us
        for u in problem.full_units
        if not problem.unpriced_moves((u,) * problem.n)
    }


@register_family(SINGLE_PREFIX)
def on_one_unit(unit: str):
    """The algorithm ``single:<unit>``: every op on ``unit``."""
    return lambda problem, options, progress: single_unit(problem, unit)


@register("single-unit")
def best_single_unit(problem, options, progress) -> Plan:
    """The fastest single unit."""
    makespans = single_unit_makespans(problem)
    if not makespans:
        raise PartitionError("no unit can run every op", code="unplaceable")
    best = min(makespans, key=lambda u: (makespans[u], problem.unit_index[u]))
    return Plan(
        (problem.unit_index[best],) * problem.n, tuple(range(problem.n)), details={"unit": best}
    )
