"""The analyze stage: validate, infer shapes, build the IR and cost every node.

Follows the per-layer analysis of DNNTune (thesis ch.3): per-op MACs, FLOPs, parameters
and bytes, and arithmetic intensity, over the graph in execution order.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import onnx

from engine.errors import ProgressFn
from engine.graph.costs import OpCost, cost_node
from engine.graph.ir import PROGRESS_EVERY, Graph, Node, build_graph, collector_paused
from engine.graph.loader import (
    ModelHeader,
    ModelSource,
    check_model,
    check_node_limit,
    load_model,
    model_header,
)
from engine.graph.prepared import PreparedModel
from engine.graph.shapes import (
    apply_input_shapes,
    check_declared_sizes,
    check_tensor_sizes,
    explain_unknown_shapes,
    infer_shapes,
)
from engine.graph.simplify import SimplificationReport, simplify_model
from engine.graph.structure import GraphStructure, detect_structure
from engine.graph.tensors import Dim, TensorSpec
from engine.graph.topology import sorted_model

_NO_COST = OpCost(0, 0, 0, 0, 0)


@dataclass(frozen=True)
class AnalysisConfig:
    """Options of :func:`analyze_model`.

    ``input_shapes`` fixes symbolic or dynamic input dimensions, e.g.
    ``{"input": (1, 3, 224, 224)}``; each must name a model input and match its rank.
    ``simplify`` folds constants and shape arithmetic first (:mod:`engine.graph.simplify`)
    and analyzes the simplified model.
    """

    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    simplify: bool = False
    max_nodes: int = 200_000
    max_tensor_elements: int = 2**31
    max_bytes: int | None = None


@dataclass(frozen=True)
class NodeAnalysis:
    """One node's shapes and work; ``cost`` is ``None`` when it was not costed."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    output_shapes: list[list[Dim] | None]
    cost: OpCost | None
    user_names: tuple[str, ...] | None = None
    """The user's node(s) this prepared node stands for (``None``: not prepared)."""
    output_bytes: list[int | None] | None = None
    """Bytes of each output tensor (``None`` where its shape or dtype is unknown)."""
    attributes: dict | None = None
    """The node's scalar and short-list attributes (kernel_shape, strides, axis...), for
    views; tensors and subgraphs are left out."""
    scope: tuple[str, ...] = ()
    """The modules the exporter's metadata names for the node, outermost first."""

    def to_dict(self) -> dict:
        cost = self.cost or _NO_COST
        known = self.cost is not None
        result = {
            "name": self.name,
            "op_type": self.op_type,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "output_shapes": self.output_shapes,
            # Unknown stays unknown: a node that was not costed has no figures, not zeros.
            "macs": cost.macs if known else None,
            "flops": cost.flops if known else None,
            "params": cost.params if known else None,
            "bytes_read": cost.bytes_read if known else None,
            "bytes_written": cost.bytes_written if known else None,
            "intensity": cost.intensity if known else None,
            "costed": known,
        }
        if self.user_names is not None and self.user_names != (self.name,):
            result["user_names"] = list(self.user_names)
        result["output_bytes"] = self.output_bytes or [None] * len(self.outputs)
        result["attributes"] = self.attributes or {}
        if self.scope:
            result["scope"] = list(self.scope)
        return result


