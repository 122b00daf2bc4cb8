"""HOPE's heuristic scheduler (thesis 3.6.4, Algorithm 2): super-op merging, then a K-window
search.

Merging: an op faster than a threshold with exactly one predecessor joins that
predecessor's super-op (same unit, run back to back). The thesis gives no threshold; here
it is ``merge_short_us`` (default: a tenth of the mean fastest op latency).

K-window: ready ops are sorted by ready time (the latest finish of their predecessors);
the first K are placed together by trying every assignment of them to units (a search tree
pruned by the best completion found so far) and keeping the one whose last op completes
earliest, counting unit availability, transfers and the copy of graph outputs home. Ties go
to the smaller sum of finish times, then to the first assignment found. With K = 1 this is
greedy list scheduling: the earliest-ready op goes to the unit where it completes first.
Units run ops back to back (no insertion into idle gaps), as in the thesis.

Under an energy or weighted objective (:mod:`engine.partition.objective`) the window's
assignment minimises :meth:`~engine.partition.objective.Objective.step_cost` of its
completion and the energy of its ops (above idle, plus uploads of their inputs), ties to
the earliest completion; the thesis's scheduler minimises the makespan only. A latency cap
is met by shifting the weight towards latency
(:func:`~engine.partition.objective.within_cap`).
"""

from __future__ import annotations

import math

from engine.partition.energy import op_energy_uj, upload_w
from engine.partition.objective import Objective, objective_for, within_cap
from engine.partition.problem import PartitionProblem, Tensor
from engine.partition.registry import PartitionOptions, Plan, register


def default_k(units: int) -> int:
    """The thesis's K: 4 for 2 units, 3 for 3 (and 4); 2 above, to bound ``units ** K``."""
    return 4 if units <= 2 else 3 if units <= 4 else 2


@register("hope-heuristic")
def schedule_hope_heuristic(problem: PartitionProblem, options: PartitionOptions, progress) -> Plan:
    k = options.k or default_k(len(problem.units))
    objective = objective_for(problem, options)
    groups = merge_super_ops(problem, options.merge_short_us)
    reduced = reduce_problem(problem, groups)
    return within_cap(
        problem,
        objective,
        lambda o: _expand(problem, groups, k, *k_window_schedule(reduced, k, o)),
        "hope-heuristic",
    )


def _expand(problem, groups, k, placement_g, order_g) -> Plan:
    """The plan of the original ops from the super-ops' units and order."""
    placement = [0] * problem.n
    order = []
    for g in order_g:
        for i in groups[g]:
            placement[i] = placement_g[g]
            order.append(i)
    return Plan(tuple(placement), tuple(order), details={"k": k, "super_ops": len(groups)})


def merge_super_ops(problem: PartitionProblem, threshold_us: float | None) -> list[list[int]]:
    """Groups of ops (each in topological order), groups ordered by their first op."""
    n = problem.n
    if threshold_us is None:
        threshold_us = 0.1 * sum(problem.min_latency(i) for i in range(n)) / max(n, 1)
    group_of = list(range(n))
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    supported = [set(s) for s in problem.supported]
    for i in range(n):
        preds = problem.preds[i]
        if len(preds) != 1 or problem.min_latency(i) > threshold_us:
            continue
        g = group_of[preds[0]]
        both = supported[g] & supported[i]
        if not both:
            continue
        supported[g] = both
        members[g].append(i)
        group_of[i] = g
        del members[i]
    return [members[g] for g in sorted(members)]


