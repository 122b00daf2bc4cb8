"""What a partitioning algorithm minimises: the makespan, the energy, a weighted sum, or the
energy under a latency cap.

DNNTune tunes for latency-first or energy-first (thesis 3.1, L494); HOPE minimises the
makespan only. Here every algorithm reads one :class:`Objective`:

- ``latency``: the makespan (the algorithms' own behaviour, unchanged);
- ``energy``: the predicted energy (:mod:`engine.partition.energy`), ties to the makespan;
- ``weighted``: ``alpha x T / T0 + (1 - alpha) x E / E0``, where ``T0`` is a lower bound on
  the makespan (:func:`engine.partition.ranks.lower_bound_us`) and ``E0`` one on the
  energy (each op on its least-energy unit, every unit idle for ``T0``), so that the two
  terms are numbers near 1 and ``alpha`` means the same on every model;
- with ``latency_cap_ms``, a plan whose makespan exceeds the cap ranks after every plan
  within it (ordered by how far over), and an algorithm that finds none within the cap
  has no plan and says why.

A heuristic that places one op (or a window of ops) at a time scores a choice by
:meth:`Objective.step_cost`, the same sum with the partial schedule's finish time standing
in for the makespan; its result is then judged, like every plan, by the simulator's
makespan and energy through :meth:`Objective.key`. :func:`within_cap` gives a heuristic
that has no cap of its own one: it shifts the weight towards latency until a plan fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from engine.partition.energy import energy_unknown_reason, idle_w, op_energy_uj
from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.ranks import lower_bound_us
from engine.partition.registry import NoPlan, PartitionOptions, Plan
from engine.partition.simulator import Schedule, checked_schedule

OBJECTIVES = ("latency", "energy", "weighted")
_TIE = 1e-6  # weight of the makespan under the energy objective: a tie-break only
_CAP_STEPS = 10  # bisection steps of within_cap() over the weight of latency


@dataclass(frozen=True)
class Objective:
    """Weights and cap of one objective; times in microseconds, energy in microjoules."""

    kind: str = "latency"
    alpha: float = 1.0
    cap_us: float | None = None
    time_ref_us: float = 1.0
    energy_ref_uj: float = 1.0
    idle_w: float = 0.0

    @property
    def latency_first(self) -> bool:
        """Plain makespan minimisation: the algorithms run as they always did."""
        return self.kind == "latency" and self.cap_us is None

    @property
    def uses_energy(self) -> bool:
        """Whether the objective reads energy (every unit's power must then be known)."""
        return self.kind != "latency"

    @property
    def energy_weight(self) -> float:
        """Weight of a microjoule of energy."""
        if self.kind == "latency":
            return 0.0
        share = 1.0 if self.kind == "energy" else 1.0 - self.alpha
        return share / self.energy_ref_uj

    @property
    def time_weight(self) -> float:
        """Weight of a microsecond of makespan, the units' idle draw included."""
        if self.kind == "latency":
            return 1.0 / self.time_ref_us
        share = _TIE if self.kind == "energy" else self.alpha
        return share / self.time_ref_us + self.energy_weight * self.idle_w

    def step_cost(self, finish_us: float, active_uj: float) -> float:
        """A partial schedule's cost: its finish time and the energy above idle so far."""
        return self.time_weight * finish_us + self.energy_weight * active_uj

    def with_weight(self, alpha: float) -> Objective:
        """The weighted objective with latency weight ``alpha`` and the same cap."""
        return Objective("weighted", alpha, self.cap_us, *self._refs())

    def _refs(self) -> tuple[float, float, float]:
        return self.time_ref_us, self.energy_ref_uj, self.idle_w

    def over_cap_us(self, makespan_us: float) -> float:
        if self.cap_us is None:
            return 0.0
        return max(0.0, makespan_us - self.cap_us * (1 + 1e-9))

    def key(self, makespan_us: float, energy_mj: float | None) -> tuple[float, ...]:
        """Sort key of a plan (smaller is better): over the cap, then the objective."""
        over = self.over_cap_us(makespan_us)
        if self.kind == "latency":
            return (over, makespan_us)
        energy_uj = math.inf if energy_mj is None else energy_mj * 1e3
        if self.kind == "energy":
            return (over, energy_uj, makespan_us)
        time = self.alpha / self.time_ref_us * makespan_us
        return (over, time + (1 - self.alpha) / self.energy_ref_uj * energy_uj, makespan_us)

    def schedule_key(self, schedule: Schedule) -> tuple[float, ...]:
        return self.key(schedule.makespan_us, schedule.energy_mj)

    def describe(self) -> str:
        text = {
            "latency": "latency-first",
            "energy": "energy-first",
            "weighted": f"weighted ({self.alpha:g} x latency + {1 - self.alpha:g} x energy)",
        }[self.kind]
        if self.cap_us is not None:
            text += f" within {self.cap_us / 1e3:g} ms"
        return text

    def to_dict(self) -> dict:
        return {
            "objective": self.kind,
            "alpha": self.alpha if self.kind == "weighted" else None,
            "latency_cap_ms": None if self.cap_us is None else self.cap_us / 1e3,
            "time_ref_ms": round(self.time_ref_us / 1e3, 6),
            "energy_ref_mj": round(self.energy_ref_uj / 1e3, 6),
            "description": self.describe(),
        }


def objective_for(problem: PartitionProblem, options: PartitionOptions) -> Objective:
    """The objective ``options`` ask for, normalised for ``problem``. Raises
    :class:`PartitionError` when it needs energy and a power figure is missing."""
    cap = None if options.latency_cap_ms is None else options.latency_cap_ms * 1e3
    if options.objective == "latency":
        return Objective("latency", 1.0, cap, max(lower_bound_us(problem), 1e-9))
    reason = energy_unknown_reason(problem)
    if reason is not None:
        raise PartitionError(
            f"the {options.objective} objective needs every unit's energy: {reason}",
            code="usage",
            hint="Give active_w and idle_w of these units in the target profile, or "
            "partition latency-first.",
        )
    time_ref = max(lower_bound_us(problem), 1e-9)
    idle = idle_w(problem)
    table = op_energy_uj(problem)
    least = sum(min(e for e in row if e is not None) for row in table)
    energy_ref = max(least + idle * time_ref, 1e-9)
    return Objective(options.objective, options.alpha, cap, time_ref, energy_ref, idle)


def within_cap(
    problem: PartitionProblem,
    objective: Objective,
    plan_for: Callable[[Objective], Plan],
    name: str,
) -> Plan:
    """``plan_for(objective)``, made to respect the objective's latency cap.

    For an algorithm without a cap of its own: if its plan is over the cap, the weight of
    latency is bisected between the objective's and 1 (latency-first), and the best plan
    within the cap is kept. Raises :class:`NoPlan` when even latency-first is over it.
    """
    plan = plan_for(objective)
    if objective.cap_us is None:
        return plan
    schedule = checked_schedule(problem, plan.placement, plan.order, name)
    if not objective.over_cap_us(schedule.makespan_us):
        return plan
    fastest = plan_for(Objective("latency", 1.0, objective.cap_us, objective.time_ref_us))
    quick = checked_schedule(problem, fastest.placement, fastest.order, name)
    fastest_ms = quick.makespan_us
    if objective.over_cap_us(fastest_ms):
        raise NoPlan(
            f"no plan within the latency cap of {objective.cap_us / 1e3:g} ms: the fastest "
            f"plan {name} finds takes {fastest_ms / 1e3:.3f} ms",
            details={"latency_cap_ms": objective.cap_us / 1e3, "fastest_ms": fastest_ms / 1e3},
        )
    low = 0.0 if objective.kind == "energy" else objective.alpha
    high, best, best_key = 1.0, fastest, objective.schedule_key(quick)
    for _ in range(_CAP_STEPS):
        mid = (low + high) / 2
        trial = plan_for(objective.with_weight(mid))
        s = checked_schedule(problem, trial.placement, trial.order, name)
        if objective.over_cap_us(s.makespan_us):
            low = mid
            continue
        high = mid
        key = objective.schedule_key(s)
        if key < best_key:
            best, best_key = trial, key
    return best
