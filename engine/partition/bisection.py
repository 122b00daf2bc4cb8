"""HOPE's upward-rank bisection pre-partitioning (thesis 3.6.3, eq. 3-7 and 3-8, Algorithm 1).

Each op gets its ``uprank`` (1 + the longest path in hops from a source of the subgraph);
cutting at a rank threshold ``r`` puts ranks ``<= r`` in the first part and the rest in the
second, so every edge between the parts goes forward and the parts stay acyclic. Among the
thresholds that keep both parts within ``(1 + eps) * |V| / 2`` ops, the one with the smallest
vertex cut wins, ties to the most balanced. Parts are bisected again until each has fewer
than ``nt`` ops.

What differs from the thesis: the vertex cut is counted exactly (ops of the first part with
a successor in the second) rather than as the number of ops at the threshold rank; when no
threshold is balanced enough, ``eps`` is relaxed (doubled) rather than tightened, and when
no threshold exists at all (every op at one rank) the ops are split by (rank, order), which
keeps the parts acyclic because ops of one rank never depend on each other.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.partition.problem import PartitionProblem
from engine.partition.ranks import hop_levels


def bisect_ops(
    ops: Sequence[int], preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]], eps: float
) -> tuple[list[int], list[int]]:
    """Split ``ops`` (topological order) in two; every edge between them goes first -> second."""
    level = hop_levels(ops, preds)
    top = max(level.values())
    count = [0] * (top + 2)
    for v in ops:
        count[level[v]] += 1
    # cut[r]: ops of level <= r with a successor of level > r, via a difference array.
    delta = [0] * (top + 2)
    for v in ops:
        reach = max((level[s] for s in succs[v] if s in level), default=0)
        if reach > level[v]:
            delta[level[v]] += 1
            delta[reach] -= 1
    size = len(ops)
    while True:
        limit = (1 + eps) * size / 2
        best, best_key, below, cut = None, None, 0, 0
        for r in range(1, top):
            below += count[r]
            cut += delta[r]
            if max(below, size - below) <= limit:
                key = (cut, abs(2 * below - size))
                if best_key is None or key < best_key:
                    best, best_key = r, key
        if best is not None or top <= 1 or eps >= 1:
            break
        eps = min(1.0, 2 * eps)
    if best is None:
        ranked = sorted(ops, key=lambda v: (level[v], v))
        first = set(ranked[: size // 2])
    else:
        first = {v for v in ops if level[v] <= best}
    return [v for v in ops if v in first], [v for v in ops if v not in first]


def partition_ops(problem: PartitionProblem, nt: int, eps: float) -> list[list[int]]:
    """Parts of fewer than ``nt`` ops each, in an order where every edge goes forward."""
    preds, succs = problem.preds, problem.succs
    parts: list[list[int]] = []
    stack = [list(range(problem.n))]
    while stack:
        ops = stack.pop()
        if len(ops) < nt:
            if ops:
                parts.append(ops)
            continue
        first, second = bisect_ops(ops, preds, succs, eps)
        stack.append(second)
        stack.append(first)
    return parts
