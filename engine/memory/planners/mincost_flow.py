"""Min-cost flow shared objects (tflite_gpu section 2.7.3b, Fig. 6).

The paper's network: source ``s``, sink ``t``, and nodes ``l_x``, ``r_x`` per tensor, all
capacities 1, with edges ``s -> r_x`` (cost ``size_x``: open a new object for x),
``l_x -> r_y`` (cost ``max(0, size_y - size_x)``: y takes x's object, allowed when x's
last use comes before y's first), ``s -> l_x`` and ``r_x -> t`` (cost 0). A flow of value
N decodes to objects: a saturated ``l_x -> r_y`` chains y after x.

Every unit of flow enters one ``r_y`` either straight from ``s`` or through one ``l_x``,
so the flow is an assignment of each tensor to "new" or to a distinct predecessor. We
solve it exactly by successive shortest paths with Dijkstra and dual potentials (the
Jonker-Volgenant form of SSP for this bipartite shape; the paper proposes SPFA), each
Dijkstra vectorised over the dense columns with numpy. Cost O(N^3) in the worst case;
above ``exact_max_buffers`` the planner declines.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.memory.lifetimes import Buffer
from engine.memory.planners.registry import (
    Placement,
    PlannerOptions,
    PlannerSkipped,
    objects_placement,
    register,
)


def flow_costs(buffers: Sequence[Buffer]) -> tuple[np.ndarray, int]:
    """Cost matrix: row y, column x < N for ``l_x -> r_y``, column N + y for ``s -> r_y``.

    Missing edges get ``forbidden`` (more than every tensor opening its own object), so an
    optimum never uses one.
    """
    n = len(buffers)
    size = np.fromiter((b.size for b in buffers), np.int64, n)
    first = np.fromiter((b.first for b in buffers), np.int64, n)
    last = np.fromiter((b.last for b in buffers), np.int64, n)
    forbidden = int(size.sum()) + 1
    cost = np.full((n, 2 * n), forbidden, dtype=np.int64)
    reuse = last[None, :] < first[:, None]  # [y, x]: x dies before y is born
    cost[:, :n] = np.where(reuse, np.maximum(0, size[:, None] - size[None, :]), forbidden)
    cost[np.arange(n), n + np.arange(n)] = size
    return cost, forbidden


def min_cost_assignment(cost: np.ndarray) -> np.ndarray:
    """Column of each row in a minimum-cost assignment (rows <= columns)."""
    rows, cols = cost.shape
    u = np.zeros(rows, dtype=np.int64)
    v = np.zeros(cols, dtype=np.int64)
    col_of = np.full(rows, -1, dtype=np.int64)
    row_of = np.full(cols, -1, dtype=np.int64)
    inf = np.iinfo(np.int64).max // 4
    for start in range(rows):
        dist = np.full(cols, inf, dtype=np.int64)
        via = np.full(cols, -1, dtype=np.int64)
        seen_rows = np.zeros(rows, dtype=bool)
        done = np.zeros(cols, dtype=bool)
        row, reached, sink = start, 0, -1
        while sink < 0:
            seen_rows[row] = True
            reduced = reached + cost[row] - u[row] - v
            better = ~done & (reduced < dist)
            via[better] = row
            dist[better] = reduced[better]
            open_dist = np.where(done, inf, dist)
            reached = int(open_dist.min())
            ties = np.flatnonzero(open_dist == reached)
            free = ties[row_of[ties] < 0]
            col = int(free[0] if len(free) else ties[0])
            done[col] = True
            if row_of[col] < 0:
                sink = col
            else:
                row = int(row_of[col])
        # Dual update keeps reduced costs non-negative for the next Dijkstra.
        u[start] += reached
        others = seen_rows.copy()
        others[start] = False
        u[others] += reached - dist[col_of[others]]
        v[done] -= reached - dist[done]
        col = sink
        while True:
            row = int(via[col])
            row_of[col] = row
            col_of[row], col = col, int(col_of[row])
            if row == start:
                break
    return col_of


@register("mincost-flow", kind="objects", heuristic=False)
def plan_mincost_flow(buffers: Sequence[Buffer], steps: int, options: PlannerOptions) -> Placement:
    """Exact min-cost flow on the paper's network (declines above exact_max_buffers)."""
    n = len(buffers)
    if n > options.exact_max_buffers:
        raise PlannerSkipped(
            f"min-cost flow is exact and O(N^3): {n} buffers exceed the limit of "
            f"{options.exact_max_buffers}"
        )
    if n == 0:
        return objects_placement([], [])
    cost, _ = flow_costs(buffers)
    column = min_cost_assignment(cost)
    successor = {int(x): y for y, x in enumerate(column) if x < n}
    objects = [-1] * n
    sizes: list[int] = []
    for y, x in enumerate(column):
        if x < n:
            continue  # y continues another tensor's object
        obj, member = len(sizes), y
        sizes.append(0)
        while member is not None:
            objects[member] = obj
            sizes[obj] = max(sizes[obj], buffers[member].size)
            member = successor.get(member)
    return objects_placement(objects, sizes)
