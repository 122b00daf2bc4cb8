"""The one schedule simulator every partitioning algorithm is judged by, and its validator.

Given a placement (op -> unit) and an order (a topological order of the ops), each unit runs
its ops in that order, one at a time and without preemption, each as soon as its inputs are
there: an as-soon-as-possible list schedule. A tensor read on another unit than the one that
holds it is moved once per destination unit, starting when its producer finishes (graph
inputs at time 0 from the home unit); graph outputs are moved back to the home unit, and the
makespan ends when the last of them arrives.

Links are not a contended resource: a link carries several transfers at once, each taking
``latency + bytes / bandwidth``, as in the HOPE ILP (thesis eq. 3-1, where communication
overlaps with independent ops). This keeps the simulator monotone: a schedule found by the
exact solver, replayed here with the same per-unit order, never gets longer. The Gantt
chart draws each link as a lane; bars on it may overlap.

An op may take 0 us (a view op on a unit whose launch overhead is unknown: it moves no data
and the cost model counts the unknown launch as 0). It runs at an instant: the validator
accepts it where its unit is free, including the instant another op starts or ends there,
and rejects it strictly inside another op's run, which would need preemption.

:func:`checked_schedule` is the one door every plan goes through before it is returned,
compared or chosen: it simulates and validates, and a plan that fails is a bug in the
algorithm that made it (:class:`InvalidPlan`), never a result.

Every schedule also carries its predicted energy (:mod:`engine.partition.energy`: each
unit's active power over its busy time, idle power over the rest of the makespan, and the
radio's power over uploads to the cloud), so that every algorithm's plan has
``energy_mj`` next to ``makespan_us``, evaluated the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.partition.energy import PlanEnergy, plan_energy
from engine.partition.problem import PartitionError, PartitionProblem

_TOLERANCE_US = 1e-6
log = logging.getLogger(__name__)


class InvalidPlan(PartitionError):
    """A plan the simulator or the validator rejects: a bug in the algorithm that made it.
    ``errors`` lists the violations."""

    code = "invalid_plan"

    def __init__(self, message: str, errors: Sequence[str]):
        super().__init__(message)
        self.errors = list(errors)


@dataclass(frozen=True)
class Transfer:
    """Tensor ``tensor`` moved from unit ``src_unit`` to ``dst_unit``; ``src_op`` is ``None``
    for a graph input."""

    tensor: int
    src_op: int | None
    src_unit: int
    dst_unit: int
    bytes: int
    start_us: float
    finish_us: float


@dataclass(frozen=True)
class Schedule:
    """Start and finish of every op, the transfers, and the makespan, all in microseconds;
    ``energy`` is the plan's predicted energy (``energy_mj`` ``None`` when a power figure is
    missing, and ``energy.reason`` says which)."""

    placement: tuple[int, ...]
    order: tuple[int, ...]
    start_us: tuple[float, ...]
    finish_us: tuple[float, ...]
    transfers: tuple[Transfer, ...]
    makespan_us: float
    unit_busy_us: tuple[float, ...]
    problem: PartitionProblem = field(repr=False, compare=False)
    energy: PlanEnergy = field(default=PlanEnergy(None), compare=False)

    @property
    def energy_mj(self) -> float | None:
        return self.energy.energy_mj


def simulate(problem: PartitionProblem, placement: Sequence[int], order: Sequence[int]) -> Schedule:
    """Simulate a plan. Raises :class:`PartitionError` if the plan is malformed (not one
    supported unit per op, or ``order`` not a topological order of all ops)."""
    n, latency, tensors = problem.n, problem.latency_us, problem.tensors
    if len(placement) != n or sorted(order) != list(range(n)):
        raise PartitionError("a plan needs one unit per op and an order of all ops")
    link_table, home = problem.link_table, problem.home
    start = [0.0] * n
    finish = [-1.0] * n
    unit_free = [0.0] * len(problem.units)
    busy = [0.0] * len(problem.units)
    arrival: dict[tuple[int, int], float] = {}
    transfers: list[Transfer] = []
    in_tensors = problem.in_tensors
    for i in order:
        u = placement[i]
        lat = latency[i][u] if 0 <= u < len(unit_free) else None
        if lat is None:
            raise PartitionError(
                f"op '{problem.ops[i].name}' is placed on a unit that cannot run it"
            )
        ready = unit_free[u]
        for k in in_tensors[i]:
            t = tensors[k]
            src = t.src
            if src is not None and finish[src] < 0:
                raise PartitionError(f"op '{problem.ops[i].name}' is ordered before its input")
            src_unit = home if src is None else placement[src]
            produced = 0.0 if src is None else finish[src]
            link = link_table[src_unit][u] if src_unit != u else None
            if link is None:
                at = produced
            else:
                at = arrival.get((k, u), -1.0)
                if at < 0:
                    at = produced + _moved_us(problem, k, link)
                    arrival[(k, u)] = at
                    transfers.append(Transfer(k, src, src_unit, u, t.bytes, produced, at))
            if at > ready:
                ready = at
        start[i] = ready
        finish[i] = ready + lat
        unit_free[u] = finish[i]
        busy[u] += lat
    makespan = max(finish, default=0.0)
    for k, t in enumerate(tensors):
        if t.is_output and t.src is not None:
            src_unit = placement[t.src]
            link = link_table[src_unit][home] if src_unit != home else None
            if link is not None:
                done = finish[t.src] + _moved_us(problem, k, link)
                transfers.append(Transfer(k, t.src, src_unit, home, t.bytes, finish[t.src], done))
                makespan = max(makespan, done)
    return Schedule(
        placement=tuple(placement),
        order=tuple(order),
        start_us=tuple(start),
        finish_us=tuple(finish),
        transfers=tuple(transfers),
        makespan_us=makespan,
        unit_busy_us=tuple(busy),
        problem=problem,
        energy=plan_energy(problem, placement, makespan, transfers),
    )


def _moved_us(problem: PartitionProblem, k: int, link) -> float:
    t = problem.tensors[k]
    if t.bytes is None:
        raise PartitionError(f"the plan moves tensor {t.name}, whose size is unknown")
    return link.transfer_us(t.bytes)


def checked_schedule(
    problem: PartitionProblem, placement: Sequence[int], order: Sequence[int], algorithm: str = ""
) -> Schedule:
    """Simulate a plan and validate the schedule. Raises :class:`InvalidPlan` (and logs it
    as the bug it is) when the plan is malformed or its schedule breaks a rule."""
    try:
        schedule = simulate(problem, placement, order)
        errors = validate(problem, schedule)
    except PartitionError as e:
        errors = [e.message]
    if errors:
        who = algorithm or "an algorithm"
        log.error("%s made an invalid plan: %s", who, "; ".join(errors[:5]))
        raise InvalidPlan(f"the plan of {who} fails validation: {errors[0]}", errors)
    return schedule


def validate(problem: PartitionProblem, schedule: Schedule) -> list[str]:
    """Check a schedule against the problem; return the violations (empty when valid).

    Every op placed once on a unit that supports it and run for its latency; every
    dependency respected, a cross-unit one through a transfer of the right length that
    starts after the producer finishes; no two ops overlapping on a unit; the makespan
    covering every op and every output transfer.
    """
    errors: list[str] = []
    n, tol = problem.n, _TOLERANCE_US
    if len(schedule.placement) != n or len(schedule.start_us) != n or len(schedule.finish_us) != n:
        return [f"the schedule does not cover the {n} ops exactly once"]
    if sorted(schedule.order) != list(range(n)):
        errors.append("the order is not a permutation of the ops")
    names = [op.name for op in problem.ops]
    for i, u in enumerate(schedule.placement):
        lat = problem.latency_us[i][u] if 0 <= u < len(problem.units) else None
        if lat is None:
            errors.append(f"{names[i]}: placed on a unit that cannot run it")
        elif abs(schedule.finish_us[i] - schedule.start_us[i] - lat) > tol * max(1.0, lat):
            errors.append(f"{names[i]}: runs for a different time than its latency")
        if schedule.start_us[i] < -tol:
            errors.append(f"{names[i]}: starts before time 0")
    if errors:
        return errors
    moved = {(t.tensor, t.dst_unit): t for t in schedule.transfers}
    home = problem.home
    for k, t in enumerate(problem.tensors):
        src_unit = home if t.src is None else schedule.placement[t.src]
        ready = 0.0 if t.src is None else schedule.finish_us[t.src]
        for d in t.dsts:
            errors += _check_arrival(problem, schedule, moved, k, src_unit, ready, d)
        if t.is_output and t.src is not None:
            arrive = ready
            if problem.link_table[src_unit][home] is not None and src_unit != home:
                transfer = moved.get((k, home))
                if transfer is None:
                    errors.append(f"output {t.name}: never copied home")
                    continue
                arrive = transfer.finish_us
            if arrive > schedule.makespan_us + tol * max(1.0, arrive):
                errors.append(f"output {t.name}: reaches home after the makespan")
    start, finish = schedule.start_us, schedule.finish_us
    for u in range(len(problem.units)):
        # By start, then finish: an op of 0 us at the instant another starts comes first.
        ops = sorted(
            (i for i in range(n) if schedule.placement[i] == u), key=lambda i: (start[i], finish[i])
        )
        busy = None  # the op whose run ends last so far
        for b in ops:
            if busy is not None and start[b] < finish[busy] - tol * max(1.0, finish[busy]):
                errors.append(f"{names[busy]} and {names[b]} overlap on unit {problem.units[u]}")
            if busy is None or finish[b] > finish[busy]:
                busy = b
    if any(f > schedule.makespan_us + tol * max(1.0, f) for f in schedule.finish_us):
        errors.append("an op finishes after the makespan")
    return errors


def _check_arrival(problem, schedule, moved, k, src_unit, ready, d) -> list[str]:
    dst_unit = schedule.placement[d]
    name = problem.ops[d].name
    tensor = problem.tensors[k]
    link = problem.link_table[src_unit][dst_unit] if src_unit != dst_unit else None
    tol = _TOLERANCE_US * max(1.0, ready)
    if link is None:
        arrive = ready
    else:
        transfer = moved.get((k, dst_unit))
        if transfer is None:
            return [f"{name}: reads {tensor.name} from another unit without a transfer"]
        if transfer.start_us < ready - tol or transfer.src_unit != src_unit:
            return [
                f"transfer of {tensor.name}: starts before it is produced or from the wrong unit"
            ]
        if tensor.bytes is None:
            return [f"transfer of {tensor.name}: its size is unknown"]
        if transfer.finish_us - transfer.start_us < link.transfer_us(tensor.bytes) - tol:
            return [f"transfer of {tensor.name}: shorter than the link allows"]
        arrive = transfer.finish_us
    if schedule.start_us[d] < arrive - _TOLERANCE_US * max(1.0, arrive):
        return [f"{name}: starts before its input {tensor.name} is there"]
    return []


def critical_path(schedule: Schedule) -> list[int]:
    """Ops on a longest chain of the schedule, from the first to the last, following at each op
    whichever constraint set its start: an input arriving, else the unit becoming free."""
    problem = schedule.problem
    n = problem.n
    if not n:
        return []
    start, finish = schedule.start_us, schedule.finish_us
    arrive = {(t.tensor, t.dst_unit): t.finish_us for t in schedule.transfers}
    previous: dict[int, int] = {}
    last_on: dict[int, int] = {}
    for i in sorted(range(n), key=lambda i: (start[i], finish[i])):
        u = schedule.placement[i]
        if u in last_on:
            previous[i] = last_on[u]
        last_on[u] = i
    i = max(range(n), key=lambda i: (finish[i], -i))
    path = [i]
    while start[i] > _TOLERANCE_US:
        u = schedule.placement[i]
        step = None
        for k in problem.in_tensors[i]:
            src = problem.tensors[k].src
            if src is None:
                continue
            at = arrive.get((k, u), finish[src])
            if abs(at - start[i]) <= _TOLERANCE_US * max(1.0, at):
                step = src
                break
        prev = previous.get(i)
        if (
            step is None
            and prev is not None
            and abs(finish[prev] - start[i]) <= _TOLERANCE_US * max(1.0, start[i])
        ):
            step = prev
        if step is None:
            break
        i = step
        path.append(i)
    return path[::-1]
