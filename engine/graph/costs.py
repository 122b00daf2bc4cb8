"""Per-operator work: MACs, FLOPs, parameters and bytes moved.

One small function per operator family, registered by ``(domain, op_type)`` in
``COST_FUNCTIONS``; the families beyond the basic ones live in sibling modules
(``costs_recurrent``: LSTM/GRU/RNN; ``costs_attention``: Einsum and attention ops;
``costs_quantized``: QLinear* and *Integer ops and (de)quantization), imported at the end.
Conventions (as in DNNTune, thesis ch.3, and the usual profilers): a multiply-accumulate
is 1 MAC = 2 FLOPs; Conv MACs = N*Cout*Hout*Wout*(Cin/group)*kH*kW (any spatial rank);
elementwise ops cost one FLOP per output element; data movement costs bytes, not FLOPs.
Normalization and softmax use fixed per-element counts (see ``_PER_ELEMENT``). An op
without a cost function, or whose shapes are not all known, is not costed: ``None``,
never a guess.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.graph.ir import Graph, Node
from engine.graph.shapes import format_shape

Shape = tuple[int, ...]
Work = tuple[int, int]
"""``(macs, flops)`` computed by a cost function."""


@dataclass(frozen=True)
class OpShapes:
    """Static shapes of one node's tensors; ``None`` marks an omitted optional tensor."""

    inputs: tuple[Shape | None, ...]
    outputs: tuple[Shape | None, ...]
    attributes: Mapping[str, Any]

    def input(self, i: int) -> Shape | None:
        return self.inputs[i] if i < len(self.inputs) else None

    @property
    def out_elements(self) -> int:
        return math.prod(self.outputs[0]) if self.outputs and self.outputs[0] else 0


CostFn = Callable[[OpShapes], Work | None]


@dataclass(frozen=True)
class OpCost:
    """The work of one node. ``params`` counts elements of its parameter inputs."""

    macs: int
    flops: int
    params: int
    bytes_read: int
    bytes_written: int

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity in FLOPs per byte moved, ``None`` if nothing moves."""
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None


COST_FUNCTIONS: dict[tuple[str, str], CostFn] = {}
"""Cost function per ``(domain, op_type)``; the default domain is ``""``."""


def register(*op_types: str, domain: str = "") -> Callable[[CostFn], CostFn]:
    """Register a cost function for ``op_types`` of ``domain`` (default: standard ONNX)."""

    def decorate(fn: CostFn) -> CostFn:
        for op_type in op_types:
            COST_FUNCTIONS[(domain, op_type)] = fn
        return fn

    return decorate


def cost_node(node: Node, graph: Graph) -> OpCost | None:
    """Return the node's :class:`OpCost`, or ``None`` when it cannot be costed exactly
    (:func:`why_not_costed` says why)."""
    result = _cost(node, graph)
    return result if isinstance(result, OpCost) else None


def why_not_costed(node: Node, graph: Graph) -> str | None:
    """Why :func:`cost_node` returns ``None`` for this node (naming the tensor whose size
    is unknown, or the op without a cost function); ``None`` when it is costed."""
    result = _cost(node, graph)
    return None if isinstance(result, OpCost) else result


def _cost(node: Node, graph: Graph) -> OpCost | str:
    """The node's cost, or the reason it has none. A size that is unknown never counts
    as zero: it leaves the whole node uncosted."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    fn = COST_FUNCTIONS.get((domain, node.op_type))
    if fn is None:
        where = f" of domain '{domain}'" if domain else ""
        return f"no cost function for {node.op_type}{where}"
    tensors = graph.tensors
    inputs = []
    params = bytes_read = 0
    for i, name in enumerate(node.inputs):
        if not name:
            inputs.append(None)
            continue
        tensor = tensors[name]
        shape = tensor.static_shape
        if shape is None:
            return f"the shape of input '{name}' is unknown ({_shape_text(tensor.shape)})"
        inputs.append(shape)
        if tensor.bytes is None:
            return f"the size of input '{name}' is unknown (element type {tensor.dtype})"
        if node.inputs.index(name) == i:  # a tensor read twice is read once
            bytes_read += tensor.bytes
            if tensor.is_param:
                params += tensor.elements
    outputs = []
    bytes_written = 0
    for name in node.outputs:
        if not name:
            outputs.append(None)
            continue
        tensor = tensors[name]
        shape = tensor.static_shape
        if shape is None:
            # An optional output nobody reads (Dropout's mask) may stay uninferred.
            if tensor.consumers or name in graph.outputs:
                return f"the shape of output '{name}' is unknown ({_shape_text(tensor.shape)})"
        elif tensor.bytes is None:
            return f"the size of output '{name}' is unknown (element type {tensor.dtype})"
        else:
            bytes_written += tensor.bytes
        outputs.append(shape)
    work = fn(OpShapes(tuple(inputs), tuple(outputs), node.attributes))
    if work is None:
        return f"the {node.op_type} cost function does not apply to these shapes or attributes"
    return OpCost(work[0], work[1], params, bytes_read, bytes_written)


def _shape_text(shape: tuple | None) -> str:
    return "rank unknown" if shape is None else format_shape(shape)


