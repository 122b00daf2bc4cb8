"""Block partitioning at key ops with critical-path refinement (hsa_cnn_partition, Shang et
al. 2023, Algorithms 2 and 3).

Blocks: the ops, in topological order, are cut after every key op (MaxPool, Concat, ...)
where the cut is clean, i.e. the key op's outputs are the only tensors crossing it, so a cut
ends a repeated block or joins branches. A stretch whose key op joins several branches is
split further as in the paper's Fig. 5b: each branch becomes its own block and the join
another, so branches can run on different units in parallel.

Placement: each block starts on the unit where it runs fastest (step 2), then the blocks on
the schedule's critical path, costliest first, are moved to another unit whenever that
shortens the simulated makespan (step 3). The paper measures each candidate on the device;
here the shared simulator stands in for the measurement, at most ``refine_evaluations``
times, and the search stops after a pass over the critical path that finds no gain.

What differs from the paper: Add and Sum also count as key ops (residual blocks end in an
Add, which the paper leaves open), a key op inside a branch does not cut (the cut would not
be clean), and the best single unit is also a starting candidate, so the result is never
worse than it.

Under an energy or weighted objective (:mod:`engine.partition.objective`) the same search
judges each candidate by the simulator's makespan and energy through the objective's key;
each block's least-energy unit is a further start, and after the critical path every other
block may move too (energy is spent off the critical path as well). A plan over the latency
cap ranks after every plan within it, and if the search ends over the cap there is no plan.
"""

from __future__ import annotations

from engine.partition.energy import op_energy_uj
from engine.partition.objective import objective_for
from engine.partition.problem import PartitionProblem
from engine.partition.registry import NoPlan, PartitionOptions, Plan, register
from engine.partition.simulator import Schedule, checked_schedule, critical_path


def key_op_blocks(problem: PartitionProblem, key_ops: tuple[str, ...]) -> list[list[int]]:
    """Blocks of ops, in an order in which every edge goes forward or stays inside."""
    n = problem.n
    keys = {k.lower() for k in key_ops}
    # other[p] > 0: some tensor produced before op p is still read after it.
    delta = [0] * (n + 1)
    for t in problem.tensors:
        if t.src is not None and t.dsts and max(t.dsts) > t.src + 1:
            delta[t.src + 1] += 1
            delta[max(t.dsts)] -= 1
    blocks: list[list[int]] = []
    segment: list[int] = []
    other = 0
    for p in range(n):
        other += delta[p]
        segment.append(p)
        if (problem.ops[p].op_type.lower() in keys and other == 0) or p == n - 1:
            blocks += _split_branches(problem, segment, keys)
            segment = []
    return blocks


def _split_branches(
    problem: PartitionProblem, segment: list[int], keys: set[str]
) -> list[list[int]]:
    join = segment[-1]
    if len(segment) < 3 or problem.ops[join].op_type.lower() not in keys:
        return [segment]
    body = set(segment[:-1])
    parent = {v: v for v in body}

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in body:
        for s in problem.succs[v]:
            if s in body:
                parent[root(v)] = root(s)
    branches: dict[int, list[int]] = {}
    for v in segment[:-1]:
        branches.setdefault(root(v), []).append(v)
    if len(branches) < 2:
        return [segment]
    return sorted(branches.values(), key=lambda b: b[0]) + [[join]]


@register("blocks")
def schedule_blocks(problem: PartitionProblem, options: PartitionOptions, progress) -> Plan:
    blocks = key_op_blocks(problem, options.key_ops)
    order = tuple(range(problem.n))  # the topological order the paper works in
    candidates = [
        [
            u
            for u in range(len(problem.units))
            if all(problem.latency_us[i][u] is not None for i in b)
        ]
        for b in blocks
    ]
    block_of = {i: b for b, ops in enumerate(blocks) for i in ops}

    def run(assign: list[int]) -> Schedule:
        placement = [0] * problem.n
        for b, ops in enumerate(blocks):
            for i in ops:
                placement[i] = assign[b]
        return checked_schedule(problem, placement, order, "blocks")

    objective = objective_for(problem, options)
    latency = objective.latency_first

    def better(a: Schedule, b: Schedule) -> bool:
        if latency:
            return a.makespan_us < b.makespan_us * (1 - 1e-9)
        return objective.schedule_key(a) < tuple(x * (1 - 1e-9) for x in objective.schedule_key(b))

    fastest = [
        min(c, key=lambda u: (sum(problem.latency_us[i][u] for i in ops), u))
        for ops, c in zip(blocks, candidates, strict=True)
    ]
    starts = [fastest] + [[u] * len(blocks) for u in problem.full_units]
    if objective.uses_energy:
        energy = op_energy_uj(problem)
        starts.append(
            [
                min(c, key=lambda u: (sum(energy[i][u] for i in ops), u))
                for ops, c in zip(blocks, candidates, strict=True)
            ]
        )
    tried = [(run(a), a) for a in starts]
    best, assign = tried[0]
    for schedule, a in tried[1:]:
        if (latency and schedule.makespan_us < best.makespan_us) or (
            not latency and objective.schedule_key(schedule) < objective.schedule_key(best)
        ):
            best, assign = schedule, a
    assign = list(assign)
    evaluations, moves = len(tried), 0
    improved = True
    while improved and evaluations < options.refine_evaluations:
        improved = False
        path = critical_path(best)
        weight: dict[int, float] = {}
        for i in path:
            weight[block_of[i]] = (
                weight.get(block_of[i], 0.0) + best.finish_us[i] - best.start_us[i]
            )
        order_b = sorted(weight, key=lambda b: (-weight[b], b))
        if objective.uses_energy:
            order_b += [b for b in range(len(blocks)) if b not in weight]
        for b in order_b:
            for u in candidates[b]:
                if u == assign[b] or evaluations >= options.refine_evaluations:
                    continue
                trial = assign.copy()
                trial[b] = u
                schedule = run(trial)
                evaluations += 1
                if better(schedule, best):
                    best, assign, improved = schedule, trial, True
                    moves += 1
                    break
            if improved:
                break
    if objective.over_cap_us(best.makespan_us):
        raise NoPlan(
            f"no plan within the latency cap of {objective.cap_us / 1e3:g} ms: the best "
            f"blocks found takes {best.makespan_us / 1e3:.3f} ms",
            details={"blocks": len(blocks), "evaluations": evaluations},
        )
    return Plan(
        best.placement,
        order,
        details={"blocks": len(blocks), "evaluations": evaluations, "moves": moves},
    )