@dataclass
class ModelAnalysis:
    """Result of :func:`analyze_model`. ``graph`` is the IR, for later stages.

    ``simplification`` is set when simplification was asked for; ``simplified_model`` is
    then the model that was analyzed (``None`` when the original was kept).
    """

    header: ModelHeader
    nodes: int
    params: int
    param_bytes: int
    macs: int
    flops: int
    activation_bytes: int
    ops: dict[str, int]
    not_costed: list[str]
    node_list: list[NodeAnalysis]
    warnings: list[str]
    analysis_s: float
    graph: Graph | None = field(default=None, repr=False, compare=False)
    structure: GraphStructure | None = None
    simplification: SimplificationReport | None = None
    simplified_model: onnx.ModelProto | None = field(default=None, repr=False, compare=False)
    preparation: dict | None = None

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.header.inputs

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.header.outputs

    def to_dict(self, *, nodes: bool = True) -> dict:
        """The stored result JSON; ``nodes=False`` leaves out ``node_list``."""
        result = {
            "model": {
                "ir_version": self.header.ir_version,
                "opsets": dict(self.header.opsets),
                "producer": self.header.producer,
                "graph_name": self.header.graph_name,
            },
            "nodes": self.nodes,
            "params": self.params,
            "param_bytes": self.param_bytes,
            "macs": self.macs,
            "flops": self.flops,
            "activation_bytes": self.activation_bytes,
            "ops": dict(self.ops),
            "not_costed": list(self.not_costed),
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
            "node_list": [n.to_dict() for n in self.node_list],
            "warnings": list(self.warnings),
            "analysis_s": self.analysis_s,
            "structure": self.structure.to_dict() if self.structure else None,
            "simplification": self.simplification.to_dict() if self.simplification else None,
            "preparation": self.preparation,
        }
        if not nodes:
            del result["node_list"]
        return result


def analyze_model(
    source: ModelSource,
    config: AnalysisConfig = AnalysisConfig(),
    progress: ProgressFn | None = None,
) -> ModelAnalysis:
    """Validate a model and compute its per-node and total work.

    ``source`` is a path, the file's bytes or an ``onnx.ModelProto`` (never modified).
    Raises :class:`~engine.errors.InvalidModelError`,
    :class:`~engine.errors.ModelLimitError`, :class:`~engine.errors.UnsupportedModelError`
    or :class:`~engine.errors.ShapeError`; a :class:`~engine.errors.Cancelled` raised by
    ``progress`` propagates.
    """
    started = time.perf_counter()
    report = progress or _ignore
    report(0.0, "loading model")
    model = load_model(source, max_bytes=config.max_bytes)
    ir_version = model.ir_version
    check_node_limit(model, config.max_nodes)
    warnings: list[str] = []
    model, reordered = sorted_model(model)
    if reordered:
        warnings.append("nodes were not in topological order; analyzed in sorted order")

    report(0.1, "inferring shapes")
    original = None
    if config.input_shapes:
        original = model
        model = _copy(model)
        warnings += apply_input_shapes(model, config.input_shapes)
    check_declared_sizes(model, config.max_tensor_elements)
    model, inference_warnings = infer_shapes(model, original=original)

    simplification = simplified_model = None
    if config.simplify:
        report(0.15, "simplifying")
        simplified = simplify_model(model)
        simplification = simplified.report
        if simplification.applied:
            model = simplified_model = simplified.model
            model, inference_warnings = infer_shapes(model)
        else:
            warnings.append(simplification.warning)
    warnings += inference_warnings

    report(0.3, "checking model")
    check_model(model)

    graph = build_graph(model, _scaled(report, 0.4, 0.6))
    warnings += graph.warnings
    check_tensor_sizes(graph, config.max_tensor_elements)
    warnings += explain_unknown_shapes(graph)
    # The uploaded model's IR version: simplification may raise IR 3 to 4.
    header = dataclasses.replace(model_header(model), ir_version=ir_version)
    analysis = analyze_graph(graph, header, warnings=warnings, progress=report)
    analysis.analysis_s = round(time.perf_counter() - started, 4)
    analysis.simplification = simplification
    analysis.simplified_model = simplified_model
    return analysis


