"""Chain dynamic program in the style of MOSAIC (as the thesis describes it, ch.2 and 3.6).

The graph is read as a chain: its ops in topological order, with a cut point between every
two neighbours. Consecutive ops on one unit form a segment; crossing a cut from unit ``a`` to
unit ``b`` moves every tensor live at that cut (produced before it, read after it) over the
link ``a -> b``. The program picks the unit of every segment that minimises the sequential
time: sum of latencies plus cut transfers. The per-op recurrence below is the same program
as one over segments, since a segment is a run of ops on one unit. Like MOSAIC it ignores
parallelism between branches; the simulator then runs the plan as it is.

Under an energy or weighted objective (:mod:`engine.partition.objective`) each state also
carries the energy spent so far (ops above idle, uploads at cuts), and the predecessor is
the one with the least :meth:`~engine.partition.objective.Objective.step_cost`; a latency
cap is met by shifting the weight towards latency
(:func:`~engine.partition.objective.within_cap`).
"""

from __future__ import annotations

import math

from engine.partition.energy import op_energy_uj, upload_w
from engine.partition.objective import Objective, objective_for, within_cap
from engine.partition.problem import PartitionProblem
from engine.partition.registry import Plan, register


def live_bytes(problem: PartitionProblem) -> list[int]:
    """``live[p]``: bytes of tensors produced before op ``p`` and read at or after it.

    A tensor of unknown size is left out: in a priced problem
    (:meth:`~engine.partition.problem.PartitionProblem.require_priced`) no plan moves it
    over a link, so it never costs a transfer."""
    delta = [0] * (problem.n + 1)
    for t in problem.tensors:
        if t.src is None or not t.dsts or t.bytes is None:
            continue
        last = max(t.dsts)
        delta[t.src + 1] += t.bytes
        delta[last + 1] -= t.bytes
    live, running = [], 0
    for p in range(problem.n):
        running += delta[p]
        live.append(running)
    return live


@register("chain-dp")
def schedule_chain_dp(problem: PartitionProblem, options, progress) -> Plan:
    objective = objective_for(problem, options)
    return within_cap(problem, objective, lambda o: _chain_dp(problem, o), "chain-dp")


def _chain_dp(problem: PartitionProblem, objective: Objective) -> Plan:
    n, units = problem.n, range(len(problem.units))
    live = live_bytes(problem)
    energy = op_energy_uj(problem) if objective.uses_energy else None
    cost = [[math.inf] * len(problem.units) for _ in range(n)]
    spent = [[0.0] * len(problem.units) for _ in range(n)]  # energy so far, microjoules
    came = [[-1] * len(problem.units) for _ in range(n)]

    def score(time: float, joules: float) -> float:
        return time if energy is None else objective.step_cost(time, joules)

    for i in range(n):
        for v in problem.supported[i]:
            lat = problem.latency_us[i][v]
            own = 0.0 if energy is None else energy[i][v] + _input_uploads(problem, i, v)
            if i == 0:
                cost[0][v] = problem.release_us[0][v] + lat
                spent[0][v] = own
                continue
            best, arg, joules = math.inf, -1, 0.0
            for u in units:
                if cost[i - 1][u] == math.inf:
                    continue
                moved = problem.transfer_us(live[i], u, v) if u != v else 0.0
                at = cost[i - 1][u] + moved
                used = spent[i - 1][u] + (
                    0.0 if energy is None else upload_w(problem, u, v) * moved
                )
                if arg < 0 or score(at, used) < score(best, joules):
                    best, arg, joules = at, u, used
            cost[i][v] = max(best, problem.release_us[i][v]) + lat
            spent[i][v] = joules + own
            came[i][v] = arg
    if not n:
        return Plan((), ())
    last = min(
        units,
        key=lambda v: (score(cost[n - 1][v] + problem.output_us[n - 1][v], spent[n - 1][v]), v),
    )
    placement = [0] * n
    for i in range(n - 1, -1, -1):
        placement[i] = last
        last = came[i][last]
    segments = 1 + sum(1 for i in range(1, n) if placement[i] != placement[i - 1])
    return Plan(tuple(placement), tuple(range(n)), details={"segments": segments})


def _input_uploads(problem: PartitionProblem, i: int, v: int) -> float:
    """Energy of uploading op ``i``'s graph inputs from the home unit to unit ``v``."""
    home, total = problem.home, 0.0
    for k in problem.in_tensors[i]:
        t = problem.tensors[k]
        if t.src is None and home != v:
            total += upload_w(problem, home, v) * problem.transfer_us(t.bytes, home, v)
    return total
