"""Node identity and execution order of an ONNX graph.

Nodes get unique names (unnamed ones become ``<op_type>_<index>``), tensors read by
control-flow subgraphs from the enclosing graph count as dependencies, and the order is
Kahn's algorithm with a heap keyed on file position, so a graph that is already sorted
keeps its order exactly.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import onnx

from engine.errors import InvalidModelError

_MAX_NAMED = 8
_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class Named(Protocol):
    """What naming needs of a node: an ``onnx.NodeProto`` or an IR node."""

    name: str
    op_type: str


def unique_node_names(nodes: Sequence[Named]) -> list[str]:
    """Return one unique name per node, keeping given names where they are unique."""
    given = [n.name for n in nodes]
    taken = set(given)
    if len(taken) == len(given) and "" not in taken:
        return given  # the usual case: every node named, no name twice
    taken.discard("")
    seen: set[str] = set()
    names = []
    for i, name in enumerate(given):
        unnamed = not name
        if unnamed:
            name = f"{nodes[i].op_type}_{i}"
        if name in seen or (unnamed and name in taken):
            base, k = name, 1
            while f"{base}_{k}" in taken or f"{base}_{k}" in seen:
                k += 1
            name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names


def name_uniquely(nodes: Sequence[Named]) -> None:
    """Give ``nodes`` (protos or read nodes) the names :func:`unique_node_names` returns,
    in place: the names the analyze stage shows and every later stage keys on."""
    for node, name in zip(nodes, unique_node_names(nodes), strict=True):
        node.name = name


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


def has_subgraphs(node: onnx.NodeProto) -> bool:
    """True when a node holds control-flow subgraphs (If, Loop, Scan)."""
    attributes = node.attribute
    return bool(attributes) and any(a.type in _GRAPH_TYPES for a in attributes)


def node_dependencies(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs (optional ones omitted) followed by implicit subgraph inputs."""
    explicit = node.input[:]
    if "" in explicit:
        explicit = [name for name in explicit if name]
    if not has_subgraphs(node):
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
    return _proto_order(nodes, [node.output[:] for node in nodes], defined, names)


def _proto_order(
    nodes: Sequence[onnx.NodeProto],
    outputs: Sequence[Sequence[str]],
    defined: Iterable[str],
    names: Sequence[str] | None,
) -> list[int]:
    def describe(i: int) -> tuple[str, str]:
        nonlocal names
        if names is None:  # only an error needs the names
            names = unique_node_names(nodes)
        return names[i], nodes[i].op_type

    dependencies = [node_dependencies(node) for node in nodes]
    return execution_order(dependencies, outputs, defined, describe)


def execution_order(
    dependencies: Sequence[Sequence[str]],
    outputs: Sequence[Sequence[str]],
    defined: Iterable[str],
    describe: Callable[[int], tuple[str, str]],
) -> list[int]:
    """:func:`topological_order` on plain lists: each node's dependencies and outputs.

    ``describe(i)`` gives node ``i``'s unique name and op type for error messages. A
    graph already in execution order is recognized in one pass and kept as it is.
    """
    available = set(defined)
    if _in_order(dependencies, outputs, available):
        return list(range(len(dependencies)))

    producer: dict[str, int] = {}
    for i, outs in enumerate(outputs):
        for out in outs:
            if not out:
                continue
            if out in producer:
                other = describe(producer[out])[0]
                raise InvalidModelError(
                    f"tensor '{out}' is produced by two nodes: '{other}' and '{describe(i)[0]}'"
                )
            producer[out] = i
    for i, names in enumerate(dependencies):
        for name in names:
            if name not in producer and name not in available:
                node, op_type = describe(i)
                raise InvalidModelError(
                    f"node '{node}' ({op_type}) reads tensor '{name}', which no node "
                    "produces and which is neither a graph input nor an initializer"
                )

    successors: list[list[int]] = [[] for _ in dependencies]
    predecessors: list[list[int]] = [[] for _ in dependencies]
    for i, names in enumerate(dependencies):
        for name in names:
            p = producer.get(name)
            if p is not None:
                successors[p].append(i)
                predecessors[i].append(p)
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
    if len(order) < len(dependencies):
        cycle = _find_cycle(indegree, predecessors)
        shown = " -> ".join(describe(i)[0] for i in cycle[:_MAX_NAMED])
        more = f" (and {len(cycle) - _MAX_NAMED} more)" if len(cycle) > _MAX_NAMED else ""
        raise InvalidModelError(f"the graph has a cycle through nodes {shown}{more}")
    return order


def _in_order(
    dependencies: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]], defined: set[str]
) -> bool:
    """True when each node reads only tensors defined up front or produced by an earlier
    node, and no tensor is produced twice or both produced and defined up front: then
    Kahn's algorithm would keep the file order, and it needs no edges."""
    produced: set[str] = set()
    for names, outs in zip(dependencies, outputs, strict=True):
        for name in names:
            if name not in produced and name not in defined:
                return False
        for out in outs:
            if out:
                if out in produced:
                    return False
                produced.add(out)
    return defined.isdisjoint(produced)


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
    nodes = graph.node
    outputs = [node.output[:] for node in nodes]
    defined = [i.name for i in graph.input] + [i.name for i in graph.initializer]
    defined += [i.values.name for i in graph.sparse_initializer]
    # A graph input that a node also produces (the light models' weights) is not defined
    # up front: the producing node defines it.
    produced = {o for outs in outputs for o in outs}
    order = _proto_order(nodes, outputs, [d for d in defined if d not in produced], None)
    if order == list(range(len(order))):
        return model, False
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.node[:]
    copy.graph.node.extend(graph.node[i] for i in order)
    return copy, True
