"""Split a model into TVM-compiled segments and onnxruntime-run segments (delegate style).

Nodes that TVM cannot import run in onnxruntime; everything else is grouped into the
largest segments the dependences allow. Nodes are taken in a topological order that
stays on the current backend for as long as any of its nodes is ready, so independent
supported nodes around a fallback node end up in one TVM segment, not several.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import onnx
from onnx import helper

TVM, ORT = "tvm", "onnxruntime"


@dataclass
class Segment:
    """A run of nodes on one backend, as a standalone ONNX model."""

    index: int
    backend: str
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    model: onnx.ModelProto = field(repr=False)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "backend": self.backend,
            "nodes": len(self.nodes),
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }


def partition(model: onnx.ModelProto, fallback: set[str]) -> list[Segment]:
    """Cut ``model`` (unique node names) into segments; ``fallback`` nodes go to onnxruntime."""
    graph = model.graph
    nodes = {n.name: n for n in graph.node}
    producer = {o: n.name for n in graph.node for o in n.output if o}
    users: dict[str, list[str]] = defaultdict(list)
    missing: dict[str, int] = {}
    for n in graph.node:
        deps = {producer[i] for i in _reads(n) if i in producer}
        missing[n.name] = len(deps)
        for d in deps:
            users[d].append(n.name)
    position = {n.name: i for i, n in enumerate(graph.node)}
    ready = sorted((name for name, k in missing.items() if k == 0), key=position.__getitem__)
    runs: list[tuple[str, list[str]]] = []
    current = None
    while ready:
        same = [n for n in ready if _backend(n, fallback) == current]
        pick = same[0] if same else ready[0]
        ready.remove(pick)
        backend = _backend(pick, fallback)
        if backend != current:
            runs.append((backend, []))
            current = backend
        runs[-1][1].append(pick)
        for user in users[pick]:
            missing[user] -= 1
            if missing[user] == 0:
                ready.append(user)
        ready.sort(key=position.__getitem__)
    return _segments(model, runs, nodes, producer)


def _backend(node: str, fallback: set[str]) -> str:
    return ORT if node in fallback else TVM


def _reads(node: onnx.NodeProto) -> list[str]:
    from engine.graph.topology import node_dependencies

    return node_dependencies(node)


def _segments(model, runs, nodes, producer) -> list[Segment]:
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    types = {v.name: v for v in (*graph.input, *graph.value_info, *graph.output)}
    graph_outputs = [o.name for o in graph.output]
    segment_of = {name: k for k, (_, run) in enumerate(runs) for name in run}
    read_later: dict[int, set[str]] = defaultdict(set)
    for name, node in nodes.items():
        for tensor in _reads(node):
            if tensor in producer and segment_of[producer[tensor]] != segment_of[name]:
                read_later[segment_of[producer[tensor]]].add(tensor)
    segments = []
    for k, (backend, run) in enumerate(runs):
        members = [nodes[name] for name in run]
        made = {o for n in members for o in n.output if o}
        inputs = list(
            dict.fromkeys(
                t for n in members for t in _reads(n) if t not in made and t not in initializers
            )
        )
        outputs = [t for n in members for t in n.output if t in read_later[k]]
        outputs += [t for t in graph_outputs if t in made and t not in outputs]
        used = {t for n in members for t in _reads(n)}
        sub = helper.make_graph(
            members,
            f"segment_{k}",
            [_value(types, t) for t in inputs],
            [_value(types, t) for t in outputs],
            [initializers[t] for t in initializers if t in used],
            value_info=[types[t] for t in made if t in types and t not in outputs],
        )
        sub_model = helper.make_model(
            sub, opset_imports=list(model.opset_import), ir_version=model.ir_version
        )
        sub_model.functions.extend(model.functions)  # local functions its nodes may call
        segments.append(Segment(k, backend, run, inputs, outputs, sub_model))
    return segments


def _value(types: dict, name: str) -> onnx.ValueInfoProto:
    found = types.get(name)
    return found if found is not None else helper.make_empty_tensor_value_info(name)
