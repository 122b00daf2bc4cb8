"""The graph transform F of NN-Stretch (MobiSys '23, Eq. 1): copy a segment once per
processor, scale each copy in depth and width, restore the channel count with a 1x1 conv
per branch and concatenate the branches at the meeting point.

- **Depth** ``r_d``: a stage keeps ``max(first + fixed blocks, ceil(r_d x depth))`` of its
  blocks; the blocks dropped are its last shape-keeping ones (a shape-keeping block's output
  is then its input: a residual block becomes its skip connection).
- **Width** ``r_w``: every channel count ``c`` inside the branch becomes
  ``min(c, ceil(r_w x c / 8) x 8)`` (multiples of 8, as mobile kernels vectorise; ``c`` under
  16 rounds to 1), so the realised ratio is at least ``r_w``. A conv's output channels
  scale, a depthwise conv follows its input, normalisations, activations, pools and channel
  gates (squeeze-and-excitation) follow their inputs, a concat sums them. The branch reads
  the segment's input unscaled.
- **Restore**: a 1x1 conv maps the branch's last width to its share of the segment's output
  channels (shares in proportion to the processors' throughput, NN-Stretch Eq. 6), and a
  Concat on the home processor joins the shares: the next segment sees the original
  channel count.

A branch is a list of :class:`NodeSpec` with the tensors and weights it needs. The same
description gives the graph IR the cost model prices (:meth:`Branched.to_ir`) and the ONNX
model that is exported (:mod:`.export`). Weights are not trained here: see
:mod:`.export` for how they are initialised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from engine.graph.ir import Graph, Node, Tensor
from engine.graph.tensors import is_floating, tensor_bytes
from engine.partition.nnstretch.structure import Stage, StretchStructure
from engine.partition.problem import PartitionError

CHANNEL_STEP = 8
_FOLLOW = frozenset(
    {
        "BatchNormalization", "InstanceNormalization", "Relu", "Clip", "Sigmoid", "HardSigmoid",
        "HardSwish", "Tanh", "LeakyRelu", "Elu", "Selu", "Gelu", "Softplus", "Mish", "Erf",
        "Identity", "Dropout", "LRN", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
        "LpPool", "Pad", "Resize", "Upsample", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal",
        "Cast",
    }
)  # fmt: skip
_NORMALISATIONS = frozenset({"BatchNormalization", "InstanceNormalization"})
_BINARY = frozenset({"Add", "Sum", "Mul", "Sub", "Div", "Max", "Min", "Mean", "PRelu", "Pow"})


class WidthUnsupported(PartitionError):
    """A node whose channels cannot be scaled (the segment keeps its width)."""

    code = "width_unsupported"


def scaled_channels(c: int, ratio: float) -> int:
    """``c`` scaled by ``ratio`` (module docstring); ``c`` itself at ratio 1."""
    if ratio >= 1:
        return c
    step = CHANNEL_STEP if c >= 2 * CHANNEL_STEP else 1
    return min(c, max(1, math.ceil(ratio * c / step - 1e-9) * step))


def kept_blocks(stage: Stage, depth_ratio: float) -> tuple[int, ...]:
    """Indices of the blocks a stage keeps at ``depth_ratio`` (module docstring)."""
    fixed = stage.depth - len(stage.removable)
    keep = max(fixed, math.ceil(depth_ratio * stage.depth - 1e-9))
    drop = set(stage.removable[::-1][: stage.depth - keep])
    return tuple(k for k in range(stage.depth) if k not in drop)


@dataclass
class WeightSpec:
    """A weight of the branched model: a slice of an original weight (``source``, the
    leading ``shape``), the original itself (``copy``), or a new one (``he_normal``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    source: str | None
    init: str
    is_param: bool = True


@dataclass
class NodeSpec:
    """One node of the branched model and where it runs."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attributes: dict[str, Any]
    role: str  # head | branch | restore | meet | tail
    unit: str | None = None
    segment: int | None = None
    branch: int | None = None
    source: str | None = None  # the original node this one copies
    overrides: dict[str, Any] = field(default_factory=dict)  # attributes changed on the copy

    @property
    def meeting_point(self) -> bool:
        return self.role == "meet"


@dataclass
class Branched:
    """Nodes in execution order, activation shapes, weights, interface."""

    nodes: list[NodeSpec] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    weights: dict[str, WeightSpec] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def to_ir(self) -> Graph:
        """The engine's graph IR of these nodes (shapes known, nothing inferred)."""
        tensors: dict[str, Tensor] = {}
        for name, shape in self.shapes.items():
            dtype = self.dtypes.get(name, "float32")
            tensors[name] = Tensor(name, shape, dtype, tensor_bytes(shape, dtype))
        for w in self.weights.values():
            tensors[w.name] = Tensor(
                w.name, w.shape, w.dtype, tensor_bytes(w.shape, w.dtype), w.is_param
            )
        nodes = []
        for spec in self.nodes:
            node = Node(
                spec.name, spec.op_type, spec.domain, list(spec.inputs), list(spec.outputs),
                dict(spec.attributes) | dict(spec.overrides),
            )  # fmt: skip
            for t in spec.outputs:
                if t:
                    tensors[t].producer = spec.name
            for t in dict.fromkeys(spec.inputs):
                if t:
                    tensors[t].consumers.append(spec.name)
            nodes.append(node)
        return Graph(nodes, tensors, list(self.inputs), list(self.outputs))


@dataclass(frozen=True)
class BranchBody:
    """One branch of one segment: its nodes, the width it ends at, what it kept."""

    nodes: list[NodeSpec]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, str]
    weights: dict[str, WeightSpec]
    output: str
    out_channels: int
    kept: tuple[tuple[int, ...], ...]  # per stage of the segment