def analyze_prepared(prepared: PreparedModel, progress: ProgressFn | None = None) -> ModelAnalysis:
    """The analyze stage: cost every node of the prepared model, speaking of the user's
    nodes (``user_names``) and saying how the model was prepared."""
    started = time.perf_counter()
    report = progress or _ignore
    with collector_paused():  # as in preparation: no cycles, millions of objects
        analysis = analyze_graph(
            prepared.graph,
            prepared.header,
            warnings=list(prepared.report.warnings) + list(prepared.report.unknown_shapes),
            progress=report,
            user_nodes=prepared.user_nodes,
        )
    analysis.preparation = prepared.to_dict()
    analysis.analysis_s = round(time.perf_counter() - started + prepared.report.seconds, 4)
    return analysis


def analyze_graph(
    graph: Graph,
    header: ModelHeader,
    *,
    warnings: list[str],
    progress: ProgressFn | None = None,
    user_nodes: Mapping[str, tuple[str, ...]] | None = None,
) -> ModelAnalysis:
    """Cost every node of ``graph`` and detect its structure."""
    report = progress or _ignore
    warnings = list(warnings)
    node_list, not_costed = _cost_nodes(graph, _scaled(report, 0.6, 0.9), user_nodes)
    report(0.9, "detecting structure")
    structure = detect_structure(graph)
    params = graph.params()
    costs = [n.cost for n in node_list if n.cost is not None]
    if not_costed:
        kinds = sorted({n.op_type for n in node_list if n.cost is None})
        warnings.append(f"{len(not_costed)} nodes not costed (op types: {', '.join(kinds)})")
    report(1.0, "analysis done")
    return ModelAnalysis(
        header=header,
        nodes=len(graph.nodes),
        params=sum(t.elements or 0 for t in params),
        param_bytes=sum(t.bytes or 0 for t in params),
        macs=sum(c.macs for c in costs),
        flops=sum(c.flops for c in costs),
        activation_bytes=sum(
            t.bytes or 0 for t in graph.tensors.values() if t.producer and not t.is_param
        ),
        ops=dict(Counter(n.op_type for n in graph.nodes).most_common()),
        not_costed=not_costed,
        node_list=node_list,
        warnings=warnings,
        analysis_s=0.0,
        graph=graph,
        structure=structure,
    )


def _cost_nodes(
    graph: Graph, report: ProgressFn, user_nodes: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[list[NodeAnalysis], list[str]]:
    node_list = []
    not_costed = []
    total = max(len(graph.nodes), 1)
    for i, node in enumerate(graph.nodes):
        if i % PROGRESS_EVERY == 0:
            report(i / total, f"costing: {i}/{len(graph.nodes)} nodes")
        cost = cost_node(node, graph)
        if cost is None:
            not_costed.append(node.name)
        users = user_nodes.get(node.name, (node.name,)) if user_nodes is not None else None
        node_list.append(_node_analysis(node, graph, cost, users))
    return node_list, not_costed


def _node_analysis(
    node: Node, graph: Graph, cost: OpCost | None, user_names: tuple[str, ...] | None
) -> NodeAnalysis:
    shapes, sizes = [], []
    for name in node.outputs:
        tensor = graph.tensors[name] if name else None
        shapes.append(None if tensor is None or tensor.shape is None else list(tensor.shape))
        sizes.append(None if tensor is None else tensor.bytes)
    return NodeAnalysis(
        node.name,
        node.op_type,
        node.inputs,
        node.outputs,
        shapes,
        cost,
        user_names,
        output_bytes=sizes,
        attributes=_plain_attributes(node.attributes),
        scope=node.scope,
    )


def _plain_attributes(attributes: dict) -> dict:
    """Attributes a view can print: numbers, short strings, short lists of numbers."""
    plain = {}
    for name, value in attributes.items():
        if isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 32):
            plain[name] = value
        elif (
            isinstance(value, list | tuple)
            and len(value) <= 8
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
        ):
            plain[name] = list(value)
    return plain


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _scaled(report: ProgressFn, start: float, end: float) -> ProgressFn:
    return lambda fraction, message: report(start + (end - start) * fraction, message)


def _ignore(fraction: float, message: str) -> None:
    pass
