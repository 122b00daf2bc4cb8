"""Node identity and execution order of an ONNX graph.

Nodes get unique names (unnamed ones become ``<op_type>_<index>``), tensors read by
control-flow subgraphs from the enclosing graph count as dependencies, and the order is
Kahn's algorithm with a heap keyed on file position, so a graph that is already sorted
keeps its order exactly.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import onnx

from engine.errors import InvalidModelError

_MAX_NAMED = 8


def unique_node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """Return one unique name per node, keeping given names where they are unique."""
    taken = {n.name for n in nodes if n.name}
    seen: set[str] = set()
    names = []
    for i, node in enumerate(nodes):
        name = node.name or f"{node.op_type}_{i}"
        if name in seen or (not node.name and name in taken):
            base, k = name, 1
            while f"{base}_{k}" in taken or f"{base}_{k}" in seen:
                k += 1
            name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """Return the control-flow subgraphs held in a node's attributes (If, Loop, Scan)."""
    found = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def count_subgraph_nodes(node: onnx.NodeProto) -> int:
    """Count the nodes inside a node's subgraphs, recursively."""
    return sum(len(g.node) + sum(count_subgraph_nodes(n) for n in g.node) for g in subgraphs(node))


def outer_scope_inputs(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (implicit inputs)."""
    outer: set[str] = set()
    for graph in subgraphs(node):
        local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        local |= {o for n in graph.node for o in n.output}
        for inner in graph.node:
            reads = set(inner.input) | outer_scope_inputs(inner)
            outer |= {name for name in reads if name and name not in local}
    return outer


def node_dependencies(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs (optional ones omitted) followed by implicit subgraph inputs."""
    explicit = [name for name in node.input if name]
    if not any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return explicit
    return explicit + sorted(outer_scope_inputs(node) - set(explicit))


def topological_order(
    nodes: Sequence[onnx.NodeProto],
    defined: Iterable[str],
    names: Sequence[str] | None = None,
) -> list[int]:
    """Return node indices in execution order.

    ``defined`` are the tensors available before any node runs (graph inputs and
    initializers). Raises :class:`InvalidModelError` naming the node and tensor when an
    input is never defined, or naming the nodes of a cycle.
    """
    names = names if names is not None else unique_node_names(nodes)
    available = set(defined)
    producer: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if not out:
                continue
            if out in producer:
                other = names[producer[out]]
                raise InvalidModelError(
                    f"tensor '{out}' is produced by two nodes: '{other}' and '{names[i]}'"
                )
            producer[out] = i

    successors: list[list[int]] = [[] for _ in nodes]
    predecessors: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for name in node_dependencies(node):
            if name in producer:
                p = producer[name]
                successors[p].append(i)
                predecessors[i].append(p)
            elif name not in available:
                raise InvalidModelError(
                    f"node '{names[i]}' ({node.op_type}) reads tensor '{name}', which no node "
                    "produces and which is neither a graph input nor an initializer"
                )

    indegree = [len(p) for p in predecessors]
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for s in successors[i]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, s)
    if len(order) < len(nodes):
        cycle = _find_cycle(indegree, predecessors)
        shown = " -> ".join(names[i] for i in cycle[:_MAX_NAMED])
        more = f" (and {len(cycle) - _MAX_NAMED} more)" if len(cycle) > _MAX_NAMED else ""
        raise InvalidModelError(f"the graph has a cycle through nodes {shown}{more}")
    return order


def _find_cycle(indegree: list[int], predecessors: list[list[int]]) -> list[int]:
    """Walk back from an unsorted node through unsorted predecessors until one repeats."""
    node = next(i for i, d in enumerate(indegree) if d > 0)
    position: dict[int, int] = {}
    path: list[int] = []
    while node not in position:
        position[node] = len(path)
        path.append(node)
        node = next(p for p in predecessors[node] if indegree[p] > 0)
    cycle = path[position[node] :]
    cycle.reverse()  # walked against the edges; report in execution direction
    start = cycle.index(min(cycle))  # begin at the node that comes first in the file
    cycle = cycle[start:] + cycle[:start]
    return cycle + [cycle[0]]


def sorted_model(model: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """Return ``(model, False)`` if its nodes are in execution order, else a sorted copy."""
    graph = model.graph
    defined = [i.name for i in graph.input] + [i.name for i in graph.initializer]
    defined += [i.values.name for i in graph.sparse_initializer]
    # A graph input that a node also produces (the light models' weights) is not defined
    # up front: the producing node defines it.
    produced = {o for n in graph.node for o in n.output}
    order = topological_order(graph.node, [d for d in defined if d not in produced])
    if order == list(range(len(order))):
        return model, False
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.node[:]
    copy.graph.node.extend(graph.node[i] for i in order)
    return copy, True
