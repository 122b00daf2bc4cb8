"""Ranks and bounds shared by the algorithms.

Two ranks with similar names: HEFT's *upward rank* (the longest path from an op to an exit,
with mean latencies and mean transfer costs), which orders list schedules, and HOPE's
``uprank`` (thesis eq. 3-8: 1 + the longest path in hops from a source), which the bisection
pre-partitioner cuts along.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

from engine.partition.problem import PartitionProblem


def mean_transfer(problem: PartitionProblem) -> tuple[float, float]:
    """``(a, b)`` such that the mean over ordered unit pairs of moving ``x`` bytes is
    ``a + b * x`` (same-unit and shared-memory pairs count as free)."""
    units = range(len(problem.units))
    pairs = len(problem.units) ** 2
    latency = per_byte = 0.0
    for a, c in product(units, units):
        link = problem.link_table[a][c] if a != c else None
        if link is not None:
            latency += link.latency_us
            per_byte += 1.0 / (link.gbps * 1e3)
    return latency / pairs, per_byte / pairs


def upward_rank(problem: PartitionProblem) -> list[float]:
    """HEFT's upward rank of every op: mean latency plus the costliest path to an exit."""
    a, b = mean_transfer(problem)
    rank = [0.0] * problem.n
    out_bytes = [0] * problem.n
    for t in problem.tensors:
        # A tensor of unknown size in a priced problem never crosses a link: no cost.
        if t.src is not None and t.bytes is not None:
            out_bytes[t.src] = max(out_bytes[t.src], t.bytes)
    for i in range(problem.n - 1, -1, -1):
        row = [v for v in problem.latency_us[i] if v is not None]
        tail = max((rank[s] for s in problem.succs[i]), default=0.0)
        comm = a + b * out_bytes[i] if problem.succs[i] else 0.0
        rank[i] = sum(row) / len(row) + comm + tail
    return rank


def rank_order(problem: PartitionProblem) -> tuple[int, ...]:
    """Ops by decreasing upward rank, ties by index: a topological order."""
    rank = upward_rank(problem)
    return tuple(sorted(range(problem.n), key=lambda i: (-rank[i], i)))


def hop_levels(ops: Sequence[int], preds: Sequence[Sequence[int]]) -> dict[int, int]:
    """HOPE's ``uprank`` (eq. 3-8) inside the subgraph ``ops`` (given in topological order):
    1 for a source, else 1 + the largest level among predecessors in the subgraph."""
    level: dict[int, int] = {}
    for v in ops:
        level[v] = 1 + max((level[p] for p in preds[v] if p in level), default=0)
    return level


def lower_bound_us(problem: PartitionProblem) -> float:
    """A makespan no plan can beat: the longest chain of fastest latencies, the total of
    fastest latencies spread over all units, and each op's own earliest completion."""
    n = problem.n
    if not n:
        return 0.0
    fastest = [problem.min_latency(i) for i in range(n)]
    longest = [0.0] * n
    for i in range(n):
        longest[i] = fastest[i] + max((longest[p] for p in problem.preds[i]), default=0.0)
    own = max(
        min(
            problem.release_us[i][u] + problem.latency_us[i][u] + problem.output_us[i][u]
            for u in problem.supported[i]
        )
        for i in range(n)
    )
    return max(max(longest), sum(fastest) / len(problem.units), own)
