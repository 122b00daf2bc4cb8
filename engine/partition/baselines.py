"""Single-unit baselines: every op on one unit, in topological order.

The best of them is what every partitioned plan must beat to be worth its complexity.
"""

from __future__ import annotations

from engine.partition.objective import objective_for
from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.registry import SINGLE_PREFIX, NoPlan, Plan, register, register_family
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
    """The best single unit for the objective (the fastest, latency-first)."""
    objective = objective_for(problem, options)
    schedules = {
        problem.units[u]: simulate(problem, (u,) * problem.n, range(problem.n))
        for u in problem.full_units
        if not problem.unpriced_moves((u,) * problem.n)
    }
    if not schedules:
        raise PartitionError("no unit can run every op", code="unplaceable")
    best = min(
        schedules, key=lambda u: (objective.schedule_key(schedules[u]), problem.unit_index[u])
    )
    if objective.over_cap_us(schedules[best].makespan_us):
        raise NoPlan(
            f"no single unit runs the model within the latency cap of "
            f"{objective.cap_us / 1e3:g} ms",
            details={"unit": best},
        )
    return Plan(
        (problem.unit_index[best],) * problem.n, tuple(range(problem.n)), details={"unit": best}
    )
