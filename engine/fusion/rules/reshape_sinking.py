"""The fusion rule ``sink-reshape`` (epilogues into GEMM): a GEMM written as Reshape -> Gemm -> Reshape
(BERT's FFN) ends its kernel at the trailing Reshape, so the GELU or residual Add after
it runs as a kernel of its own, reading and writing the whole activation once more.
Elementwise ops commute with a reshape: they move before it (scalar constants as they
are, same-shaped operands through a reshape of their own, a view), FuseOps puts them into
the GEMM's epilogue, and the reshape moves after them, where it is a view again.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.fusion.rules.graph_edits import Rewrite, clone_node, copy_model, replace_nodes
from engine.graph.shapes import infer_value_shapes

_SINKABLE = frozenset(
    {
        "Abs", "Add", "Ceil", "Clip", "Cos", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu",
        "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Max", "Min", "Mul", "Neg", "Pow",
        "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus",
        "Softsign", "Sqrt", "Sub", "Tanh",
    }
)  # fmt: skip
"""Elementwise ops whose result does not depend on the layout of their operands."""


def sink_reshape(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Move elementwise ops that follow a Reshape to before it (see the module doc)."""
    out = copy_model(model)
    shapes = _static_shapes(out)
    weights = {t.name: t for t in out.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in out.graph.node:
        for name in node.input:
            consumers[name].append(node)
    claimed: set[str] = set()
    plans = []
    for node in out.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        source, view = node.input[0], node.output[0]
        if shapes.get(source) is None or shapes.get(view) is None or source in weights:
            continue
        members = _sinkable_chain(out, view, shapes, weights, claimed)
        if members:
            claimed.update(m.name for m in members)
            plans.append((node, members))
    if not plans:
        return model, []
    outputs = {o.name for o in out.graph.output}
    before: dict[str, list[onnx.NodeProto]] = defaultdict(list)  # node -> nodes placed before
    after: dict[str, list[onnx.NodeProto]] = defaultdict(list)  # node -> nodes placed after
    renamed: dict[str, dict[str, str]] = {}  # member -> {old input: new input}
    new_outputs: dict[str, str] = {}
    rewrites = []
    for reshape, members in plans:
        source, view = reshape.input[0], reshape.output[0]
        inside = {m.name for m in members}
        produced = {o for m in members for o in m.output}
        target = _shape_constant(out, f"{reshape.name}__src_shape", shapes[source])
        into = []
        for m in members:
            mapping = {}
            for k, name in enumerate(m.input):
                if name == view:
                    mapping[name] = source
                elif name in produced:
                    mapping[name] = f"{name}__presink"
                elif name not in weights and shapes.get(name) == shapes[view]:
                    moved = f"{name}__sunk_{m.name}_{k}"
                    mapping[name] = moved
                    before[m.name].append(
                        helper.make_node(
                            "Reshape", [name, target], [moved], name=f"{m.name}__reshape_in{k}"
                        )
                    )
                    into.append(f"{m.name}__reshape_in{k}")
            renamed[m.name] = mapping
            for o in m.output:
                new_outputs[o] = f"{o}__presink"
                external = o in outputs or any(c.name not in inside for c in consumers[o])
                if external:
                    name = f"{o}__reshape"
                    after[m.name].append(
                        helper.make_node(
                            "Reshape", [f"{o}__presink", reshape.input[1]], [o], name=name
                        )
                    )
                    into.append(name)
        rewrites.append(
            {
                "rule": "sink-reshape",
                "nodes": [reshape.name, *inside],
                "into": into,
                "origin": {name: [reshape.name] for name in into},
            }
        )
    dead = {
        reshape.name
        for reshape, members in plans
        if reshape.output[0] not in outputs
        and all(c.name in {m.name for m in members} for c in consumers[reshape.output[0]])
    }
    nodes = []
    for node in out.graph.node:
        if node.name in dead:
            continue
        nodes.extend(before.get(node.name, []))
        if node.name in renamed:
            node = clone_node(node)
            mapping = renamed[node.name]
            node.input[:] = [mapping.get(i, i) for i in node.input]
            node.output[:] = [new_outputs.get(o, o) for o in node.output]
        nodes.append(node)
        nodes.extend(after.get(node.name, []))
    replace_nodes(out, nodes)
    del out.graph.value_info[:]  # shapes changed under the moved ops: inferred again
    return out, rewrites


def _sinkable_chain(model, view: str, shapes: dict, weights: dict, claimed: set) -> list:
    """Elementwise nodes that read only ``view``, each other, scalar constants or
    tensors shaped like ``view``, all of ``view``'s shape, in graph order."""
    members: list[onnx.NodeProto] = []
    inside = {view}
    for node in model.graph.node:
        if node.name in claimed or node.op_type not in _SINKABLE:
            continue
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        if not any(i in inside for i in node.input):
            continue
        if shapes.get(node.output[0]) != shapes[view]:
            continue
        ok = True
        for name in node.input:
            if not name or name in inside:
                continue
            weight = weights.get(name)
            if weight is not None and int(np.prod(weight.dims)) == 1:
                continue
            if weight is None and shapes.get(name) == shapes[view]:
                continue
            ok = False
            break
        if ok:
            members.append(node)
            inside.add(node.output[0])
    return members


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...] | None]:
    """Static shapes of every value shape inference knows (None when not static)."""
    inferred = infer_value_shapes(model)
    shapes = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        static = all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)
        shapes[value.name] = tuple(d.dim_value for d in dims) if static else None
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _shape_constant(model: onnx.ModelProto, name: str, shape) -> str:
    if not any(t.name == name for t in model.graph.initializer):
        model.graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), name))
    return name
