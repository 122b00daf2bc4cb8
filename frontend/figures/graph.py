"""The model graph view: a layered drawing of the analysis's node list, computed here so the
browser only draws (frontend/static/workbench/graph.js).

The layout is Sugiyama's framework in what runs in about linear time on 20,000 nodes in
pure Python: longest-path layering, then nodes with more consumers than producers, and
weight producers, pulled down next to their consumers; dummy points on edges that span a
few layers, so that skip connections route around the nodes they pass; barycenter sweeps
for the order within a layer; Brandes and Koepf's coordinates, which keep chains straight
and do not drift sideways down a deep graph.

Big models open collapsed into nested groups: stages and key-op blocks from the analysis's
``structure`` when it has one, modules between single-node cuts, straight chains (each
with its weight producers). Every node keeps its position in the full layout; the browser
draws a collapsed group at its head node and drops the rows nothing visible occupies, so
expanding a group needs no new layout.

The node list is in topological order (the analysis sorts it); every metric is a column
aligned with it, so a new one (latency, compute unit, kernel) is one more ``Metric``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP_KINDS = ("stage", "block", "module", "chain")  # outermost first
VISIBLE_LIMIT = 600  # a model with more nodes than this opens collapsed
MAX_BEND_SPAN = 40  # longer edges are drawn straight: dummies for them cost more than they help
SWEEPS = 4
LIGHT_PULL = 0.1  # how much a weight producer moves its consumer in the crossing reduction
GAP = (0.5, 0.75, 1.0)  # least distance in a layer between 0, 1 or 2 real nodes (not dummies)


@dataclass(frozen=True)
class Metric:
    """A per-node figure the view can colour by.

    ``values`` is aligned with the node list or keyed by node name (missing: unknown);
    ``aggregate`` gives a group's value: "sum", "mode", "min" or a function of member
    indices.
    """

    label: str
    kind: str = "continuous"  # or "categorical"
    values: Sequence[Any] | Mapping[str, Any] = ()
    unit: str = ""
    scale: str = "log"  # continuous colour scale: "log" or "linear"
    aggregate: str | Callable[[list[int]], Any] = "sum"


@dataclass(frozen=True)
class Group:
    kind: str  # one of GROUP_KINDS
    parent: int  # index of the enclosing group, or -1
    members: list[int]  # node indices, ascending
    label: str


@dataclass
class Layout:
    layer: list[int]  # per node, 0 at the top
    x: list[float]  # per node
    edges: list[tuple[int, int]]  # (producer, consumer); producer first in node order
    bends: list[list[float]]  # per edge: x on each layer strictly between its ends, or []
    dummies: list[list[int]]  # per edge: the ids (>= n) of those bend points in ``order``
    order: list[list[int]]  # per layer: node and dummy ids, left to right


def graph_payload(
    analysis: dict, metrics: Mapping[str, Metric] | None = None, *, initial: str | None = None
) -> dict:
    """The JSON the graph view draws: columns per node, edges with bends, groups, metrics.

    ``metrics`` adds to the built-in ones (op type, FLOPs, bytes, params, intensity), e.g.
    ``{"latency_us": Metric("latency", values={name: us}, unit="µs")}``; ``initial`` names
    the metric the view opens with (default: the first, op type).
    """
    nodes = analysis.get("node_list") or []
    names = [node["name"] for node in nodes]
    edges = node_edges(nodes)
    graph_inputs = {t["name"] for t in analysis.get("inputs", [])}
    owner = satellites(nodes, edges, graph_inputs)
    layout = layout_graph(len(nodes), edges, light=owner.keys())
    groups = find_groups(nodes, edges, owner, analysis.get("structure"))
    innermost = [-1] * len(nodes)
    for g, group in enumerate(groups):
        for v in group.members:
            innermost[v] = g  # children come after their parents
    all_metrics = {**builtin_metrics(nodes), **(metrics or {})}
    members_of = [group.members for group in groups]
    payload = {
        "nodes": {
            "name": names,
            "op_type": [node["op_type"] for node in nodes],
            "inputs": [node.get("inputs", []) for node in nodes],
            "outputs": [node.get("outputs", []) for node in nodes],
            "shapes": [node.get("output_shapes", []) for node in nodes],
            "macs": [node.get("macs") for node in nodes],
            "bytes_read": [node.get("bytes_read") for node in nodes],
            "bytes_written": [node.get("bytes_written") for node in nodes],
            "costed": [node.get("costed", True) for node in nodes],
            "x": [round(x, 2) for x in layout.x],
            "layer": layout.layer,
            "group": innermost,
        },
        "edges": [v for edge in layout.edges for v in edge],
        "bends": [[round(x, 2) for x in bend] for bend in layout.bends],
        "groups": {
            "kind": [group.kind for group in groups],
            "parent": [group.parent for group in groups],
            "head": [_head(group.members, owner, layout) for group in groups],
            "size": [len(group.members) for group in groups],
            "label": [group.label for group in groups],
        },
        "metrics": [
            _metric_payload(key, metric, names, members_of) for key, metric in all_metrics.items()
        ],
    }
    payload["collapsed"] = default_collapsed(payload)
    payload["initial_metric"] = initial if initial in all_metrics else next(iter(all_metrics))
    return payload


# -- graph --------------------------------------------------------------------------------


def node_edges(nodes: Sequence[dict]) -> list[tuple[int, int]]:
    """Producer -> consumer pairs by tensor name, once per pair, in node order."""
    producer: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for tensor in node.get("outputs", []):
            if tensor:
                producer.setdefault(tensor, index)
    seen: set[tuple[int, int]] = set()
    edges = []
    for index, node in enumerate(nodes):
        for tensor in node.get("inputs", []):
            source = producer.get(tensor) if tensor else None
            if source is not None and source != index and (source, index) not in seen:
                seen.add((source, index))
                edges.append((source, index))
    return edges


def satellites(
    nodes: Sequence[dict], edges: Sequence[tuple[int, int]], graph_inputs: set[str]
) -> dict[int, int]:
    """Nodes that only compute a constant for one consumer (weights made by Constant,
    ConstantOfShape, Unsqueeze or DequantizeLinear of those...), mapped to the first
    consumer that is not one of them."""
    preds: list[list[int]] = [[] for _ in nodes]
    consumers: list[list[int]] = [[] for _ in nodes]
    for u, v in edges:
        preds[v].append(u)
        consumers[u].append(v)
    owner: dict[int, int] = {}
    for v, node in enumerate(nodes):
        if (
            len(consumers[v]) == 1
            and all(u in owner for u in preds[v])
            and not any(t in graph_inputs for t in node.get("inputs", []))
        ):
            owner[v] = consumers[v][0]
    for v in sorted(owner, reverse=True):  # a consumer comes after its producer
        owner[v] = owner.get(owner[v], owner[v])
    return owner


# -- layout -------------------------------------------------------------------------------


def layout_graph(n: int, edges: Sequence[tuple[int, int]], light: Collection[int] = ()) -> Layout:
    """Lay out a DAG of ``n`` nodes top to bottom, deterministically. ``light`` nodes
    (weight producers) sit beside their consumer and barely sway the order of the rest."""
    edges = [(u, v) if u < v else (v, u) for u, v in edges]  # node order is topological
    light = set(light)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
        succs[u].append(v)
    layer = _layering(n, preds, succs, light)

    # Dummy points on edges spanning several layers, shortest edges first, within a budget.
    up: list[list[int]] = [[] for _ in range(n)]
    down: list[list[int]] = [[] for _ in range(n)]
    node_layer = list(layer)
    chains: list[list[int]] = [[] for _ in edges]
    spans = sorted(
        (layer[v] - layer[u], e) for e, (u, v) in enumerate(edges) if layer[v] - layer[u] > 1
    )
    budget = 2 * n
    for span, e in spans:
        if span > MAX_BEND_SPAN or span - 1 > budget:
            break
        budget -= span - 1
        u = edges[e][0]
        for step in range(1, span):
            chains[e].append(len(node_layer))
            node_layer.append(layer[u] + step)
            up.append([])
            down.append([])
    for e, (u, v) in enumerate(edges):
        if layer[v] - layer[u] == 1 or chains[e]:
            path = [u, *chains[e], v]
            for a, b in zip(path, path[1:], strict=False):
                down[a].append(b)
                up[b].append(a)
    pull = [1.0] * len(node_layer)
    for v in light:
        pull[v] = LIGHT_PULL

    order = _initial_order(n, node_layer, up, down, light)
    _reduce_crossings(order, up, down, pull)
    x = _place(order, up, down, n, light)
    low = min(x, default=0.0)
    x = [value - low for value in x]
    return Layout(
        layer=layer,
        x=x[:n],
        edges=edges,
        bends=[[x[d] for d in chain] for chain in chains],
        dummies=chains,
        order=order,
    )


def _layering(
    n: int, preds: list[list[int]], succs: list[list[int]], light: Collection[int]
) -> list[int]:
    layer = [0] * n
    for v in range(n):
        for u in preds[v]:
            if layer[u] >= layer[v]:
                layer[v] = layer[u] + 1
    # A node with more consumers than producers shortens more edges next to its consumers;
    # a weight producer belongs next to its consumer whatever it reads.
    for v in range(n - 1, -1, -1):
        if succs[v] and (len(succs[v]) > len(preds[v]) or v in light):
            layer[v] = min(layer[s] for s in succs[v]) - 1
    used = sorted(set(layer))
    rank = {value: index for index, value in enumerate(used)}
    return [rank[value] for value in layer]


def _initial_order(
    n: int, node_layer: list[int], up: list[list[int]], down: list[list[int]], light: set[int]
) -> list[list[int]]:
    """Depth-first from the sources, so a branch starts out contiguous in every layer."""
    order: list[list[int]] = [[] for _ in range(max(node_layer, default=-1) + 1)]
    seen = [False] * len(node_layer)
    roots = [v for v in range(n) if not up[v] and v not in light]
    roots += [v for v in range(n) if v in light or up[v]]  # left over: placed where first met
    for root in roots:
        if seen[root]:
            continue
        seen[root] = True
        stack = [root]
        while stack:
            v = stack.pop()
            order[node_layer[v]].append(v)
            for w in reversed(down[v]):
                if not seen[w]:
                    seen[w] = True
                    stack.append(w)
    return order


def _reduce_crossings(
    order: list[list[int]], up: list[list[int]], down: list[list[int]], pull: list[float]
) -> None:
    """Barycenter sweeps down and up; positions are relative to the layer's width so that
    layers of different widths compare."""
    rel = [0.0] * len(up)
    for row in order:
        _number(row, rel)
    for _ in range(SWEEPS):
        for rows, nbrs in ((order[1:], up), (order[-2::-1], down)):
            weight = [sum(pull[u] for u in around) for around in nbrs]
            for row in rows:
                keys = []
                for v in row:
                    around = nbrs[v]
                    if len(around) == 1:
                        keys.append((rel[around[0]], rel[v], v))
                    elif weight[v]:
                        mean = sum(pull[u] * rel[u] for u in around) / weight[v]
                        keys.append((mean, rel[v], v))
                    else:
                        keys.append((rel[v], rel[v], v))
                keys.sort()
                row[:] = [v for _b, _r, v in keys]
                _number(row, rel)


def _number(row: list[int], rel: list[float]) -> None:
    width = len(row)
    for index, v in enumerate(row):
        rel[v] = (index + 0.5) / width


def _place(
    order: list[list[int]], up: list[list[int]], down: list[list[int]], n: int, light: set[int]
) -> list[float]:
    """x by Brandes and Koepf ("Fast and Simple Horizontal Coordinate Assignment", GD 2001):
    align each node with a median neighbour into vertical blocks, pack the blocks left
    (then right, as dagre does, instead of the paper's classes and shifts), for the four
    combinations of up/down and left/right, and take the mean of the two middle results.
    Chains come out straight and nothing drifts, however deep the graph. Weight producers
    take part in no alignment: they sit wherever packing puts them beside their row."""
    size = len(up)
    if not size:
        return []
    marked = _inner_conflicts(order, up, n)
    runs = []
    for rows, nbrs in ((order, up), (order[::-1], down)):
        for mirrored in (False, True):
            laid = [row[::-1] for row in rows] if mirrored else rows
            x = _pack(laid, nbrs, marked, n, light, size)
            runs.append([-value for value in x] if mirrored else x)
    widths = [max(x) - min(x) for x in runs]
    narrowest = runs[widths.index(min(widths))]
    for k, x in enumerate(runs):  # the mirrored runs align by their right edge
        delta = max(narrowest) - max(x) if k % 2 else min(narrowest) - min(x)
        runs[k] = [value + delta for value in x]
    return [(sorted(four)[1] + sorted(four)[2]) / 2 for four in zip(*runs, strict=True)]


def _inner_conflicts(order: list[list[int]], up: list[list[int]], n: int) -> set[tuple[int, int]]:
    """Segments that cross an edge between two dummies (a long edge's inner segment): they
    may not align, so that long edges stay straight (type 1 conflicts of the paper)."""
    marked: set[tuple[int, int]] = set()
    position = {}
    for row in order:
        for index, v in enumerate(row):
            position[v] = index
    for upper, lower in zip(order, order[1:], strict=False):
        k0, scanned = 0, 0
        for l1, v in enumerate(lower):
            inner = next((u for u in up[v] if u >= n), None) if v >= n else None
            if inner is None and l1 != len(lower) - 1:
                continue
            k1 = position[inner] if inner is not None else len(upper) - 1
            for w in lower[scanned : l1 + 1]:
                for u in up[w]:
                    if (position[u] < k0 or position[u] > k1) and not (u >= n and w >= n):
                        marked.add((u, w))
            scanned, k0 = l1 + 1, k1
    return marked


def _pack(
    rows: list[list[int]],
    nbrs: list[list[int]],
    marked: set[tuple[int, int]],
    n: int,
    light: set[int],
    size: int,
) -> list[float]:
    """One Brandes-Koepf run: vertical alignment towards ``nbrs`` (the previous row), then
    left packing of the blocks, each block moved right as far as its right neighbours let
    it (Brandes, Walter and Zink's 2020 erratum: the original compaction could overlap)."""
    position = [0] * size
    for row in rows:
        for index, v in enumerate(row):
            position[v] = index
    root, align = list(range(size)), list(range(size))
    for row in rows[1:]:
        right_of = -1
        for v in row:
            around = [u for u in nbrs[v] if u not in light]
            if v in light or not around:
                continue
            around.sort(key=position.__getitem__)
            d = len(around)
            for m in sorted({(d - 1) // 2, d // 2}):
                u = around[m]
                if align[v] == v and position[u] > right_of:
                    if (u, v) in marked or (v, u) in marked:
                        continue
                    align[u], root[v] = v, root[u]
                    align[v] = root[v]
                    right_of = position[u]
    # The block graph: block of a -> block of b, at least their gap apart, for neighbours.
    after: dict[int, dict[int, float]] = {}
    before: dict[int, dict[int, float]] = {}
    for row in rows:
        for a, b in zip(row, row[1:], strict=False):
            ra, rb, gap = root[a], root[b], GAP[(a < n) + (b < n)]
            if after.setdefault(ra, {}).get(rb, 0.0) < gap:
                after[ra][rb] = gap
                before.setdefault(rb, {})[ra] = gap
    roots = [v for v in range(size) if root[v] == v]
    waiting = {r: len(before.get(r, ())) for r in roots}
    ready = [r for r in roots if not waiting[r]]
    topological = []
    while ready:
        r = ready.pop()
        topological.append(r)
        for s in after.get(r, ()):
            waiting[s] -= 1
            if not waiting[s]:
                ready.append(s)
    x = dict.fromkeys(roots, 0.0)
    for r in topological:
        for p, gap in before.get(r, {}).items():
            x[r] = max(x[r], x[p] + gap)
    for r in reversed(topological):
        right = after.get(r)
        if right:
            x[r] = max(x[r], min(x[s] - gap for s, gap in right.items()))
    return [x[root[v]] for v in range(size)]


def count_crossings(layout: Layout) -> int:
    """Edge crossings between adjacent layers (dummy segments included)."""
    position = {}
    for row in layout.order:
        for index, v in enumerate(row):
            position[v] = index
    segments: dict[int, list[tuple[int, int]]] = {}
    for (u, v), dummies in zip(layout.edges, layout.dummies, strict=True):
        path = [u, *dummies, v]
        if len(path) == 2 and layout.layer[v] - layout.layer[u] != 1:
            continue  # drawn straight, not part of the ordering
        for step, (a, b) in enumerate(zip(path, path[1:], strict=False)):
            segments.setdefault(layout.layer[u] + step, []).append((position[a], position[b]))
    crossings = 0
    for pairs in segments.values():
        pairs.sort()
        lows = [b for _a, b in pairs]
        crossings += _inversions(lows)
    return crossings


def _inversions(values: list[int]) -> int:
    if len(values) < 2:
        return 0
    size = max(values) + 2
    tree = [0] * size
    inversions = 0
    for seen, value in enumerate(values):
        i, not_greater = value + 1, 0
        while i > 0:
            not_greater += tree[i]
            i -= i & -i
        inversions += seen - not_greater
        i = value + 1
        while i < size:
            tree[i] += 1
            i += i & -i
    return inversions


# -- groups -------------------------------------------------------------------------------


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
    for kind in GROUP_KINDS:
        claimed: set[int] = set()
        for candidate, label in candidates[kind]:
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


def _head(members: list[int], owner: Mapping[int, int], layout: Layout) -> int:
    main = [v for v in members if v not in owner] or members
    return min(main, key=lambda v: (layout.layer[v], layout.x[v], v))


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


def default_collapsed(payload: dict) -> list[int]:
    """Collapse chains, then blocks, then stages, until few enough items remain visible."""
    kinds = payload["groups"]["kind"]
    collapsed: list[int] = []
    if len(payload["nodes"]["name"]) <= VISIBLE_LIMIT:
        return collapsed
    for kind in reversed(GROUP_KINDS):
        collapsed += [g for g, k in enumerate(kinds) if k == kind]
        if len(visible_items(payload, collapsed)) <= VISIBLE_LIMIT:
            break
    return sorted(collapsed)


def visible_items(payload: dict, collapsed: Sequence[int]) -> list[tuple[str, int]]:
    """What the browser draws for a set of collapsed groups: ("node", i) for nodes outside
    every collapsed group, ("group", g) for the outermost collapsed groups. graph.js
    computes the same."""
    parent = payload["groups"]["parent"]
    shut = set(collapsed)
    top = [-1] * len(parent)
    for g, p in enumerate(parent):
        top[g] = top[p] if p >= 0 and top[p] >= 0 else (g if g in shut else -1)
    items = [("group", g) for g in range(len(parent)) if top[g] == g]
    items += [("node", v) for v, g in enumerate(payload["nodes"]["group"]) if g < 0 or top[g] < 0]
    return items


# -- metrics ------------------------------------------------------------------------------


def builtin_metrics(nodes: Sequence[dict]) -> dict[str, Metric]:
    flops = [node.get("flops") for node in nodes]
    moved = [
        None
        if node.get("bytes_read") is None and node.get("bytes_written") is None
        else (node.get("bytes_read") or 0) + (node.get("bytes_written") or 0)
        for node in nodes
    ]

    def intensity(members: list[int]) -> float | None:
        work = sum(flops[v] or 0 for v in members)
        traffic = sum(moved[v] or 0 for v in members)
        return round(work / traffic, 3) if traffic else None

    def heaviest_op(members: list[int]) -> str:
        return nodes[max(members, key=lambda v: (flops[v] or 0, -v))]["op_type"]

    return {
        "op_type": Metric(
            "op type", "categorical", [node["op_type"] for node in nodes], aggregate=heaviest_op
        ),
        "flops": Metric("FLOPs", values=flops),
        "bytes": Metric("bytes moved", values=moved, unit="B"),
        "params": Metric("parameters", values=[node.get("params") for node in nodes]),
        "intensity": Metric(
            "FLOPs per byte",
            values=[node.get("intensity") for node in nodes],
            aggregate=intensity,
        ),
    }


def _metric_payload(
    key: str, metric: Metric, names: list[str], members_of: list[list[int]]
) -> dict:
    if isinstance(metric.values, Mapping):
        values = [metric.values.get(name) for name in names]
    else:
        values = list(metric.values)
        if len(values) != len(names):
            raise ValueError(f"metric {key!r} has {len(values)} values for {len(names)} nodes")
    aggregate = metric.aggregate
    if aggregate == "sum":
        group_values = [_sum([values[v] for v in members]) for members in members_of]
    elif aggregate == "mode":
        group_values = [_mode([values[v] for v in members]) for members in members_of]
    elif aggregate == "min":  # e.g. a group's worst layer by SNR
        group_values = [
            min((values[v] for v in members if values[v] is not None), default=None)
            for members in members_of
        ]
    elif callable(aggregate):
        group_values = [aggregate(members) for members in members_of]
    else:
        raise ValueError(f"metric {key!r}: unknown aggregate {aggregate!r}")
    payload = {
        "key": key,
        "label": metric.label,
        "kind": metric.kind,
        "unit": metric.unit,
        "scale": metric.scale,
    }
    if metric.kind == "categorical":
        counts = Counter(value for value in values if value is not None)
        categories = [value for value, _count in counts.most_common()]
        code = {value: index for index, value in enumerate(categories)}
        payload["categories"] = categories
        payload["values"] = [code.get(value) for value in values]
        payload["group_values"] = [code.get(value) for value in group_values]
    else:
        payload["values"] = values
        payload["group_values"] = group_values
    return payload


def _sum(values: list) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def _mode(values: list) -> Any:
    counts = Counter(value for value in values if value is not None)
    return counts.most_common(1)[0][0] if counts else None
