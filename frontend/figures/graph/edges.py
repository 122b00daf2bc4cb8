"""The graph of the analysis's node list (in topological order): producer -> consumer
edges by tensor name, and the nodes that only make a constant for one consumer."""

from __future__ import annotations

from collections.abc import Sequence


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
