"""Split an ONNX model by a placement into sub-models, one or more per unit, plus a manifest.

Walking the nodes in topological order, a node joins the latest sub-model of its unit when
everything it reads comes from that sub-model or earlier ones; otherwise it opens a new
sub-model of its unit. Every tensor then flows from a sub-model to a later one (or stays
inside), so running the sub-models in index order is a valid execution of the model, and
each boundary tensor is an output of the sub-model that makes it and an input of each that
reads it. Constant subgraphs (weights computed from initializers, like the light models'
``ConstantOfShape`` fills) are not placed: they are copied into every sub-model that uses
them, as weights are resident on every unit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import helper

from engine.graph.topology import node_dependencies, sorted_model, unique_node_names
from engine.partition.problem import PartitionError

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class SubModel:
    """One sub-model: the nodes it runs on ``unit`` and its boundary tensors."""

    index: int
    unit: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    model: onnx.ModelProto = field(repr=False, compare=False)

    @property
    def filename(self) -> str:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in self.unit)
        return f"part{self.index:03d}_{safe}.onnx"

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "unit": self.unit,
            "file": self.filename,
            "nodes": list(self.nodes),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }


@dataclass(frozen=True)
class SubModelSet:
    """The sub-models in execution order and the whole model's interface."""

    submodels: tuple[SubModel, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def manifest(self) -> dict:
        """What a runtime needs to chain the sub-models: files, units and tensors."""
        return {
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "submodels": [s.to_dict() for s in self.submodels],
        }

    def save(self, directory: str | Path) -> Path:
        """Write every sub-model and ``manifest.json`` into ``directory``; return the manifest."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for sub in self.submodels:
            onnx.save_model(sub.model, directory / sub.filename)
        path = directory / MANIFEST
        path.write_text(json.dumps(self.manifest(), indent=2))
        return path


def split_model(model: onnx.ModelProto, placement: Mapping[str, str]) -> SubModelSet:
    """Split ``model`` by ``placement`` (node name -> unit, names as in the graph IR).

    Every node that is not part of a constant subgraph must be placed. Raises
    :class:`PartitionError` otherwise, or when a boundary tensor has no inferred type.
    """
    model, _ = sorted_model(model)
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = model.graph
    names = unique_node_names(graph.node)
    initializers = {t.name: t for t in graph.initializer}
    produced = {o: i for i, n in enumerate(graph.node) for o in n.output if o}
    inputs = [v.name for v in graph.input if v.name not in produced and v.name not in initializers]
    outputs = [v.name for v in graph.output]
    constant = _constant_nodes(graph, initializers)

    segment_of: dict[int, int] = {}
    segments: list[tuple[str, list[int]]] = []
    last_of_unit: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        if i in constant:
            continue
        unit = placement.get(names[i])
        if unit is None:
            raise PartitionError(f"node '{names[i]}' has no unit in the placement")
        after = max(
            (
                segment_of[produced[t]]
                for t in node_dependencies(node)
                if t in produced and produced[t] in segment_of
            ),
            default=-1,
        )
        seg = last_of_unit.get(unit, -1)
        if seg < after or seg < 0:
            seg = len(segments)
            segments.append((unit, []))
            last_of_unit[unit] = seg
        segments[seg][1].append(i)
        segment_of[i] = seg

    readers: dict[str, set[int]] = {}
    for i, seg in segment_of.items():
        for t in node_dependencies(graph.node[i]):
            readers.setdefault(t, set()).add(seg)
    types = {
        v.name: v
        for v in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output)
    }
    subs = []
    for seg, (unit, members) in enumerate(segments):
        made = {o for i in members for o in graph.node[i].output if o}
        reads = [t for i in members for t in node_dependencies(graph.node[i])]
        needed = _constants_needed(graph, reads, produced, constant)
        boundary_in = [
            t
            for t in dict.fromkeys(reads)
            if t not in made
            and t not in initializers
            and (t not in produced or produced[t] not in constant)
        ]
        boundary_out = [
            t
            for t in sorted(made, key=lambda t: (produced[t], t))
            if t in outputs or readers.get(t, set()) - {seg}
        ]
        nodes = [graph.node[i] for i in sorted(needed | set(members))]
        weights = {t for n in nodes for t in node_dependencies(n) if t in initializers}
        sub_graph = helper.make_graph(
            nodes,
            f"{graph.name or 'model'}_part{seg}",
            [_value(types, t) for t in boundary_in],
            [_value(types, t) for t in boundary_out],
            [initializers[t] for t in sorted(weights)],
        )
        # Before IR 4 initializers had to be graph inputs too; IR 4 arrived with opset 9,
        # the oldest the light models use, so raising it changes nothing else.
        sub_model = helper.make_model(
            sub_graph,
            opset_imports=list(model.opset_import),
            ir_version=max(model.ir_version, 4),
        )
        sub_model.functions.extend(model.functions)
        subs.append(
            SubModel(
                seg,
                unit,
                tuple(names[i] for i in members),
                tuple(boundary_in),
                tuple(boundary_out),
                sub_model,
            )
        )
    return SubModelSet(tuple(subs), tuple(inputs), tuple(outputs))


def _constant_nodes(graph: onnx.GraphProto, initializers: Mapping) -> set[int]:
    """Indices of nodes computed from initializers only (weights; the graph is sorted)."""
    known = set(initializers)
    constant = set()
    for i, node in enumerate(graph.node):
        reads = node_dependencies(node)
        if all(t in known for t in reads) and not _has_subgraph(node):
            constant.add(i)
            known.update(o for o in node.output if o)
    return constant


def _constants_needed(graph, reads, produced, constant) -> set[int]:
    needed: set[int] = set()
    stack = [produced[t] for t in reads if t in produced and produced[t] in constant]
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            stack += [produced[t] for t in node_dependencies(graph.node[i]) if t in produced]
    return needed


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    )


def _value(types: Mapping[str, onnx.ValueInfoProto], name: str) -> onnx.ValueInfoProto:
    found = types.get(name)
    if found is None or not found.type.HasField("tensor_type"):
        raise PartitionError(
            f"cannot export: tensor '{name}' crosses sub-models but its type is not inferred"
        )
    return found
