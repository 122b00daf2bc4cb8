"""The graph as GraphTurbo sees it: activation nodes, their tensors, weights and stages.

Nodes that compute only from weights and constants (folded shape arithmetic, the light
models' ConstantOfShape fills) are not scheduled: their outputs count as weights of
their consumers, loaded like any other weight. A tensor of unknown size is refused with
the node and the reason, never counted as zero bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph.costs import cost_node
from engine.graph.ir import Graph, Node
from engine.graph.structure import detect_structure
from engine.graph.tensors import is_floating
from engine.partition.problem import PartitionError


class UnknownSize(PartitionError):
    """A tensor or a node's work the planner needs has no known size."""

    code = "unknown_size"


@dataclass(frozen=True)
class DsaGraph:
    """Activation nodes in execution order (indices), with what the planner reads of them.

    ``reads[i]`` / ``writes[i]`` are activation tensor names; ``weight_bytes[i]`` the bytes
    of node ``i``'s weights (constant-only producers folded in); ``stage[i]`` and
    ``layer[i]`` its stage and chain (GraphTurbo's layer, one learned op at most) from
    :func:`engine.graph.structure.detect_structure`.
    """

    graph: Graph
    names: list[str]
    reads: list[list[str]]
    writes: list[list[str]]
    weight_bytes: list[int]
    flops: list[int]
    stage: list[int]
    layer: list[int]
    producer: dict[str, int]
    consumers: dict[str, list[int]]
    tensor_bytes: dict[str, int]
    nodes: list[Node]

    @property
    def n(self) -> int:
        return len(self.names)


def build_view(graph: Graph, float_bits: int | None = None) -> DsaGraph:
    """Index ``graph`` for planning; raises :class:`UnknownSize` on any unknown size.

    ``float_bits``: plan floating-point tensors at this width (the accelerator's compute
    type) instead of the exported one; ``None`` keeps the model's."""
    structure = detect_structure(graph)
    stage_of = {name: s.index for s in structure.stages for name in s.nodes}
    layer_of = {name: c.index for c in structure.chains for name in c.nodes}
    activations = set(graph.inputs)
    kept = []
    for node in graph.nodes:
        if any(t in activations for t in node.inputs if t):
            kept.append(node)
            activations.update(t for t in node.outputs if t)
    sizes: dict[str, int] = {}

    def size(name: str, node_name: str) -> int:
        if name not in sizes:
            tensor = graph.tensors[name]
            b = tensor.bytes
            if b is not None and float_bits and is_floating(tensor.dtype):
                b = -(-tensor.elements * float_bits // 8)
            if b is None:
                raise UnknownSize(
                    f"node {node_name}: tensor '{name}' has an unknown size "
                    f"(shape {graph.tensors[name].shape}); GraphTurbo cannot fit it to a buffer",
                    hint="give the model static input shapes when preparing it",
                )
            sizes[name] = b
        return sizes[name]

    reads, writes, weights, flops, stages, layers = [], [], [], [], [], []
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(kept):
        r = [t for t in dict.fromkeys(node.inputs) if t and t in activations]
        w = [t for t in node.outputs if t]
        for t in r + w:
            size(t, node.name)
        reads.append(r)
        writes.append(w)
        weights.append(
            sum(
                size(t, node.name) for t in dict.fromkeys(node.inputs) if t and t not in activations
            )
        )
        cost = cost_node(node, graph)
        if cost is None:
            raise UnknownSize(f"node {node.name} ({node.op_type}): its work is unknown")
        flops.append(cost.flops)
        stages.append(stage_of.get(node.name, 0))
        layers.append(layer_of.get(node.name, -1 - i))
        for t in w:
            producer[t] = i
        for t in r:
            consumers.setdefault(t, []).append(i)
    return DsaGraph(
        graph, [n.name for n in kept], reads, writes, weights, flops, stages, layers, producer,
        consumers, sizes, kept,
    )  # fmt: skip
