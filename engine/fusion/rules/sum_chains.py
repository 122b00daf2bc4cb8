"""The fusion rule ``sum-to-add``: ONNX ``Sum`` imports as broadcast + stack + reduce, a reduction that
FuseOps cannot put into the epilogue of the conv producing one of its inputs (the
residual add of ResNet and DenseNet). A chain of ``Add`` is elementwise, so the add
(and the ReLU after it) fuses into the conv kernel: "epilogues into conv/GEMM".
"""

from __future__ import annotations

import onnx
from onnx import helper

from engine.fusion.rules.graph_edits import Rewrite, copy_model, replace_nodes


def sum_to_add(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Replace every ``Sum`` of two or more inputs by a chain of ``Add``."""
    out = copy_model(model)
    nodes, rewrites = [], []
    for node in out.graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            nodes.append(node)
            continue
        acc, names = node.input[0], []
        for k, operand in enumerate(node.input[1:], start=1):
            last = k == len(node.input) - 1
            result = node.output[0] if last else f"{node.output[0]}__sum{k}"
            name = node.name if len(node.input) == 2 else f"{node.name}__add{k}"
            nodes.append(helper.make_node("Add", [acc, operand], [result], name=name))
            names.append(name)
            acc = result
        rewrites.append({"rule": "sum-to-add", "nodes": [node.name], "into": names})
    replace_nodes(out, nodes)
    return out, rewrites
