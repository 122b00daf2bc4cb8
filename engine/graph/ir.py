"""The engine's graph IR: nodes in execution order and the tensors between them.

Built from a shape-inferred ``onnx.ModelProto``. Control-flow subgraphs (If, Loop, Scan)
stay inside their node: they are counted and reported in ``Graph.warnings``, and the
tensors they read from the enclosing graph count as the node's implicit inputs.
"""

from __future__ import annotations

import ast
import gc
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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
    execution_order,
    has_subgraphs,
    name_uniquely,
    outer_scope_inputs,
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
    scope: tuple[str, ...] = ()
    """The modules the exporter says the node came from, outermost first (torch's dynamo
    exporter writes them in the node's metadata, see :func:`module_scope`)."""


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


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building large acyclic structures.

    The IR holds no reference cycles (reference counting frees it), yet while it grows
    the collector traverses every node, tensor and list again each time the heap grows
    by a quarter: at 100,000 nodes that was 1.5 s of the 4 s of building the IR and
    detecting its structure. The collector's previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def build_graph(model: onnx.ModelProto, progress: ProgressFn | None = None) -> Graph:
    """Build the IR of a (preferably shape-inferred) model.

    Raises :class:`engine.errors.InvalidModelError` for a cycle or an undefined input.
    """
    with collector_paused():
        return _build_graph(model, progress or _ignore)


def _build_graph(model: onnx.ModelProto, report: ProgressFn) -> Graph:
    graph = model.graph
    protos = graph.node
    total = len(protos)
    # Each proto field read costs a wrapper object: every node is read exactly once.
    read = []
    for i, proto in enumerate(protos):
        if i % PROGRESS_EVERY == 0:
            report(0.5 * i / max(total, 1), f"building graph: reading {i}/{total} nodes")
        read.append(_make_node(proto))
    name_uniquely(read)
    produced = {o for node in read for o in node.outputs if o}
    initializers = {i.name: i for i in graph.initializer}
    inputs = [v.name for v in graph.input if v.name not in produced and v.name not in initializers]
    order = execution_order(
        [_dependencies(node) for node in read],
        [node.outputs for node in read],
        list(inputs) + list(initializers),
        lambda i: (read[i].name, read[i].op_type),
    )
    specs = _TypeSpecs(graph)
    tensors: dict[str, Tensor] = {}

    def tensor(name: str) -> Tensor:
        found = tensors.get(name)
        if found is None:
            initializer = initializers.get(name)
            if initializer is None:
                found = tensors[name] = specs.tensor(name)
            else:
                found = tensors[name] = _initializer_tensor(initializer)
        return found

    nodes = []
    warnings = []
    for count, index in enumerate(order):
        if count % PROGRESS_EVERY == 0:
            report(0.5 + 0.5 * count / max(total, 1), f"building graph: {count}/{total} nodes")
        node = read[index]
        name = node.name
        constant = node.op_type in _CONSTANT_OPS and not node.domain
        for output in node.outputs:
            if output:
                out = tensor(output)
                out.producer = name
                if constant and out.static_shape is not None:
                    out.is_param = _is_weight_dtype(out.dtype)
        for read_name in _distinct_reads(node):
            found = tensors.get(read_name)
            if found is None:
                found = tensor(read_name)
            found.consumers.append(name)
        bias = _INT32_BIAS_INPUT.get(node.op_type)
        if bias is not None and bias < len(node.inputs) and node.inputs[bias] in initializers:
            tensors[node.inputs[bias]].is_param = True
        if node.subgraph_nodes:
            warnings.append(
                f"node '{name}' ({node.op_type}) holds control-flow subgraphs with "
                f"{node.subgraph_nodes} nodes; they are not analyzed and not costed"
            )
        nodes.append(node)
    for name in (*inputs, *(o.name for o in graph.output)):
        tensor(name)
    return Graph(nodes, tensors, inputs, [o.name for o in graph.output], warnings)


class _TypeSpecs:
    """Tensors from the graph's declared types, each distinct type proto read once.

    Most tensors of a large graph share a handful of types; reading a type's dims in
    Python costs a wrapper object per dimension, its serialized bytes one call.
    """

    def __init__(self, graph: onnx.GraphProto):
        self.types = {v.name: v.type for v in (*graph.input, *graph.value_info, *graph.output)}
        self.templates: dict[bytes, Tensor] = {}

    def tensor(self, name: str) -> Tensor:
        type_proto = self.types.get(name)
        if type_proto is None:
            return Tensor(name, None, "?", None)
        key = type_proto.SerializeToString()
        template = self.templates.get(key)
        if template is None:
            dims, dtype = type_spec(type_proto)
            shape = None if dims is None else tuple(dims)
            size = tensor_bytes(static_shape(shape), dtype)
            template = self.templates[key] = Tensor("", shape, dtype, size)
        return _like(template, name)