class _Original:
    """What the transform reads of the original graph: nodes by name, weights."""

    def __init__(self, graph: Graph, structure: StretchStructure):
        self.graph = graph
        self.nodes = {n.name: n for n in graph.nodes}
        self.constants = structure.constants
        self.activations = set(graph.inputs) | {
            o for n in graph.nodes if n.name not in self.constants for o in n.outputs if o
        }

    def is_weight(self, t: str) -> bool:
        return bool(t) and t not in self.activations


def build_body(
    original: _Original,
    stages: list[Stage],
    depth_ratio: float,
    width_ratio: float,
    input_name: str,
    input_channels: int,
    tag: str,
) -> BranchBody:
    """Copy ``stages`` (one segment) scaled by ``depth_ratio`` and ``width_ratio``, reading
    ``input_name`` of ``input_channels`` channels; names get the suffix ``tag``.

    Raises :class:`WidthUnsupported` when a node's channels cannot follow ``width_ratio``."""
    graph = original.graph
    rename = {stages[0].input: input_name}
    channels = {input_name: input_channels}
    nodes: list[NodeSpec] = []
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, str] = {}
    weights: dict[str, WeightSpec] = {}
    kept_all = []
    for stage in stages:
        kept = kept_blocks(stage, depth_ratio)
        kept_all.append(kept)
        for k, block in enumerate(stage.blocks):
            if k not in kept:
                rename[block.output] = rename[block.input]
                continue
            for name in block.nodes:
                node = original.nodes[name]
                spec, out_channels, new_weights = _scale_node(
                    original, node, rename, channels, width_ratio, tag
                )
                spec.name = f"{node.name}{tag}"
                spec.outputs = [f"{t}{tag}" if t else t for t in node.outputs]
                for t, c in zip(node.outputs, out_channels, strict=True):
                    if not t:
                        continue
                    new = f"{t}{tag}"
                    rename[t] = new
                    shape = list(graph.tensors[t].static_shape)
                    if c is not None:
                        shape[1] = c
                        channels[new] = c
                    shapes[new] = tuple(shape)
                    dtypes[new] = graph.tensors[t].dtype
                nodes.append(spec)
                weights.update(new_weights)
    last = rename[stages[-1].output]
    return BranchBody(nodes, shapes, dtypes, weights, last, channels[last], tuple(kept_all))


