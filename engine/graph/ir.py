"""The engine's graph IR: nodes in execution order and the tensors between them.

Built from a shape-inferred ``onnx.ModelProto``. Control-flow subgraphs (If, Loop, Scan)
stay inside their node: they are counted and reported in ``Graph.warnings``, and the
tensors they read from the enclosing graph count as the node's implicit inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import onnx

from engine.errors import ProgressFn
from engine.graph.tensors import (
    Dim,
    dtype_bits,
    dtype_name,
    is_floating,
    static_shape,
    tensor_bytes,
    type_spec,
)
from engine.graph.topology import (
    count_subgraph_nodes,
    node_dependencies,
    topological_order,
    unique_node_names,
)

PROGRESS_EVERY = 2000
"""Loops over nodes report progress at least this often."""

_CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})
_SMALL_VALUE = 16  # tensor attributes up to this many elements keep their values
_INT32_BIAS_INPUT = {"QLinearConv": 8}  # quantized ops' int32 biases are weights too


@dataclass
class Tensor:
    """A value in the graph. ``bytes`` is ``None`` when shape or dtype is unknown."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str
    bytes: int | None
    is_param: bool = False
    producer: str | None = None
    consumers: list[str] = field(default_factory=list)
    static_shape: tuple[int, ...] | None = field(init=False, repr=False)
    """The shape as ints when every dimension is known (derived from ``shape``)."""
    elements: int | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.static_shape = static_shape(self.shape)
        self.elements = None if self.static_shape is None else math.prod(self.static_shape)


@dataclass
class Node:
    """An operator. ``inputs`` keeps ``""`` for omitted optional inputs (positions matter)."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any] = field(default_factory=dict)
    implicit_inputs: list[str] = field(default_factory=list)
    subgraph_nodes: int = 0


@dataclass
class Graph:
    """Nodes in topological order, tensors by name, and the graph's interface."""

    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    warnings: list[str] = field(default_factory=list)

    def params(self) -> list[Tensor]:
        """Parameter tensors (weights), each once."""
        return [t for t in self.tensors.values() if t.is_param]


def build_graph(model: onnx.ModelProto, progress: ProgressFn | None = None) -> Graph:
    """Build the IR of a (preferably shape-inferred) model.

    Raises :class:`engine.errors.InvalidModelError` for a cycle or an undefined input.
    """
    graph = model.graph
    produced = {o for n in graph.node for o in n.output if o}
    initializers = {i.name: i for i in graph.initializer}
    inputs = [v.name for v in graph.input if v.name not in produced and v.name not in initializers]
    names = unique_node_names(graph.node)
    order = topological_order(graph.node, list(inputs) + list(initializers), names)

    types: dict[str, onnx.TypeProto] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        types[value.name] = value.type
    tensors: dict[str, Tensor] = {}

    def tensor(name: str) -> Tensor:
        found = tensors.get(name)
        if found is None:
            found = tensors[name] = _make_tensor(name, types.get(name), initializers.get(name))
        return found

    nodes = []
    warnings = []
    for count, index in enumerate(order):
        if progress is not None and count % PROGRESS_EVERY == 0:
            progress(count / max(len(order), 1), f"building graph: {count}/{len(order)} nodes")
        proto = graph.node[index]
        node = _make_node(proto, names[index])
        for name in node.outputs:
            if name:
                out = tensor(name)
                out.producer = node.name
                if (
                    proto.op_type in _CONSTANT_OPS
                    and not proto.domain
                    and out.static_shape is not None
                ):
                    out.is_param = _is_weight_dtype(out.dtype)
        for name in dict.fromkeys(n for n in (*node.inputs, *node.implicit_inputs) if n):
            tensor(name).consumers.append(node.name)
        bias = _INT32_BIAS_INPUT.get(node.op_type)
        if bias is not None and bias < len(node.inputs) and node.inputs[bias] in initializers:
            tensors[node.inputs[bias]].is_param = True
        if node.subgraph_nodes:
            warnings.append(
                f"node '{node.name}' ({node.op_type}) holds control-flow subgraphs with "
                f"{node.subgraph_nodes} nodes; they are not analyzed and not costed"
            )
        nodes.append(node)
    for name in (*inputs, *(o.name for o in graph.output)):
        tensor(name)
    return Graph(nodes, tensors, inputs, [o.name for o in graph.output], warnings)


def _make_tensor(
    name: str, type_proto: onnx.TypeProto | None, initializer: onnx.TensorProto | None
) -> Tensor:
    if initializer is not None:
        shape: tuple[Dim, ...] | None = tuple(initializer.dims)
        dtype = dtype_name(initializer.data_type)
    elif type_proto is not None:
        dims, dtype = type_spec(type_proto)
        shape = None if dims is None else tuple(dims)
    else:
        shape, dtype = None, "?"
    is_param = initializer is not None and _is_weight_dtype(dtype)
    return Tensor(name, shape, dtype, tensor_bytes(static_shape(shape), dtype), is_param)


def _is_weight_dtype(dtype: str) -> bool:
    """Floats and quantized (<= 8-bit) integers are weights; int64 shapes and indices are not."""
    if is_floating(dtype):
        return True
    bits = dtype_bits(dtype)
    return bits is not None and bits <= 8 and dtype != "bool"


def _make_node(proto: onnx.NodeProto, name: str) -> Node:
    explicit = {i for i in proto.input if i}
    implicit = [i for i in node_dependencies(proto) if i not in explicit]
    return Node(
        name=name,
        op_type=proto.op_type,
        domain=proto.domain,
        inputs=list(proto.input),
        outputs=list(proto.output),
        attributes={a.name: _attribute_value(a) for a in proto.attribute},
        implicit_inputs=implicit,
        subgraph_nodes=count_subgraph_nodes(proto),
    )


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    """Plain Python value: numbers, strings, lists; tensors and graphs as small summaries."""
    kind = attr.type
    if kind == onnx.AttributeProto.TENSOR:
        return _tensor_summary(attr.t)
    if kind == onnx.AttributeProto.TENSORS:
        return [_tensor_summary(t) for t in attr.tensors]
    if kind == onnx.AttributeProto.GRAPH:
        return {"graph": attr.g.name, "nodes": len(attr.g.node)}
    if kind == onnx.AttributeProto.GRAPHS:
        return [{"graph": g.name, "nodes": len(g.node)} for g in attr.graphs]
    if kind in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS):
        return "sparse_tensor"
    if kind in (onnx.AttributeProto.TYPE_PROTO, onnx.AttributeProto.TYPE_PROTOS):
        return "type_proto"
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, list):
        return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in value]
    return value


def _tensor_summary(t: onnx.TensorProto) -> dict[str, Any]:
    summary: dict[str, Any] = {"dtype": dtype_name(t.data_type), "shape": list(t.dims)}
    if math.prod(t.dims) <= _SMALL_VALUE:
        summary["value"] = onnx.numpy_helper.to_array(t).tolist()
    return summary