def _like(template: Tensor, name: str) -> Tensor:
    """A fresh tensor named ``name`` of ``template``'s type and size.

    Three times cheaper than ``Tensor(...)``, which derives ``static_shape`` and
    ``elements`` again; a test checks that both give equal tensors.
    """
    tensor = object.__new__(Tensor)
    tensor.name = name
    tensor.shape = template.shape
    tensor.dtype = template.dtype
    tensor.bytes = template.bytes
    tensor.is_param = False
    tensor.producer = None
    tensor.consumers = []
    tensor.static_shape = template.static_shape
    tensor.elements = template.elements
    return tensor


def _initializer_tensor(initializer: onnx.TensorProto) -> Tensor:
    shape = tuple(initializer.dims)
    dtype = dtype_name(initializer.data_type)
    size = tensor_bytes(shape, dtype)
    return Tensor(initializer.name, shape, dtype, size, _is_weight_dtype(dtype))


def _is_weight_dtype(dtype: str) -> bool:
    """Floats and quantized (<= 8-bit) integers are weights; int64 shapes and indices are not."""
    if is_floating(dtype):
        return True
    bits = dtype_bits(dtype)
    return bits is not None and bits <= 8 and dtype != "bool"


def _make_node(proto: onnx.NodeProto) -> Node:
    """The node as read, under its given name (made unique afterwards)."""
    inputs = proto.input[:]
    node = Node(proto.name, proto.op_type, proto.domain, inputs, proto.output[:])
    attributes = proto.attribute
    if attributes:
        node.attributes = {a.name: _attribute_value(a) for a in attributes}
        if has_subgraphs(proto):
            explicit = {i for i in inputs if i}
            node.implicit_inputs = sorted(outer_scope_inputs(proto) - explicit)
            node.subgraph_nodes = count_subgraph_nodes(proto)
    if proto.metadata_props:
        node.scope = module_scope(proto.metadata_props)
    return node


SCOPE_KEY = "pkg.torch.onnx.name_scopes"
_MAX_SCOPE_CHARS = 20_000  # a real export's list: a few hundred characters


def module_scope(metadata: Iterable[onnx.StringStringEntryProto]) -> tuple[str, ...]:
    """The module path in torch's ``pkg.torch.onnx.name_scopes`` (a list of dotted
    paths, ``['', 'model', 'model.encoder', 'model.encoder.layer.0', 'linear']``, the last
    one the op itself) as each module's own name: ``('model', 'encoder', 'layer.0')``."""
    raw = next((entry.value for entry in metadata if entry.key == SCOPE_KEY), None)
    if not raw or len(raw) > _MAX_SCOPE_CHARS:  # an upload's text: bounded before parsing
        return ()
    try:
        paths = ast.literal_eval(raw)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return ()
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        return ()
    scope, outer = [], ""
    for path in paths[:-1]:
        if not path:
            continue
        scope.append(path[len(outer) + 1 :] if outer and path.startswith(outer + ".") else path)
        outer = path
    return tuple(scope)


def _dependencies(node: Node) -> list[str]:
    """The tensors a node waits for: as :func:`engine.graph.topology.node_dependencies`."""
    explicit = node.inputs
    if "" in explicit:
        explicit = [name for name in explicit if name]
    return explicit + node.implicit_inputs if node.implicit_inputs else explicit


def _distinct_reads(node: Node) -> Iterable[str]:
    """Each tensor the node reads (explicitly or from a subgraph), once, in order."""
    reads = node.inputs
    if node.implicit_inputs:
        reads = reads + node.implicit_inputs
    elif len(reads) == 1:
        return reads if reads[0] else ()
    return [name for name in dict.fromkeys(reads) if name]


_SCALAR_ATTRIBUTES = {
    onnx.AttributeProto.FLOAT: lambda a: a.f,
    onnx.AttributeProto.INT: lambda a: a.i,
    onnx.AttributeProto.FLOATS: lambda a: list(a.floats),
    onnx.AttributeProto.INTS: lambda a: list(a.ints),
}


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    """Plain Python value: numbers, strings, lists; tensors and graphs as small summaries."""
    kind = attr.type
    scalar = _SCALAR_ATTRIBUTES.get(kind)
    if scalar is not None and not attr.ref_attr_name:
        return scalar(attr)
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


def _ignore(fraction: float, message: str) -> None:
    pass
