"""The nested groups of the graph view, and which of them a big model opens collapsed.

Big models open collapsed into nested groups: the module scopes in the node names when
they carry them (``scopes``), else stages and key-op blocks from the analysis's
``structure`` when it has one, modules between single-node cuts, straight chains (each
with its weight producers). Each group's inside is laid out on its own when it is first
opened (``levels``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP_KINDS = ("scope", "stage", "block", "module", "chain")  # outermost first
VISIBLE_LIMIT = 600  # the first view opens groups while it shows at most this many items


@dataclass(frozen=True)
class Group:
    kind: str  # one of GROUP_KINDS ("scope": see ``scopes``)
    parent: int  # index of the enclosing group, or -1
    members: list[int]  # node indices, ascending
    label: str


def find_groups(
    nodes: Sequence[dict],
    edges: Sequence[tuple[int, int]],
    owner: Mapping[int, int],
    structure: dict | None = None,
) -> list[Group]:
    """Nested groups, parents before their children.

    Stages and key-op blocks come from the analysis's ``structure`` when it has one;
    modules (the nodes up to a single-node cut) are always computed, and so are straight
    chains unless the structure lists its own. Weight producers join their consumer's
    groups. A candidate that straddles an outer group is cut along it; one that would
    equal its parent is dropped.
    """
    index = {node["name"]: i for i, node in enumerate(nodes)}
    structure = structure or {}
    n = len(nodes)
    candidates = {
        "stage": _named_groups(structure.get("stages"), index),
        "block": _named_groups(structure.get("blocks"), index),
        "module": [(members, "") for members in cut_modules(n, edges, owner)],
        "chain": _named_groups(structure.get("chains"), index)
        or [(members, "") for members in straight_chains(n, edges, owner)],
    }
    attached: dict[int, list[int]] = {}
    for satellite, consumer in owner.items():
        attached.setdefault(consumer, []).append(satellite)
    groups: list[Group] = []
    innermost = [-1] * n
    for kind, found in candidates.items():
        claimed: set[int] = set()
        for candidate, label in found:
            members = {v for v in candidate if v not in owner}
            members |= {s for v in members for s in attached.get(v, ())}
            parts: dict[int, list[int]] = {}
            for v in sorted(members - claimed):
                parts.setdefault(innermost[v], []).append(v)
            for parent, part in parts.items():
                if len(part) < 2 or (parent >= 0 and len(part) == len(groups[parent].members)):
                    continue
                claimed.update(part)
                for v in part:
                    innermost[v] = len(groups)
                groups.append(Group(kind, parent, part, label or _label(kind, nodes, part, owner)))
    return groups


def _named_groups(raw: Any, index: Mapping[str, int]) -> list[tuple[list[int], str]]:
    """The structure's groups: lists of node names, or dicts with ``nodes`` (a stage's
    ``resolution`` and ``channels`` name it)."""
    groups = []
    for group in raw or []:
        names, label = group, ""
        if isinstance(group, dict):
            names = group.get("nodes", [])
            if group.get("resolution"):
                label = "×".join(str(d) for d in group["resolution"])
                label += f", {group['channels']} channels" if group.get("channels") else ""
        groups.append(([index[name] for name in names if name in index], label))
    return groups


def straight_chains(
    n: int, edges: Sequence[tuple[int, int]], owner: Mapping[int, int]
) -> list[list[int]]:
    """Maximal runs u -> v where u feeds only v and v is fed only by u (weights aside);
    a lone node is a chain too, so that it gathers its weight producers."""
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        if u not in owner:
            succs[u].append(v)
            preds[v].append(u)

    def linked(u: int) -> bool:
        return len(succs[u]) == 1 and len(preds[succs[u][0]]) == 1

    chains = []
    for v in range(n):
        if v in owner or (len(preds[v]) == 1 and linked(preds[v][0])):
            continue  # not the start of a chain
        chain = [v]
        while linked(chain[-1]):
            chain.append(succs[chain[-1]][0])
        chains.append(chain)
    return chains


def cut_modules(
    n: int, edges: Sequence[tuple[int, int]], owner: Mapping[int, int]
) -> list[list[int]]:
    """The runs of nodes that end at a cut: a node that every path from before it to after
    it passes through. They are residual blocks, inception modules, dense layers."""
    reach = [-1] * n  # furthest consumer of each node, weight producers aside
    for u, v in edges:
        if u not in owner and v > reach[u]:
            reach[u] = v
    blocks: list[list[int]] = []
    current: list[int] = []
    furthest = -1  # furthest consumer of the nodes before v
    for v in range(n):
        if v in owner:
            continue
        current.append(v)
        if furthest <= v:
            if len(current) > 1:
                blocks.append(current)
            current = []
        furthest = max(furthest, reach[v])
    return blocks


def _label(kind: str, nodes: Sequence[dict], members: list[int], owner: Mapping[int, int]) -> str:
    """A chain reads as its ops in order; a block or stage as its commonest ops."""
    main = [nodes[v]["op_type"] for v in members if v not in owner]
    if kind == "chain":
        if len(main) <= 3:
            return " → ".join(main)
        return f"{main[0]} → … → {main[-1]} ({len(main)} ops)"
    counts = Counter(main)
    top = [f"{op}×{count}" if count > 1 else op for op, count in counts.most_common(3)]
    return " · ".join(top) + (" · …" if len(counts) > 3 else "")
