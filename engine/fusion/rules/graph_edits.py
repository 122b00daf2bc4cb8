"""What every fusion rule shares: the rewrite record it returns, the rule type, the
error for a pattern it cannot rewrite, and the edits of an ONNX model it makes."""

from __future__ import annotations

from collections.abc import Callable

import onnx

Rewrite = dict
"""``{"rule", "nodes": [replaced names], "into": [new names], "origin"?: {new: [replaced]}}``"""


RuleFn = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, list[Rewrite]]]


class RuleNotApplicable(Exception):
    """A rule found its pattern but cannot rewrite this model; the message says why."""


def opset_version(model: onnx.ModelProto) -> int:
    """The model's default-domain opset (1 if it names none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy a rule may edit in place."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def replace_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Make ``nodes`` (copied) the graph's node list."""
    kept = [clone_node(n) for n in nodes]
    del model.graph.node[:]
    model.graph.node.extend(kept)


def clone_node(node: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of ``node``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def drop_unused_initializers(model: onnx.ModelProto) -> None:
    """Remove the initializers no node and no graph output reads."""
    used = {i for n in model.graph.node for i in n.input}
    used |= {o.name for o in model.graph.output}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
