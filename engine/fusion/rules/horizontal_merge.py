"""The fusion rule ``horizontal`` (Souffle, thesis ch.4 section 2.5, "horizontal transformation of
independent TEs"; spatial reuse, section 2.2): MatMul / Gemm nodes that read the same
activation with constant weights of the same reduction shape (BERT's Q, K, V projections)
become one node over concatenated weights and one Slice per branch. The shared input is read
once instead of n times, and n kernels become one.
Souffle concatenates TEs with predicates; here the weights are concatenated at
compile time, which needs no predicate because the outputs differ in one dimension.

Convs are not merged (``MERGE_CONVS``): a conv model ships in channel blocks where that
measures faster, and TVM slices a blocked tensor's channels back in NCHW, a layout
transform before and after each branch's Slice. Inception's three 1x1 branches merged, in
blocks: 29 layout transforms, 2.53-2.64 ms; not merged: 17, 2.34-2.36 ms (onnxruntime
2.72; 2 threads, an AMD EPYC Zen 4). Merged in NCHW they gained 4% (3.61 -> 3.46 ms), a
layout 1.45x slower than the blocked one there.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.fusion.rules.graph_edits import (
    Rewrite,
    copy_model,
    drop_unused_initializers,
    opset_version,
    replace_nodes,
)

MERGE_CONVS = False
"""Whether Conv siblings are merged too (see the module's docstring: not, as measured)."""


def horizontal(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Merge MatMul/Gemm siblings (and Conv ones with ``MERGE_CONVS``) reading one input
    with constant weights."""
    out = copy_model(model)
    weights = {t.name: t for t in out.graph.initializer}
    groups: dict[tuple, list[onnx.NodeProto]] = defaultdict(list)
    for node in out.graph.node:
        key = _sibling_key(node, weights)
        if key is not None:
            groups[key].append(node)
    position = {n.name: i for i, n in enumerate(out.graph.node)}
    replace: dict[str, list[onnx.NodeProto]] = {}
    drop: set[str] = set()
    rewrites = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        members.sort(key=lambda n: position[n.name])
        merged, new_weights = _merge(key[0], members, weights, opset_version(out))
        out.graph.initializer.extend(new_weights)
        # The merged node sits where the first sibling was, which every sibling follows.
        replace[members[0].name] = merged
        drop.update(n.name for n in members[1:])
        # The merged node computes every member; each slice computes one of them.
        origin = {merged[0].name: [n.name for n in members]}
        origin.update({sl.name: [m.name] for sl, m in zip(merged[1:], members, strict=True)})
        rewrites.append(
            {
                "rule": "horizontal",
                "nodes": [n.name for n in members],
                "into": [n.name for n in merged],
                "origin": origin,
            }
        )
    if not rewrites:
        return model, []
    nodes = []
    for node in out.graph.node:
        if node.name in replace:
            nodes.extend(replace[node.name])
        elif node.name not in drop:
            nodes.append(node)
    replace_nodes(out, nodes)
    drop_unused_initializers(out)
    return out, rewrites


def _sibling_key(node: onnx.NodeProto, weights: dict) -> tuple | None:
    """Nodes with equal keys may be merged: same op, input, weight layout, attributes."""
    if node.domain not in ("", "ai.onnx") or len(node.input) < 2 or len(node.output) != 1:
        return None
    w = weights.get(node.input[1])
    if w is None or w.data_type != onnx.TensorProto.FLOAT:
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and bias not in weights:
        return None
    attrs = tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute))
    dims = tuple(w.dims)
    if node.op_type == "MatMul" and len(dims) == 2:
        return ("MatMul", node.input[0], dims[0], attrs, False)
    if node.op_type == "Gemm" and len(dims) == 2:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return None
        k = dims[1] if a.get("transB", 0) else dims[0]
        if bias is not None and len(weights[bias].dims) > 1:
            return None  # a 2-D bias broadcasts over rows too: not a per-column bias
        return ("Gemm", node.input[0], k, attrs, bias is not None)
    if MERGE_CONVS and node.op_type == "Conv" and len(dims) >= 3:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        if a.get("group", 1) != 1 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            return None
        return ("Conv", node.input[0], dims[1:], attrs, bias is not None)
    return None


def _merge(op: str, members: list[onnx.NodeProto], weights: dict, opset: int):
    """One node over concatenated weights (and biases), then a Slice per original output."""
    first = members[0]
    base = f"hfuse_{first.name}"
    arrays = [numpy_helper.to_array(weights[n.input[1]]) for n in members]
    trans_b = op == "Gemm" and any(
        a.name == "transB" and helper.get_attribute_value(a) for a in first.attribute
    )
    axis = 1 if op == "MatMul" or (op == "Gemm" and not trans_b) else 0
    sizes = [a.shape[axis] for a in arrays]
    new = [numpy_helper.from_array(np.concatenate(arrays, axis=axis), f"{base}_weight")]
    inputs = [first.input[0], new[0].name]
    if len(first.input) > 2 and first.input[2]:
        biases = [numpy_helper.to_array(weights[n.input[2]]).reshape(-1) for n in members]
        biases = [np.broadcast_to(b, (s,)) for b, s in zip(biases, sizes, strict=True)]
        new.append(numpy_helper.from_array(np.concatenate(biases), f"{base}_bias"))
        inputs.append(new[1].name)
    merged_out = f"{base}_out"
    merged = helper.make_node(op, inputs, [merged_out], name=base)
    merged.attribute.extend(first.attribute)
    # Slices, not a Split: a slice is injective and FuseOps fuses it into whatever
    # reads that branch (reshape, transpose, bias), while a Split's tuple ends a kernel.
    axis_ = 1 if op == "Conv" else -1
    nodes = [merged]
    start = 0
    for k, (member, size) in enumerate(zip(members, sizes, strict=True)):
        name = f"{base}_slice{k}"
        bounds = (start, start + size)
        start += size
        if opset < 10:  # starts/ends were attributes before opset 10
            nodes.append(
                helper.make_node(
                    "Slice",
                    [merged_out],
                    [member.output[0]],
                    name=name,
                    axes=[axis_],
                    starts=[bounds[0]],
                    ends=[bounds[1]],
                )
            )
            continue
        consts = [
            numpy_helper.from_array(np.array([v], dtype=np.int64), f"{name}_{what}")
            for what, v in (("starts", bounds[0]), ("ends", bounds[1]), ("axes", axis_))
        ]
        new += consts
        nodes.append(
            helper.make_node(
                "Slice", [merged_out, *(c.name for c in consts)], [member.output[0]], name=name
            )
        )
    return nodes, new
