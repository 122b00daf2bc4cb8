"""The layered layout of the graph view.

The layout is Sugiyama's framework in what runs in about linear time on 20,000 nodes in
pure Python: longest-path layering, then nodes with more consumers than producers, and
weight producers, pulled down next to their consumers; dummy points on edges that span a
few layers, so that skip connections route around the nodes they pass; barycenter sweeps
for the order within a layer; Brandes and Koepf's coordinates, which keep chains straight
and do not drift sideways down a deep graph.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

MAX_BEND_SPAN = 40  # longer edges are drawn straight: dummies for them cost more than they help
SWEEPS = 4
LIGHT_PULL = 0.1  # how much a weight producer moves its consumer in the crossing reduction
GAP = (0.5, 0.75, 1.0)  # least distance in a layer between 0, 1 or 2 real nodes (not dummies)


@dataclass
class Layout:
    layer: list[int]  # per node, 0 at the top
    x: list[float]  # per node
    edges: list[tuple[int, int]]  # (producer, consumer); producer first in node order
    bends: list[list[float]]  # per edge: x on each layer strictly between its ends, or []
    dummies: list[list[int]]  # per edge: the ids (>= n) of those bend points in ``order``
    order: list[list[int]]  # per layer: node and dummy ids, left to right


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
    if all(len(row) <= 1 for row in order):  # a straight line (most chains): nothing to order
        x = [0.0] * len(node_layer)
    else:
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
