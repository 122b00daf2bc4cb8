"""The uploaded model's own graph, for the view beside the prepared one: the user's nodes as
the file has them (before constants and shape arithmetic are folded), under the names the
prepared model's ``user_names`` speak of.

It is read from the file, not analyzed: names (made unique as preparation makes them), op
types, tensors, the shapes the file declares, key attributes and the exporter's scopes; no
figures (MACs, bytes: those are the prepared model's, unknown here). ``graph_tree`` lays it
out like any analysis.
"""

from __future__ import annotations

import onnx
from onnx import helper

from engine.graph.ir import module_scope
from engine.graph.topology import sorted_model, unique_node_names


def upload_analysis(model: onnx.ModelProto) -> dict:
    """An analysis-shaped dict of the model's own graph (``node_list`` in execution order)."""
    model, _reordered = sorted_model(model)
    graph = model.graph
    shapes = {info.name: _shape(info) for info in [*graph.input, *graph.value_info, *graph.output]}
    names = unique_node_names(graph.node)
    nodes = []
    for node, name in zip(graph.node, names, strict=True):
        outputs = list(node.output)
        entry = {
            "name": name,
            "op_type": node.op_type,
            "inputs": list(node.input),
            "outputs": outputs,
            "output_shapes": [shapes.get(t) for t in outputs],
            "output_bytes": [None] * len(outputs),
            "attributes": _attributes(node),
            "costed": True,  # nothing to cost here: figures are the prepared model's
        }
        scope = module_scope(node.metadata_props) if node.metadata_props else ()
        if scope:
            entry["scope"] = list(scope)
        nodes.append(entry)
    initializers = {t.name for t in graph.initializer}
    return {
        "nodes": len(nodes),
        "inputs": [{"name": i.name} for i in graph.input if i.name not in initializers],
        "node_list": nodes,
    }


def _shape(info: onnx.ValueInfoProto) -> list | None:
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type" or not info.type.tensor_type.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") else None for d in info.type.tensor_type.shape.dim
    ]


def _attributes(node: onnx.NodeProto) -> dict:
    """Numbers, short strings and short lists of numbers (what an op box prints)."""
    plain = {}
    for attribute in node.attribute:
        if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.TENSOR):
            continue
        value = helper.get_attribute_value(attribute)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        short_text = isinstance(value, str) and len(value) <= 32
        few_numbers = (
            isinstance(value, list)
            and len(value) <= 8
            and all(isinstance(x, int | float) for x in value)
        )
        if isinstance(value, int | float) or short_text or few_numbers:
            plain[attribute.name] = value
    return plain
