"""HOPE's exact scheduler (thesis 3.6.2, constraints 3-1 to 3-6), solved with OR-Tools CP-SAT.

The thesis's ILP, with the linearisation its big-M form needs done by the solver instead:

- ``b_{i,j}`` (op ``i`` on unit ``j``, assigned once: 3-6) is a presence literal ``x[i][j]``,
  and each op has one start ``S_i``; its end is ``S_i + sum_j cl_{i,j} x[i][j]``.
- No two ops overlap on a unit (3-4/3-5, the ``psi`` ordering variables with big M): one
  optional interval per (op, unit) and a no-overlap constraint per unit. Only the intervals
  actually present take part, which is the ``(2 - b_ij - b_kj) M`` relaxation the summary
  notes 3-5 is missing.
- Precedence with transfers (3-1 and 3-3): ``S_k >= E_i`` always, and
  ``S_k >= E_i + C(a->b)`` enforced only if ``x[i][a]`` and ``x[k][b]``: one reified
  constraint per edge and pair of units, which handles any number of units (the thesis's
  ``(b_ij - b_kj) C`` term is only right for two). Transfers occupy links, not units (see
  :mod:`engine.partition.simulator`), whereas the thesis folds them into ``t_{i,j}``.
- Makespan ``tau >= E_i + (copy of op i's graph outputs home)``, minimised (3-2), with
  redundant cuts ``tau >= E_i + (fastest path from i to an exit)`` and, per unit,
  ``tau >= its total work``.

Times are integers (CP-SAT). The scale comes from the horizon: the hint's makespan is 10^7
steps, whatever the units of the problem. Every time is rounded to the nearest step, and a
positive one to at least one step, so no duration or transfer vanishes from a precedence;
an op of 0 us (a view op on a unit with an unknown launch overhead) also takes one step,
so on a unit it sits before or after another op, never inside. A time beyond ``2^40``
steps (10^5 times the hint's makespan: an assignment no optimum uses) is clamped there,
which keeps every number and sum far below CP-SAT's 64-bit limits and 2^53. The solver's
units and order are replayed by the simulator, which gives the real times; the reported
bound is corrected for the rounding, so it is a true lower bound on the makespan of the
real-valued problem.

Graphs above ``exact_max_ops`` ops are pre-partitioned by upward-rank bisection
(:mod:`engine.partition.bisection`) and the parts solved in order, each as its own model
with the earlier parts fixed: their ops' finish times and units bound the part's starts,
and their busy intervals stay in each unit's no-overlap constraint, so a later part can
still use an idle gap. The thesis leaves this stitching unspecified. Each part minimises
the makespan it forces (its ops' ends plus their fastest paths to an exit). Stitched parts
are not optimal overall: the gap is then measured against a simple bound
(:func:`engine.partition.ranks.lower_bound_us`), and if the plan that seeds the solver (its
hint: the best of HEFT, the chain program and the single units) turns out shorter, that plan
is returned and ``details.returned`` says so.
The time limit is shared out over the parts still to solve. A part the solver leaves
without any solution when its time runs out (status ``time-limit``) keeps the hint's units
and order, and the plan says so.

Every candidate (the hint's, the solver's) is simulated and validated before it is compared
(:func:`engine.partition.simulator.checked_schedule`); a solver plan that fails is logged as
the bug it is and the hint returned instead.

Objectives (:mod:`engine.partition.objective`; the thesis minimises the makespan only):
under ``energy`` or ``weighted`` the model minimises ``cT x makespan + sum cE x
E_{i,j} x[i][j] + sum cE x E_upload y[k][j]``, the plan's energy being linear in the
assignment (each op's energy above idle on its unit, the units' idle draw times the
makespan, and ``y[k][j]``, tensor ``k`` uploaded to unit ``j``, for links that draw power:
uploads to the cloud). The weights are scaled to integers so that the hint's value is
about 10^11 (a time step's weight at least 1, which under ``energy`` makes the makespan a
tie-break). A latency cap is a hard constraint ``makespan <= cap``; the hint is then the
cheap plan that ranks best under the cap, and plans are compared by the objective's key,
so an infeasible cap falls back to the hint and the stage says there is no plan within it.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import replace

from engine.partition.bisection import partition_ops
from engine.partition.chain_dp import schedule_chain_dp
from engine.partition.energy import op_energy_uj, upload_w
from engine.partition.heft import schedule_heft
from engine.partition.objective import Objective, objective_for
from engine.partition.problem import PartitionProblem
from engine.partition.ranks import lower_bound_us
from engine.partition.registry import NoPlan, PartitionOptions, Plan, register
from engine.partition.simulator import InvalidPlan, Schedule, checked_schedule

_STEPS = 10_000_000  # integer time steps for the hint's makespan
_LIMIT = 2**40  # times beyond this many steps are clamped here (see the module docstring)
_FINEST_US = 1e-3  # a hint shorter than 1 ns (all ops of 0 us) is scaled as if it took 1 ns
_VALUE = 1e11  # integer value of the hint under an energy or weighted objective
log = logging.getLogger(__name__)


@register("hope-ilp")
def schedule_hope_ilp(problem: PartitionProblem, options: PartitionOptions, progress) -> Plan:
    deadline = time.perf_counter() + options.time_limit_s
    objective = objective_for(problem, options)
    hint_name, hint = _best_cheap_plan(problem, options, objective)
    scale = _STEPS / max(hint.makespan_us, _FINEST_US)
    whole = problem.n <= options.exact_max_ops
    parts = [list(range(problem.n))] if whole else partition_ops(problem, options.nt, options.eps)
    ctx = _Context(problem, options, hint, scale, objective)
    placement = [-1] * problem.n
    start = [0] * problem.n
    end = [0] * problem.n
    statuses: dict[str, int] = defaultdict(int)
    bound = 0.0
    for p, part in enumerate(parts):
        budget = max(0.01, (deadline - time.perf_counter()) / (len(parts) - p))
        status, part_bound = _solve_part(ctx, part, placement, start, end, budget)
        statuses[status] += 1
        if whole and part_bound is not None:
            bound = part_bound
        if progress is not None:
            progress((p + 1) / len(parts), f"exact solve: part {p + 1}/{len(parts)}")
    order = tuple(sorted(range(problem.n), key=lambda i: (start[i], i)))
    # Undo the rounding: each of at most 2n + 1 times on a path grew by at most 1 step.
    bound_us = max(lower_bound_us(problem), (bound - 2 * problem.n - 1) / scale)
    if whole:
        status = next(iter(statuses))
    else:
        status = "optimal-parts" if set(statuses) == {"optimal"} else "feasible-parts"
    details = {
        "parts": len(parts),
        "part_status": dict(statuses),
        "hint": hint_name,
        "hint_makespan_ms": round(hint.makespan_us / 1e3, 6),
        "returned": "solver",
    }
    if statuses.get("time-limit"):
        details["time_limit"] = (
            f"{statuses['time-limit']} of {len(parts)} parts found no solution within the "
            f"time limit ({options.time_limit_s:g} s): they keep the plan of {hint_name}"
        )
    if not objective.latency_first:
        details["objective"] = objective.to_dict()
    try:
        solved = checked_schedule(problem, placement, order, "hope-ilp")
    except InvalidPlan as e:  # logged there; the hint is a valid plan
        details.update(returned="hint", solver_invalid=e.errors[:5])
        solved = None
    worse = True
    if solved is not None:
        details["solver_makespan_ms"] = round(solved.makespan_us / 1e3, 6)
        if objective.latency_first:
            worse = hint.makespan_us < solved.makespan_us
        else:
            details["solver_energy_mj"] = solved.energy_mj
            worse = objective.schedule_key(hint) < objective.schedule_key(solved)
    if worse or statuses.get("time-limit") == len(parts):
        # Stitched parts (or a timed-out solve) can lose to the hint: never return worse.
        details["returned"] = "hint"
        solved = hint
        placement, order = list(hint.placement), hint.order
    if objective.over_cap_us(solved.makespan_us):
        raise NoPlan(
            f"no plan within the latency cap of {objective.cap_us / 1e3:g} ms: the exact "
            f"solver's best takes {solved.makespan_us / 1e3:.3f} ms",
            details=details,
        )
    return Plan(tuple(placement), tuple(order), bound_us, status, details)


def _best_cheap_plan(
    problem: PartitionProblem, options: PartitionOptions, objective: Objective
) -> tuple[str, Schedule]:
    """The starting hint: the best valid plan of HEFT, the chain program (each run for the
    objective and, under another one, latency-first too, which meets a cap if anything
    cheap does) and every single unit, with its name."""
    plans = {}
    variants = [("", options)]
    if not objective.latency_first:
        fastest = replace(options, objective="latency", latency_cap_ms=None)
        variants.append((" (latency-first)", fastest))
    for suffix, chosen in variants:
        for name, algorithm in (("heft", schedule_heft), ("chain-dp", schedule_chain_dp)):
            try:
                plans[name + suffix] = algorithm(problem, chosen, None)
            except NoPlan:
                continue  # nothing within the cap: the latency-first variant stands in
    for u in problem.full_units:
        plans[f"single:{problem.units[u]}"] = Plan((u,) * problem.n, tuple(range(problem.n)))
    schedules = {}
    for name, plan in plans.items():
        try:
            schedules[name] = checked_schedule(problem, plan.placement, plan.order, name)
        except InvalidPlan:
            continue  # logged as the bug it is; the others still seed the solver
    if not schedules:
        message = "hope-ilp has no valid plan to start from"
        raise InvalidPlan(message, [message])
    if objective.latency_first:
        name = min(schedules, key=lambda n: schedules[n].makespan_us)
    else:
        name = min(schedules, key=lambda n: objective.schedule_key(schedules[n]))
    return name, schedules[name]


class _Context:
    """What every part's model shares: the problem in integer steps, the hint and the
    fastest paths to an exit (``tail``) and from time 0 (``head``)."""

    def __init__(self, problem, options, hint: Schedule, scale: float, objective: Objective):
        self.problem, self.options, self.hint, self.scale = problem, options, hint, scale
        self.objective = objective
        plain = objective.kind == "latency"  # a cap, if any, is a constraint
        self.weights = None if plain else _Weights(problem, objective, hint)
        fastest = [max(1, self.steps(problem.min_latency(i))) for i in range(problem.n)]
        self.tail = [0] * problem.n
        for i in range(problem.n - 1, -1, -1):
            self.tail[i] = max((fastest[k] + self.tail[k] for k in problem.succs[i]), default=0)
        self.head = [0] * problem.n
        for i in range(problem.n):
            self.head[i] = max((self.head[p] + fastest[p] for p in problem.preds[i]), default=0)

    def steps(self, us: float) -> int:
        """``us`` in integer steps: the nearest, at least 1 if positive, at most ``_LIMIT``."""
        scaled = us * self.scale
        if scaled >= _LIMIT:
            return _LIMIT
        return max(1, round(scaled)) if scaled > 0 else 0


def _solve_part(
    ctx: _Context,
    part: list[int],
    placement: list[int],
    start: list[int],
    end: list[int],
    time_limit_s: float,
) -> tuple[str, float | None]:
    """Solve ``part`` with everything placed before it fixed; write its times in place.

    The objective is the makespan the part forces: the latest end of its ops plus the
    fastest path from each to an exit. For the whole graph that is the makespan itself,
    with the tails as redundant cuts; for a part, it looks ahead to the parts after it.
    """
    # Imported here, not at module level: highspy cannot load in a process that has loaded
    # ortools first, and importing engine.partition should not decide that for a worker.
    from ortools.sat.python import cp_model

    problem, hint, steps, tail = ctx.problem, ctx.hint, ctx.steps, ctx.tail
    inside = set(part)
    supported = {i: problem.supported[i] for i in part}
    dur = {(i, u): max(1, steps(problem.latency_us[i][u])) for i in part for u in supported[i]}
    # Earliest start of each op on each unit from graph inputs and from fixed predecessors.
    earliest = {(i, u): steps(problem.release_us[i][u]) for i, u in dur}
    arcs: dict[tuple[int, int], list[int]] = defaultdict(list)  # tensors on each edge
    for i in part:
        for k in problem.in_tensors[i]:
            t = problem.tensors[k]
            if t.src is None:
                continue
            if t.src in inside:
                arcs[(t.src, i)].append(k)
                continue
            for u in supported[i]:
                at = end[t.src] + steps(problem.transfer_us(t.bytes, placement[t.src], u))
                earliest[(i, u)] = max(earliest[(i, u)], at)
    transfer = {
        (i, k, a, b): max(steps(problem.transfer_us(problem.tensors[t].bytes, a, b)) for t in ts)
        if a != b
        else 0
        for (i, k), ts in arcs.items()
        for a in supported[i]
        for b in supported[k]
    }
    output = {(i, u): steps(problem.output_us[i][u]) for i, u in dur}
    hint_start, hint_end = _integer_hint(part, hint, dur, earliest, arcs, transfer, placement, end)
    floor = min(earliest.values(), default=0)
    horizon = max(
        hint_end[i] + max(tail[i], max(output[(i, u)] for u in supported[i])) for i in part
    )

    model = cp_model.CpModel()
    fixed = [i for i in range(problem.n) if placement[i] >= 0]
    head = [0] * problem.n if fixed else ctx.head
    s = {i: model.new_int_var(floor + head[i], horizon, f"s{i}") for i in part}
    e = {i: model.new_int_var(floor, horizon, f"e{i}") for i in part}
    x = {key: model.new_bool_var(f"x{key[0]}_{key[1]}") for key in dur}
    makespan = model.new_int_var(floor, horizon, "makespan")
    lanes: dict[int, list] = defaultdict(list)
    for i in part:
        model.add_exactly_one(x[(i, u)] for u in supported[i])
        model.add(e[i] == s[i] + sum(dur[(i, u)] * x[(i, u)] for u in supported[i]))
        model.add(makespan >= e[i] + tail[i])
        for u in supported[i]:
            interval = model.new_optional_fixed_size_interval_var(s[i], dur[(i, u)], x[(i, u)], "")
            lanes[u].append(interval)
            if earliest[(i, u)] > floor:
                model.add(s[i] >= earliest[(i, u)]).only_enforce_if(x[(i, u)])
            if output[(i, u)] > tail[i]:
                model.add(makespan >= e[i] + output[(i, u)]).only_enforce_if(x[(i, u)])
    for i in fixed:
        if end[i] > floor:
            lanes[placement[i]].append(
                model.new_fixed_size_interval_var(start[i], end[i] - start[i], "")
            )
    for i, k in arcs:
        model.add(s[k] >= e[i])
        for a in supported[i]:
            for b in supported[k]:
                if transfer[(i, k, a, b)] > 0:
                    model.add(s[k] >= e[i] + transfer[(i, k, a, b)]).only_enforce_if(
                        [x[(i, a)], x[(k, b)]]
                    )
    for u, lane in lanes.items():
        model.add_no_overlap(lane)
        if not fixed:  # redundant load cut: a unit's work fits before the makespan
            model.add(makespan >= floor + sum(dur[(i, u)] * x[(i, u)] for i in part if (i, u) in x))
    weights = ctx.weights
    if ctx.objective.cap_us is not None:
        model.add(makespan <= max(floor, int(ctx.objective.cap_us * ctx.scale)))
    if weights is None:
        model.minimize(makespan)
    else:
        terms = [weights.per_step(ctx.scale) * makespan]
        terms += [weights.op(i, u) * x[(i, u)] for i, u in x if weights.op(i, u)]
        terms += _upload_terms(model, ctx, part, x, placement)
        model.minimize(sum(terms))
    for i in part:
        model.add_hint(s[i], hint_start[i])
        model.add_hint(e[i], hint_end[i])
        for u in supported[i]:
            model.add_hint(x[(i, u)], hint.placement[i] == u)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = ctx.options.workers
    solver.parameters.random_seed = ctx.options.seed
    # One thread still gets the LNS portfolio, deterministically.
    solver.parameters.interleave_search = ctx.options.workers == 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        for i in part:  # only without any solution in time: the hint is feasible
            placement[i], start[i], end[i] = hint.placement[i], hint_start[i], hint_end[i]
        if status == cp_model.UNKNOWN:
            return ("time-limit", None)
        if status == cp_model.INFEASIBLE and ctx.objective.cap_us is not None:
            return ("infeasible-cap", None)  # the cap, not a bug: the plan says so
        # The hint is a solution of the model: infeasible or invalid is a bug here.
        name = solver.status_name(status).lower()
        log.error("hope-ilp: CP-SAT says %s for a part of %d ops", name, len(part))
        return (name, None)
    for i in part:
        placement[i] = next(u for u in supported[i] if solver.value(x[(i, u)]))
        start[i], end[i] = solver.value(s[i]), solver.value(e[i])
    name = "optimal" if status == cp_model.OPTIMAL else "feasible"
    if weights is not None:  # the objective's bound is not a makespan
        return (name, None)
    return (name, solver.best_objective_bound)


class _Weights:
    """Integer weights of the energy or weighted objective (see the module docstring)."""

    def __init__(self, problem: PartitionProblem, objective: Objective, hint: Schedule):
        self.problem, self.objective = problem, objective
        self.energy = op_energy_uj(problem)
        active = hint.energy.active_mj or 0.0
        moved = hint.energy.transfer_mj or 0.0
        value = objective.step_cost(hint.makespan_us, (active + moved) * 1e3)
        self.q = _VALUE / max(value, 1e-12)

    def per_step(self, scale: float) -> int:
        return max(1, round(self.objective.time_weight / scale * self.q))

    def op(self, i: int, u: int) -> int:
        return round(self.objective.energy_weight * self.energy[i][u] * self.q)

    def upload(self, joules_uj: float) -> int:
        return round(self.objective.energy_weight * joules_uj * self.q)


def _upload_terms(model, ctx: _Context, part, x, placement) -> list:
    """``cE x E_upload y[k][j]`` for every tensor a part's op reads that may be uploaded to
    unit ``j`` over a link that draws power (the cloud's radio)."""
    problem, weights = ctx.problem, ctx.weights
    terms = []
    inside = set(part)
    for k, t in enumerate(problem.tensors):
        readers = [d for d in t.dsts if d in inside]
        if not readers or t.bytes is None:
            continue
        if t.src is None:
            sources = [problem.home]
        elif t.src in inside:
            sources = list(problem.supported[t.src])
        elif placement[t.src] >= 0:
            sources = [placement[t.src]]
        else:
            continue
        for b in {u for d in readers for u in problem.supported[d]}:
            cost = max(
                (
                    upload_w(problem, a, b) * problem.transfer_us(t.bytes, a, b)
                    for a in sources
                    if a != b
                ),
                default=0.0,
            )
            coefficient = weights.upload(cost)
            if coefficient <= 0:
                continue
            moved = model.new_bool_var(f"y{k}_{b}")
            on_b = x[(t.src, b)] if t.src in inside and (t.src, b) in x else None
            held = 1 if sources == [b] else 0
            for d in readers:
                if (d, b) in x:
                    if on_b is not None:
                        model.add(moved >= x[(d, b)] - on_b)
                    elif not held:
                        model.add(moved >= x[(d, b)])
            terms.append(coefficient * moved)
    return terms


def _integer_hint(part, hint, dur, earliest, arcs, transfer, placement, end):
    """The hint's units and order, replayed in integer steps after every fixed op, so that it
    is a feasible solution of the part's model."""
    free: dict[int, int] = defaultdict(int)
    for i, u in enumerate(placement):
        if u >= 0:
            free[u] = max(free[u], end[i])
    preds: dict[int, list[int]] = defaultdict(list)
    for i, k in arcs:
        preds[k].append(i)
    starts, ends = {}, {}
    for i in sorted(part, key=lambda i: (hint.start_us[i], i)):
        u = hint.placement[i]
        at = max(free[u], earliest[(i, u)])
        for p in preds[i]:
            at = max(at, ends[p] + transfer[(p, i, hint.placement[p], u)])
        starts[i], ends[i] = at, at + dur[(i, u)]
        free[u] = ends[i]
    return starts, ends