def _scale_node(original: _Original, node: Node, rename, channels, ratio: float, tag: str):
    """The copy of ``node`` in a branch: its spec, each output's channel count (``None``
    when the output has no channel axis) and its new weights."""
    graph = original.graph
    inputs = []
    weights: dict[str, WeightSpec] = {}
    overrides: dict[str, Any] = {}
    acts = [t for t in node.inputs if t and not original.is_weight(t)]
    for t in acts:
        if t not in rename:
            raise PartitionError(f"node {node.name} reads {t}, which the branch does not make")
    in_ch = [channels.get(rename[t]) for t in acts]
    op = node.op_type
    outs = [graph.tensors[t].static_shape if t else None for t in node.outputs]
    out_orig = outs[0][1] if outs and outs[0] is not None and len(outs[0]) >= 2 else None

    def weight(t: str, shape: tuple[int, ...]) -> str:
        source = graph.tensors[t]
        new = f"{t}{tag}"
        same = tuple(shape) == source.static_shape
        weights[new] = WeightSpec(
            new, tuple(shape), source.dtype, t, "copy" if same else "slice", source.is_param
        )
        return new

    if op == "Conv" or op == "ConvTranspose":
        x, w = node.inputs[0], node.inputs[1]
        wshape = graph.tensors[w].static_shape
        group = int(node.attributes.get("group", 1))
        cin_orig = graph.tensors[x].static_shape[1]
        cin = in_ch[0]
        if op == "ConvTranspose":
            if cin != cin_orig or ratio < 1:
                raise WidthUnsupported(f"{node.name}: ConvTranspose is not width-scaled")
            out_c = out_orig
            new_w = wshape
        elif group == 1:
            out_c = scaled_channels(wshape[0], ratio)
            new_w = (out_c, cin, *wshape[2:])
        elif group == cin_orig and wshape[1] == 1:  # depthwise, multiplier wshape[0] // group
            out_c = cin * (wshape[0] // group)
            new_w = (out_c, 1, *wshape[2:])
            overrides["group"] = cin
        else:
            out_c = math.ceil(scaled_channels(wshape[0], ratio) / group) * group
            if cin % group or out_c > wshape[0]:
                raise WidthUnsupported(
                    f"{node.name}: grouped conv ({group} groups) cannot take {cin} channels"
                )
            new_w = (out_c, cin // group, *wshape[2:])
        inputs = [rename[x], weight(w, new_w)]
        if len(node.inputs) > 2 and node.inputs[2]:
            inputs.append(weight(node.inputs[2], (out_c,)))
        return _spec(node, inputs, overrides), [out_c], weights

    if op in _FOLLOW or op in _BINARY or op == "Concat":
        if op == "Concat":
            if int(node.attributes.get("axis", 0)) not in (1, -3) or None in in_ch:
                raise WidthUnsupported(f"{node.name}: Concat not along channels")
            out_c = sum(in_ch)
        else:
            carrying = [
                c
                for t, c in zip(acts, in_ch, strict=True)
                if c is not None and graph.tensors[t].static_shape[1] == out_orig
            ]
            if len(set(carrying)) > 1:
                raise WidthUnsupported(
                    f"{node.name}: its inputs have different widths {sorted(set(carrying))} "
                    "(a residual around the segment's unscaled input)"
                )
            out_c = carrying[0] if carrying else out_orig
        for t in node.inputs:
            if not t:
                inputs.append(t)
            elif not original.is_weight(t):
                inputs.append(rename[t])
            else:
                inputs.append(_channel_weight(graph, node, t, out_orig, out_c, weight))
        return _spec(node, inputs, overrides), [out_c] + [None] * (len(outs) - 1), weights

    if ratio < 1 or any(c is not None and c != graph.tensors[t].static_shape[1]
                        for t, c in zip(acts, in_ch, strict=True)):  # fmt: skip
        raise WidthUnsupported(f"{node.name}: {op} is not width-scaled")
    for t in node.inputs:
        if not t:
            inputs.append(t)
        elif original.is_weight(t):
            inputs.append(weight(t, graph.tensors[t].static_shape))
        else:
            inputs.append(rename[t])
    kept = [s[1] if s is not None and len(s) >= 2 else None for s in outs]
    return _spec(node, inputs, overrides), kept, weights


def _channel_weight(graph: Graph, node: Node, t: str, out_orig, out_c, weight) -> str:
    """A per-channel weight (a normalisation's, a channel gate's) cut to ``out_c``; a
    scalar or one broadcast along other axes is copied."""
    shape = graph.tensors[t].static_shape
    if shape is None:
        raise WidthUnsupported(f"weight {t} has no static shape")
    shape = list(shape)
    per_channel = node.op_type in _NORMALISATIONS
    if per_channel and len(shape) == 1 and shape[0] == out_orig and out_orig != 1:
        shape[0] = out_c
    elif len(shape) >= 3 and shape[-3] == out_orig and out_orig != 1:
        shape[-3] = out_c
    return weight(t, tuple(shape))


def _spec(node: Node, inputs: list[str], overrides: dict) -> NodeSpec:
    return NodeSpec(
        name="",
        op_type=node.op_type,
        domain=node.domain,
        inputs=inputs,
        outputs=list(node.outputs),
        attributes=dict(node.attributes),
        role="branch",
        source=node.name,
        overrides=overrides,
    )


def restore_conv(
    name: str, x: str, in_c: int, out_c: int, spatial: tuple[int, ...], dtype: str
) -> tuple[NodeSpec, WeightSpec, tuple[int, ...]]:
    """The 1x1 conv that maps a branch's ``in_c`` channels to its ``out_c`` share."""
    w = WeightSpec(f"{name}_w", (out_c, in_c, 1, 1), dtype, None, "he_normal")
    spec = NodeSpec(
        name=name,
        op_type="Conv",
        domain="",
        inputs=[x, w.name],
        outputs=[f"{name}_out"],
        attributes={"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0]},
        role="restore",
    )
    return spec, w, (1, out_c, *spatial)


def split_channels(total: int, shares: list[float]) -> list[int]:
    """``total`` channels split in proportion to ``shares`` (each at least 1, summing to
    ``total``), by largest remainder."""
    n = len(shares)
    if total < n:
        raise PartitionError(f"{total} channels cannot be split into {n} branches")
    weight = sum(shares)
    raw = [total * s / weight for s in shares]
    counts = [max(1, math.floor(r)) for r in raw]
    while sum(counts) > total:
        k = max(range(n), key=lambda i: (counts[i] - raw[i], counts[i]))
        counts[k] -= 1
    order = sorted(range(n), key=lambda i: raw[i] - counts[i], reverse=True)
    k = 0
    while sum(counts) < total:
        counts[order[k % n]] += 1
        k += 1
    return counts


def is_float(dtype: str) -> bool:
    return is_floating(dtype)