def _with_bias(macs: int, bias: Shape | None, out_elements: int) -> Work:
    return macs, 2 * macs + (out_elements if bias is not None else 0)


def conv_macs(s: OpShapes, weight_index: int = 1) -> int | None:
    """Output elements times one output's receptive field: (Cin/group)*k..."""
    weight = s.input(weight_index)
    if weight is None or not s.outputs[0]:
        return None
    return s.out_elements * math.prod(weight[1:])


@register("Conv")
def _conv(s: OpShapes) -> Work | None:
    macs = conv_macs(s)
    return None if macs is None else _with_bias(macs, s.input(2), s.out_elements)


@register("ConvTranspose")
def _conv_transpose(s: OpShapes) -> Work | None:
    x, weight = s.input(0), s.input(1)
    if x is None or weight is None:
        return None
    # Every input element scatters into (Cout/group)*k... outputs.
    macs = math.prod(x) * math.prod(weight[1:])
    return _with_bias(macs, s.input(2), s.out_elements)


@register("Gemm")
def _gemm(s: OpShapes) -> Work | None:
    a = s.input(0)
    if a is None or len(a) != 2 or not s.outputs[0]:
        return None
    k = a[0] if s.attributes.get("transA", 0) else a[1]
    macs = s.out_elements * k
    return _with_bias(macs, s.input(2), s.out_elements)


@register("MatMul")
def _matmul(s: OpShapes) -> Work | None:
    a = s.input(0)
    if not a or s.outputs[0] is None:
        return None
    # Broadcast batch dims and M, N all appear in the output; K is A's last dim.
    macs = s.out_elements * a[-1]
    return macs, 2 * macs


@register(
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Ceil", "Celu", "Clip", "Cos",
    "Cosh", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "IsInf", "IsNaN",
    "LeakyRelu", "Log", "Mish", "Neg", "Not", "PRelu", "Reciprocal", "Relu", "Round", "Selu",
    "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh",
    "ThresholdedRelu", "Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "BitwiseNot", "Div", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Mod",
    "Mul", "Or", "Pow", "Sub", "Where", "Xor",
)  # fmt: skip
def _elementwise(s: OpShapes) -> Work:
    return 0, s.out_elements


@register("Sum", "Max", "Min", "Mean")
def _variadic(s: OpShapes) -> Work:
    present = sum(1 for shape in s.inputs if shape is not None)
    return 0, max(present - 1, 1) * s.out_elements


@register("MaxPool", "AveragePool", "LpPool")
def _pool(s: OpShapes) -> Work:
    kernel = s.attributes.get("kernel_shape") or []
    return 0, s.out_elements * math.prod(kernel)


@register(
    "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ReduceMean", "ReduceSum", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "ArgMax", "ArgMin",
)  # fmt: skip
def _reduce(s: OpShapes) -> Work | None:
    x = s.input(0)
    return None if x is None else (0, math.prod(x))


_PER_ELEMENT = {
    "BatchNormalization": 4,  # (x - mean) / sqrt(var + eps) * scale + bias, folded per channel
    "InstanceNormalization": 8,  # mean, variance, then normalize and scale
    "LayerNormalization": 8,
    "GroupNormalization": 8,
    "MeanVarianceNormalization": 8,
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "LogSoftmax": 5,
    "Hardmax": 2,
}


def _per_element(count: int) -> CostFn:
    def cost(s: OpShapes) -> Work:
        return 0, count * s.out_elements

    return cost


for _op, _count in _PER_ELEMENT.items():
    register(_op)(_per_element(_count))


@register("LRN")
def _lrn(s: OpShapes) -> Work:
    size = int(s.attributes.get("size", 1))
    # Square-and-add over the window, then scale, power and divide.
    return 0, s.out_elements * (2 * size + 3)


@register(
    "Cast", "CastLike", "Compress", "Concat", "Constant", "ConstantOfShape", "DepthToSpace",
    "Dropout", "Expand", "EyeLike", "Flatten", "Gather", "GatherElements", "GatherND",
    "Identity", "Pad", "Range", "Reshape", "ReverseSequence", "Scatter",
    "ScatterElements", "ScatterND", "Shape", "Size", "Slice", "SpaceToDepth", "Split",
    "Squeeze", "Tile", "Transpose", "Trilu", "Unsqueeze",
)  # fmt: skip
def _data_movement(s: OpShapes) -> Work:
    return 0, 0


@register("Resize", "Upsample")
def _resize(s: OpShapes) -> Work | None:
    """Nearest: a copy. (Bi/tri)linear: 2^d weighted taps per output over d resized
    axes (2^d multiplies, 2^d - 1 adds); cubic: 4^d taps."""
    x, y = s.input(0), s.outputs[0]
    if x is None or y is None or len(x) != len(y):
        return None
    resized = sum(1 for a, b in zip(x, y, strict=True) if a != b)
    taps = {"linear": 2, "cubic": 4}.get(str(s.attributes.get("mode", "nearest")), 0)
    if not taps or not resized:
        return 0, 0
    return 0, s.out_elements * (2 * taps**resized - 1)


# The other families register themselves on import.
from engine.graph import costs_attention, costs_quantized, costs_recurrent  # noqa: E402, F401
