"""A memory-aware execution order: lower the peak of live bytes, never raise it.

The memory a plan needs is bounded below by the peak of live bytes, and that peak
depends on the order the nodes run in: an order that finishes one branch before opening
the next keeps fewer tensors alive. Candidates, each a valid topological order:

- ``greedy-growth``: list scheduling that runs the ready node which adds the fewest live
  bytes (outputs allocated minus inputs freed), ties by smallest output, then by position;
- ``greedy-alloc``: the ready node with the smallest outputs first, ties by growth;
- ``depth-first``: GraphTurbo's OrderDFS (graphturbo section 2.3, Algorithm 3): always
  run the most recently readied node.

Every candidate is scored by the real lower bound (same records, in-place rules
included) and the best is kept only if it beats the original; otherwise the original
order is returned, so the search can never make the peak worse.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from engine.graph.ir import Graph
from engine.memory.lifetimes import LifetimeOptions, Lifetimes, UsageTable


@dataclass(frozen=True)
class OrderSearch:
    """The chosen order (indices into ``graph.nodes``) and the peaks before and after."""

    order: list[int]
    method: str
    original_peak_bytes: int
    peak_bytes: int
    tried: dict[str, int]
    """Peak bytes of every candidate order, by method."""

    @property
    def gain_bytes(self) -> int:
        return self.original_peak_bytes - self.peak_bytes


def search_order(
    graph: Graph, options: LifetimeOptions | None = None, original: list[int] | None = None
) -> tuple[OrderSearch, Lifetimes]:
    """Try the candidate orders; returns the search result and the chosen order's records."""
    table = UsageTable(graph, options or LifetimeOptions())
    original = list(range(len(graph.nodes))) if original is None else list(original)
    best_order, method = original, "original"
    original_peak = best_peak = table.peak(original)
    tried = {"original": original_peak}
    deps = _Dependencies(graph, table, original)
    for name, schedule in CANDIDATES.items():
        order = schedule(deps)
        peak = tried[name] = table.peak(order)
        if peak < best_peak:
            best_order, best_peak, method = order, peak, name
    search = OrderSearch(best_order, method, original_peak, best_peak, tried)
    return search, table.lifetimes(best_order)


class _Dependencies:
    """Node-level view of the graph for the schedulers: edges and planned bytes."""

    def __init__(self, graph: Graph, table: UsageTable, original: list[int]) -> None:
        index_of = {n.name: i for i, n in enumerate(graph.nodes)}
        self.n = len(graph.nodes)
        self.position = [0] * self.n  # step in the original order, for ties
        for step, index in enumerate(original):
            self.position[index] = step
        self.consumers: list[list[int]] = [[] for _ in range(self.n)]
        self.indegree = [0] * self.n
        for i, node in enumerate(graph.nodes):
            reads = dict.fromkeys(n for n in (*node.inputs, *node.implicit_inputs) if n)
            preds = {index_of[p] for t in reads if (p := graph.tensors[t].producer)}
            for p in preds:
                self.consumers[p].append(i)
            self.indegree[i] = len(preds)
        self.alloc = [0] * self.n  # planned bytes a node writes
        self.dead = [0] * self.n  # of which nobody reads: freed at once
        self.reads: list[list[int]] = [[] for _ in range(self.n)]
        self.size: dict[int, int] = {}  # planned tensors freed by their last reader
        self.readers: dict[int, list[int]] = {}
        for k, (size, producer, readers) in enumerate(
            zip(table.sizes, table.producers, table.readers, strict=True)
        ):
            freed_by_readers = table.freed_by_readers(k)
            if producer >= 0:
                self.alloc[producer] += size
                if freed_by_readers and not readers:
                    self.dead[producer] += size
            if freed_by_readers and readers:
                self.size[k] = size
                self.readers[k] = readers
                for r in readers:
                    self.reads[r].append(k)


def _list_schedule(deps: _Dependencies, key: Callable[[int, int], tuple]) -> list[int]:
    """Kahn's algorithm picking the ready node of smallest ``key(node, freed_bytes)``."""
    remaining = {t: len(r) for t, r in deps.readers.items()}
    done = [False] * deps.n
    indegree = deps.indegree.copy()

    def freed(i: int) -> int:
        return deps.dead[i] + sum(deps.size[t] for t in deps.reads[i] if remaining[t] == 1)

    heap = [(key(i, freed(i)), i) for i in range(deps.n) if indegree[i] == 0]
    heapq.heapify(heap)
    version = {i: k for k, i in heap}
    order = []
    while heap:
        k, i = heapq.heappop(heap)
        if done[i] or version.get(i) != k:
            continue  # a stale entry: the node was rescored or already ran
        done[i] = True
        order.append(i)
        for t in deps.reads[i]:
            remaining[t] -= 1
            if remaining[t] == 1:  # its last reader now frees it: rescore that reader
                last = next(r for r in deps.readers[t] if not done[r])
                if indegree[last] == 0:
                    version[last] = key(last, freed(last))
                    heapq.heappush(heap, (version[last], last))
        for c in deps.consumers[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                version[c] = key(c, freed(c))
                heapq.heappush(heap, (version[c], c))
    return order


def _greedy_growth(deps: _Dependencies) -> list[int]:
    return _list_schedule(
        deps, lambda i, freed: (deps.alloc[i] - freed, deps.alloc[i], deps.position[i])
    )


def _greedy_alloc(deps: _Dependencies) -> list[int]:
    return _list_schedule(
        deps, lambda i, freed: (deps.alloc[i], deps.alloc[i] - freed, deps.position[i])
    )


def _depth_first(deps: _Dependencies) -> list[int]:
    indegree = deps.indegree.copy()
    by_position = sorted(range(deps.n), key=lambda i: deps.position[i])
    stack = [i for i in reversed(by_position) if indegree[i] == 0]
    order = []
    while stack:
        i = stack.pop()
        order.append(i)
        ready = []
        for c in deps.consumers[i]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
        # The earliest of the newly ready nodes runs next.
        stack += sorted(ready, key=lambda c: -deps.position[c])
    return order


CANDIDATES: dict[str, Callable[[_Dependencies], list[int]]] = {
    "greedy-growth": _greedy_growth,
    "greedy-alloc": _greedy_alloc,
    "depth-first": _depth_first,
}
