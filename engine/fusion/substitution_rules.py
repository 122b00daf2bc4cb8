"""The two operator substitutions of GDPNPU (thesis ch. 5, L1634-L1656), as ONNX rewrites.

A rule looks at one node of a shape-inferred model and, for a split factor ``s`` (a power
of two), returns the nodes and initializers that compute the same output:

- ``reduce-split`` (L1638-L1645): ``ReduceSum/Mean/Max(X)`` over a long axis becomes
  ``Split(X, s)`` along a reduced axis, one element-wise ``Sum/Mean/Max`` across the ``s``
  slices, and the original reduce on ``1/s`` of the data. The thesis splits a
  ``reduce_min``; Mean uses the element-wise ``Mean`` so the result stays exact.
- ``depthwise-spatial`` (L1649-L1656): a depthwise ``Conv`` with few channels becomes
  ``s`` row tiles of the (H-padded) input, each with ``kh - 1`` halo rows loaded twice,
  concatenated along C, one depthwise conv with the weights replicated ``s`` times, and a
  Reshape/Transpose/Reshape back to NCHW (the thesis concatenates the tile outputs; the
  reshape does the same rearrangement in one step). Only stride 1, dilation 1, explicit
  pads: the halo arithmetic of other strides is left out.

Whether a rewrite pays is not decided here: ``substitution`` measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

REDUCE_OPS = {"ReduceSum": "Sum", "ReduceMean": "Mean", "ReduceMax": "Max"}
MAX_DEPTHWISE_CHANNELS = 8  # "images have 1, 3 or 4 channels, which starves the cube unit"
MIN_REDUCED_ELEMENTS = 1024  # a short reduce has nothing to split


@dataclass
class Rewrite:
    """The replacement of one node: new nodes (in order) and new initializers."""

    rule: str
    node: str
    s: int
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)


class Context:
    """What a rule needs to know about the model: shapes, constants, the opset."""

    def __init__(self, model: onnx.ModelProto):
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.shapes: dict[str, tuple[int, ...]] = {}
        graph = model.graph
        for info in [*graph.input, *graph.value_info, *graph.output]:
            dims = info.type.tensor_type.shape.dim
            if info.type.tensor_type.HasField("shape") and all(
                d.HasField("dim_value") for d in dims
            ):
                self.shapes[info.name] = tuple(d.dim_value for d in dims)
        for name, value in self.constants.items():
            self.shapes[name] = tuple(value.shape)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def reduce_axes(node: onnx.NodeProto, ctx: Context) -> list[int] | None:
    """The reduced axes (non-negative), ``None`` when they are not known constants."""
    shape = ctx.shapes.get(node.input[0])
    if shape is None:
        return None
    if len(node.input) > 1 and node.input[1]:
        if node.input[1] not in ctx.constants:
            return None
        axes = [int(a) for a in ctx.constants[node.input[1]].reshape(-1)]
    else:
        axes = list(_attr(node, "axes", []) or [])
    if not axes:
        if _attr(node, "noop_with_empty_axes", 0):
            return None
        axes = list(range(len(shape)))
    return sorted(a % len(shape) for a in axes)


def reduce_split(node: onnx.NodeProto, ctx: Context, s: int) -> Rewrite | None:
    """``reduce(X)`` -> ``Split(X, s)`` along the longest reduced axis, an element-wise
    combine of the slices, and the reduce of the combined slice; ``None`` if it does not
    apply (unknown shape or axes, a short reduce, an axis not divisible by ``s``)."""
    if node.op_type not in REDUCE_OPS:
        return None
    axes = reduce_axes(node, ctx)
    shape = ctx.shapes.get(node.input[0])
    if axes is None or shape is None:
        return None
    if int(np.prod([shape[a] for a in axes])) < MIN_REDUCED_ELEMENTS:
        return None
    axis = max(axes, key=lambda a: shape[a])
    if shape[axis] % s or shape[axis] // s < 1:
        return None
    out = Rewrite("reduce-split", node.name, s)
    name = f"{node.name}/split{s}"
    parts = [f"{name}/part{i}" for i in range(s)]
    sizes = [shape[axis] // s] * s
    if ctx.opset >= 13:
        sizes_name = f"{name}/sizes"
        out.initializers.append(numpy_helper.from_array(np.array(sizes, np.int64), sizes_name))
        out.nodes.append(
            helper.make_node("Split", [node.input[0], sizes_name], parts, name=name, axis=axis)
        )
    else:
        out.nodes.append(
            helper.make_node("Split", [node.input[0]], parts, name=name, axis=axis, split=sizes)
        )
    combined = f"{name}/combined"
    combine = REDUCE_OPS[node.op_type]
    out.nodes.append(helper.make_node(combine, parts, [combined], name=f"{name}/{combine}"))
    final = onnx.NodeProto()
    final.CopyFrom(node)
    final.input[0] = combined
    final.name = f"{name}/{node.op_type}"
    out.nodes.append(final)
    return out


def depthwise_spatial(node: onnx.NodeProto, ctx: Context, s: int) -> Rewrite | None:
    """A depthwise Conv with at most ``MAX_DEPTHWISE_CHANNELS`` channels -> ``s`` row tiles
    with halos, concatenated along C, one conv with replicated weights, rearranged back;
    ``None`` if it does not apply."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in ctx.constants:
        return None
    shape = ctx.shapes.get(node.input[0])
    out_shape = ctx.shapes.get(node.output[0])
    weight = ctx.constants[node.input[1]]
    if shape is None or out_shape is None or len(shape) != 4 or weight.ndim != 4:
        return None
    n, c = shape[:2]
    kh = weight.shape[2]
    if not (_attr(node, "group", 1) == c == weight.shape[0] and weight.shape[1] == 1):
        return None  # depthwise with channel multiplier 1 only
    auto_pad = _attr(node, "auto_pad", b"NOTSET")
    unit_steps = (_attr(node, "strides") or [1, 1]) + (_attr(node, "dilations") or [1, 1])
    if c > MAX_DEPTHWISE_CHANNELS or auto_pad not in (b"NOTSET", b"VALID"):
        return None
    if any(v != 1 for v in unit_steps):
        return None
    top, left, bottom, right = _attr(node, "pads") or [0, 0, 0, 0]
    h_out = out_shape[2]
    if h_out % s or h_out // s < 1:
        return None
    rows = h_out // s
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and bias not in ctx.constants:
        return None
    base = f"{node.name}/tiles{s}"
    out = Rewrite("depthwise-spatial", node.name, s)
    source = node.input[0]
    if top or bottom:
        if ctx.opset < 11:
            return None  # Pad takes its pads as an input from opset 11 on
        pads = f"{base}/pads"
        out.initializers.append(
            numpy_helper.from_array(np.array([0, 0, top, 0, 0, 0, bottom, 0], np.int64), pads)
        )
        out.nodes.append(
            helper.make_node("Pad", [source, pads], [f"{base}/padded"], name=f"{base}/pad")
        )
        source = f"{base}/padded"
    tiles = []
    for i in range(s):
        start = i * rows
        names = [f"{base}/t{i}/{k}" for k in ("starts", "ends", "axes")]
        for nm, value in zip(names, (start, start + rows + kh - 1, 2), strict=True):
            out.initializers.append(numpy_helper.from_array(np.array([value], np.int64), nm))
        tiles.append(f"{base}/t{i}")
        out.nodes.append(helper.make_node("Slice", [source, *names], [tiles[-1]], name=tiles[-1]))
    stacked = f"{base}/stacked"
    out.nodes.append(helper.make_node("Concat", tiles, [stacked], name=stacked, axis=1))
    inputs = [stacked, f"{base}/weight"]
    out.initializers.append(numpy_helper.from_array(np.tile(weight, (s, 1, 1, 1)), inputs[1]))
    if bias is not None:
        inputs.append(f"{base}/bias")
        out.initializers.append(numpy_helper.from_array(np.tile(ctx.constants[bias], s), inputs[2]))
    conv = f"{base}/conv"
    out.nodes.append(
        helper.make_node(
            "Conv",
            inputs,
            [conv],
            name=conv,
            group=s * c,
            pads=[0, left, 0, right],
            kernel_shape=list(weight.shape[2:]),
        )
    )
    # [N, s*C, rows, W'] -> [N, s, C, rows, W'] -> [N, C, s, rows, W'] -> [N, C, H', W']
    w_out = out_shape[3]
    split_shape, final_shape = f"{base}/shape5", f"{base}/shape4"
    out.initializers += [
        numpy_helper.from_array(np.array([n, s, c, rows, w_out], np.int64), split_shape),
        numpy_helper.from_array(np.array([n, c, h_out, w_out], np.int64), final_shape),
    ]
    out.nodes += [
        helper.make_node("Reshape", [conv, split_shape], [f"{base}/r5"], name=f"{base}/r5"),
        helper.make_node(
            "Transpose", [f"{base}/r5"], [f"{base}/tr"], name=f"{base}/tr", perm=[0, 2, 1, 3, 4]
        ),
        helper.make_node(
            "Reshape", [f"{base}/tr", final_shape], [node.output[0]], name=f"{base}/r4"
        ),
    ]
    return out


RULES = {"reduce-split": reduce_split, "depthwise-spatial": depthwise_spatial}
"""Rule name -> ``(node, context, s) -> Rewrite | None``."""


def rewrite_node(rule: str, node: onnx.NodeProto, ctx: Context, s: int) -> Rewrite | None:
    """Apply ``rule`` with split factor ``s`` to ``node`` (``None``: it does not apply); the
    last new node writes the node's outputs, so the rest of the graph is unchanged."""
    return RULES[rule](node, ctx, s)


def apply(model: onnx.ModelProto, rewrites: list[Rewrite]) -> onnx.ModelProto:
    """A copy of ``model`` with each rewritten node replaced by its new nodes, in place."""
    by_node = {r.node: r for r in rewrites}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for node in model.graph.node:
        nodes += by_node[node.name].nodes if node.name in by_node else [node]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    for r in rewrites:
        out.graph.initializer.extend(r.initializers)
    return out