def reduce_problem(problem: PartitionProblem, groups: list[list[int]]) -> PartitionProblem:
    """The problem over super-ops: latencies add up, tensors inside a group disappear."""
    if len(groups) == problem.n:
        return problem
    group_of = {i: g for g, ops in enumerate(groups) for i in ops}
    latency = []
    for ops in groups:
        row = []
        for u in range(len(problem.units)):
            parts = [problem.latency_us[i][u] for i in ops]
            row.append(None if any(p is None for p in parts) else sum(parts))
        latency.append(tuple(row))
    tensors = []
    for t in problem.tensors:
        src = None if t.src is None else group_of[t.src]
        dsts = tuple(sorted({group_of[d] for d in t.dsts} - {src}))
        if dsts or t.is_output:
            tensors.append(Tensor(t.name, t.bytes, src, dsts, t.is_output))
    ops = tuple(problem.ops[g[0]] for g in groups)
    return PartitionProblem(
        ops=ops,
        units=problem.units,
        latency_us=tuple(latency),
        tensors=tuple(tensors),
        links=problem.links,
        home_unit=problem.home_unit,
        power=problem.power,
        network=problem.network,
        cloud_unit=problem.cloud_unit,
    )


def k_window_schedule(
    problem: PartitionProblem, k: int, objective: Objective | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Place ops K at a time; return ``(placement, order)``."""
    n = problem.n
    if objective is not None and not objective.uses_energy:
        objective = None  # the makespan alone: the thesis's search
    energy = None if objective is None else op_energy_uj(problem)
    waiting = [len(p) for p in problem.preds]
    ready_at = [0.0] * n
    finish = [0.0] * n
    placement = [-1] * n
    unit_free = [0.0] * len(problem.units)
    queue = [i for i in range(n) if not waiting[i]]
    order: list[int] = []
    while queue:
        queue.sort(key=lambda i: (ready_at[i], i))
        window, queue = queue[:k], queue[k:]
        choice = _best_assignment(problem, window, placement, finish, unit_free, objective, energy)
        for i, (u, end) in zip(window, choice, strict=True):
            placement[i], finish[i] = u, end
            unit_free[u] = max(unit_free[u], end)
            order.append(i)
        for i in window:
            for s in problem.succs[i]:
                ready_at[s] = max(ready_at[s], finish[i])
                waiting[s] -= 1
                if not waiting[s]:
                    queue.append(s)
    return tuple(placement), tuple(order)


def _best_assignment(
    problem, window, placement, finish, unit_free, objective=None, energy=None
) -> list[tuple[int, float]]:
    """Search every unit assignment of ``window`` (in order) for the earliest completion
    (or, with an ``objective``, the least step cost); return ``(unit, finish time)`` per op.
    """
    # Every predecessor is placed already, so when an op's inputs arrive on a unit does not
    # depend on the rest of the window.
    arrive, spent = {}, {}
    for i in window:
        for u in problem.supported[i]:
            at = problem.release_us[i][u]
            joules = 0.0 if energy is None else energy[i][u]
            for k in problem.in_tensors[i]:
                t = problem.tensors[k]
                src = problem.home if t.src is None else placement[t.src]
                if energy is not None and src != u:
                    joules += upload_w(problem, src, u) * problem.transfer_us(t.bytes, src, u)
                if t.src is not None:
                    moved = problem.transfer_us(t.bytes, placement[t.src], u)
                    at = max(at, finish[t.src] + (moved if placement[t.src] != u else 0.0))
            arrive[(i, u)], spent[(i, u)] = at, joules
    cost = (lambda c, e: 0.0) if objective is None else objective.step_cost
    best_key, best = (math.inf, math.inf, math.inf), []
    chosen: list[tuple[int, float]] = []
    free = list(unit_free)

    def search(depth: int, completion: float, total: float, joules: float) -> None:
        nonlocal best_key, best
        # Both terms only grow deeper in the tree: a branch already worse is cut.
        if (cost(completion, joules), completion) > best_key[:2]:
            return
        if depth == len(window):
            key = (cost(completion, joules), completion, total)
            if key < best_key:
                best_key, best = key, list(chosen)
            return
        i = window[depth]
        for u in problem.supported[i]:
            end = max(free[u], arrive[(i, u)]) + problem.latency_us[i][u]
            saved, free[u] = free[u], end
            chosen.append((u, end))
            search(
                depth + 1,
                max(completion, end + problem.output_us[i][u]),
                total + end,
                joules + spent[(i, u)],
            )
            chosen.pop()
            free[u] = saved

    search(0, 0.0, 0.0, 0.0)
    return best
