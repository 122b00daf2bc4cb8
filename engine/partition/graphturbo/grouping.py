"""Grouping subgraphs by merge patterns (GraphTurbo, OSDI '23, section 3.2, Algorithm 2).

Every layer (a chain of :func:`engine.graph.structure.detect_structure`, at most one
learned op, as the paper's input is a graph already fused layer by layer) starts as a
subgraph; straight, diamond and branch merges repeat
until none applies, never across a stage boundary (the stages of
:func:`engine.graph.structure.detect_structure`). With ``f(X)`` the factor of X's
BestSplit and ``M`` the merged candidate:

- straight (P is Q's only producer, Q is P's only consumer) and branch (P's only consumer
  is Q, which has other producers): rule (i), ``f(Q) >= f(P)`` and ``f(M) <= f(Q)``;
- diamond (entry E, exit X, at least two paths between them, the subgraphs in between
  touching nothing else): merge everything but E under rule (ii),
  ``f(M) <= max(f(members))``.

Every decision is logged with its rule and the factors it compared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.partition.graphturbo.splitinfo import SplitTuple, best_split, split_info
from engine.partition.graphturbo.view import DsaGraph

MAX_ENTRY_CANDIDATES = 40
"""Nearest entries tried per diamond exit; bounds the search on long stages."""


@dataclass
class Grouping:
    """Subgraphs (sorted node indices, in topological order of their first node), each
    with its BestSplit, the decisions taken and the subgraph count after each pass."""

    groups: list[list[int]]
    best: list[SplitTuple | None]
    decisions: list[dict] = field(default_factory=list)
    counts: list[dict] = field(default_factory=list)


class _State:
    def __init__(self, view: DsaGraph, local_bytes: int, cores: int):
        self.view, self.local, self.cores = view, local_bytes, cores
        first: dict[tuple[int, int], int] = {}  # a layer across a stage boundary is cut there
        self.group_of = [first.setdefault((view.layer[i], view.stage[i]), i) for i in range(view.n)]
        self.members: dict[int, list[int]] = {}
        for i, g in enumerate(self.group_of):
            self.members.setdefault(g, []).append(i)
        self._best: dict[tuple[int, ...], SplitTuple | None] = {}
        self.decisions: list[dict] = []
        self._seen: set[tuple] = set()

    def best(self, members) -> SplitTuple | None:
        key = tuple(sorted(members))
        if key not in self._best:
            self._best[key] = best_split(split_info(self.view, key, self.local, self.cores))
        return self._best[key]

    def f(self, members) -> int | None:
        b = self.best(members)
        return None if b is None else b.factor

    def edges(self) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
        preds = {g: set() for g in self.members}
        succs = {g: set() for g in self.members}
        for t, p in self.view.producer.items():
            for c in self.view.consumers.get(t, []):
                a, b = self.group_of[p], self.group_of[c]
                if a != b:
                    succs[a].add(b)
                    preds[b].add(a)
        return preds, succs

    def stage(self, g: int) -> int:
        return self.view.stage[self.members[g][0]]

    def merge(self, gs: list[int]) -> int:
        keep = min(gs)
        for g in gs:
            if g != keep:
                for i in self.members.pop(g):
                    self.group_of[i] = keep
                    self.members[keep].append(i)
        self.members[keep].sort()
        return keep

    def decide(self, rule: str, gs: list[int], ok: bool, why: str) -> bool:
        key = (rule, tuple(tuple(self.members[g]) for g in gs))
        if ok or key not in self._seen:
            self._seen.add(key)
            names = [self.view.names[self.members[g][0]] for g in gs]
            self.decisions.append({"rule": rule, "subgraphs": names, "merged": ok, "why": why})
        return ok


def _rule_i(s: _State, rule: str, p: int, q: int) -> bool:
    fp, fq = s.f(s.members[p]), s.f(s.members[q])
    fm = s.f(s.members[p] + s.members[q])
    ok = None not in (fp, fq, fm) and fq >= fp and fm <= fq
    return s.decide(rule, [p, q], ok, f"rule (i): f(P)={fp}, f(Q)={fq}, f(M)={fm}")


def _straight(s: _State) -> bool:
    preds, succs = s.edges()
    for p in sorted(s.members):
        if len(succs[p]) == 1:
            (q,) = succs[p]
            if preds[q] == {p} and s.stage(p) == s.stage(q) and _rule_i(s, "straight", p, q):
                s.merge([p, q])
                return True
    return False


def _branch(s: _State) -> bool:
    preds, succs = s.edges()
    for q in sorted(s.members):
        if len(preds[q]) < 2:
            continue
        for p in sorted(preds[q]):
            if succs[p] == {q} and s.stage(p) == s.stage(q) and _rule_i(s, "branch", p, q):
                s.merge([p, q])
                return True
    return False


def _diamond(s: _State) -> bool:
    preds, succs = s.edges()
    for x in sorted(s.members):
        if len(preds[x]) < 2:
            continue
        seen, stack = set(), list(preds[x])
        while stack:
            g = stack.pop()
            if g not in seen and s.stage(g) == s.stage(x):
                seen.add(g)
                stack.extend(preds[g])
        for e in sorted(seen, reverse=True)[:MAX_ENTRY_CANDIDATES]:
            inner = _between(e, seen, succs)
            if not inner or any(not preds[g] <= inner | {e} for g in inner):
                continue
            if any(not succs[g] <= inner | {x} for g in inner):
                continue
            fanout = [g for g in [e, *inner] if len(succs[g] & (inner | {x})) >= 2]
            if not fanout:
                continue
            group = sorted(inner | {x})
            fs = [s.f(s.members[g]) for g in group]
            fm = s.f([i for g in group for i in s.members[g]])
            ok = None not in fs and fm is not None and fm <= max(fs)
            why = f"rule (ii): f(M)={fm}, max f(members)={max(fs, key=lambda v: v or 0)}"
            if s.decide("diamond", group, ok, why):
                s.merge(group)
                return True
            break
    return False


def _between(e: int, ancestors_of_x: set[int], succs) -> set[int]:
    """The subgraphs on paths from ``e`` to the exit (whose ancestors are given)."""
    inner, stack = set(), [g for g in succs[e] if g in ancestors_of_x]
    while stack:
        g = stack.pop()
        if g not in inner:
            inner.add(g)
            stack.extend(h for h in succs[g] if h in ancestors_of_x)
    return inner


PATTERNS: tuple[tuple[str, Callable[[_State], bool]], ...] = (
    ("straight", _straight),
    ("diamond", _diamond),
    ("branch", _branch),
)


def group_subgraphs(view: DsaGraph, local_bytes: int, cores: int) -> Grouping:
    """Algorithm 2: apply the patterns in turn until a whole round merges nothing."""
    s = _State(view, local_bytes, cores)
    counts = [{"pattern": "start", "subgraphs": len(s.members)}]
    changed = True
    while changed:
        changed = False
        for name, apply in PATTERNS:
            while apply(s):
                changed = True
            counts.append({"pattern": name, "subgraphs": len(s.members)})
    groups = [s.members[g] for g in sorted(s.members)]
    return Grouping(groups, [s.best(m) for m in groups], s.decisions, counts)
