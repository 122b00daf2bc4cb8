"""A design as a whole branched model: the graph IR the simulator replays and the ONNX file
that is exported (NN-Stretch Eq. 1 applied to every segment).

Every node carries, in its ``metadata_props`` (ONNX IR 10; onnxruntime and the checker
accept them, no operator attribute changes), the two attributes NN-Stretch adds to the
model format (section 3): ``nnstretch.recommended_processor`` and
``nnstretch.is_meeting_point``, plus its ``nnstretch.role`` (head, branch, restore, meet,
tail), ``nnstretch.segment`` and ``nnstretch.branch``.

**The branched model must be retrained before its accuracy means anything** (the paper
trains it with the original recipe; section 4). Its weights are initialised, not
trained: head and tail keep the original weights; a branch copies the original segment's
weights truncated to its leading channels (its first output filters, their first input
channels), as structured pruning would before fine-tuning; the restore 1x1 convs are new,
He-normal (std sqrt(2 / fan_in), seeded). The model's ``metadata_props`` say so
(``nnstretch.needs_retraining``, ``nnstretch.weights``).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.graph.ir import Graph
from engine.partition.nnstretch.branch import (
    Branched,
    NodeSpec,
    WeightSpec,
    _Original,
    build_body,
    restore_conv,
)
from engine.partition.nnstretch.search import Design
from engine.partition.nnstretch.structure import StretchStructure
from engine.partition.problem import PartitionError

WEIGHTS_NOTE = (
    "initialised, not trained: head and tail keep the original weights; each branch copies "
    "the original segment's weights truncated to its leading channels (structured-pruning "
    "style); the restore 1x1 convs are He-normal (std sqrt(2/fan_in), seed {seed})"
)
MIN_IR_VERSION = 10  # node metadata_props


def assemble(graph: Graph, structure: StretchStructure, design: Design, home: str) -> Branched:
    """The whole branched model of ``design`` (head and tail on ``home``)."""
    original = _Original(graph, structure)
    nodes_by_name = {n.name: n for n in graph.nodes}
    out = Branched(inputs=list(graph.inputs), outputs=list(graph.outputs))
    for name in graph.inputs:
        out.shapes[name] = graph.tensors[name].static_shape
        out.dtypes[name] = graph.tensors[name].dtype

    def copy(names, role):
        for name in names:
            node = nodes_by_name[name]
            inputs = []
            for t in node.inputs:
                if t and original.is_weight(t):
                    tensor = graph.tensors[t]
                    out.weights[t] = WeightSpec(
                        t, tensor.static_shape, tensor.dtype, t, "copy", tensor.is_param
                    )
                inputs.append(t)
            for t in node.outputs:
                if t:
                    out.shapes[t] = graph.tensors[t].static_shape
                    out.dtypes[t] = graph.tensors[t].dtype
            out.nodes.append(
                NodeSpec(
                    node.name, node.op_type, node.domain, inputs, list(node.outputs),
                    dict(node.attributes), role, unit=home, source=node.name,
                )
            )  # fmt: skip

    copy(structure.head.nodes, "head")
    body = structure.body
    for s, choice in enumerate(design.segments):
        seg = choice.segment
        stages = list(body[seg.first : seg.last + 1])
        in_c = graph.tensors[seg.input].static_shape[1]
        parts = []
        for b, branch in enumerate(choice.branches):
            tag = f".s{s}b{b}"
            part = build_body(
                original,
                stages,
                branch.option.depth_ratio,
                branch.option.width_ratio,
                seg.input,
                in_c,
                tag,
            )
            if part.out_channels != branch.option.out_channels:
                raise PartitionError(f"segment {s} branch {b}: width differs from its pricing")
            for spec in part.nodes:
                spec.unit, spec.segment, spec.branch = branch.unit, s, b
            out.nodes.extend(part.nodes)
            out.shapes.update(part.shapes)
            out.dtypes.update(part.dtypes)
            out.weights.update(part.weights)
            spec, weight, shape = restore_conv(
                f"restore.s{s}b{b}",
                part.output,
                part.out_channels,
                branch.restore_channels,
                seg.spatial,
                graph.tensors[seg.output].dtype,
            )
            spec.unit, spec.segment, spec.branch = branch.unit, s, b
            out.nodes.append(spec)
            out.weights[weight.name] = weight
            out.shapes[spec.outputs[0]] = shape
            out.dtypes[spec.outputs[0]] = graph.tensors[seg.output].dtype
            parts.append(spec.outputs[0])
        out.nodes.append(
            NodeSpec(
                f"meet.s{s}", "Concat", "", parts, [seg.output], {"axis": 1}, "meet",
                unit=home, segment=s,
            )
        )  # fmt: skip
        out.shapes[seg.output] = graph.tensors[seg.output].static_shape
        out.dtypes[seg.output] = graph.tensors[seg.output].dtype
    copy(structure.tail, "tail")
    return out


def to_onnx(
    branched: Branched,
    prepared: onnx.ModelProto,
    graph: Graph,
    constants: frozenset[str],
    design_summary: dict,
    seed: int = 0,
) -> onnx.ModelProto:
    """The branched model as ONNX (see the module docstring); checked with
    ``onnx.checker`` and strict shape inference with type checks (the checker's full
    check), which fills its value info.

    Raises :class:`PartitionError` when either fails (a bug in the transform)."""
    protos = {o: node for node in prepared.graph.node for o in node.output if o}
    values = _weight_values(prepared, graph, constants, protos)
    rng = np.random.default_rng(seed)
    initializers = []
    for w in branched.weights.values():
        if w.init == "he_normal":
            fan_in = int(np.prod(w.shape[1:]))
            array = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=w.shape)
            array = array.astype(onnx.helper.tensor_dtype_to_np_dtype(_elem(w.dtype)))
        else:
            source = values.get(w.source)
            if source is None:
                raise PartitionError(f"weight {w.source} has no value to copy")
            array = source[tuple(slice(0, d) for d in w.shape)] if w.shape else source
            if tuple(array.shape) != tuple(w.shape):
                raise PartitionError(f"weight {w.name}: slice {array.shape} is not {w.shape}")
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), w.name))
    nodes = []
    for spec in branched.nodes:
        if spec.source is not None and spec.role in ("head", "tail"):
            proto = onnx.NodeProto()
            proto.CopyFrom(protos[spec.outputs[0]])
            proto.name = spec.name
        elif spec.source is not None:
            original = protos[_first_output(graph, spec.source)]
            proto = onnx.NodeProto()
            proto.CopyFrom(original)
            del proto.input[:]
            proto.input.extend(spec.inputs)
            del proto.output[:]
            proto.output.extend(spec.outputs)
            proto.name = spec.name
            for attr in proto.attribute:
                if attr.name in spec.overrides:
                    attr.CopyFrom(helper.make_attribute(attr.name, spec.overrides[attr.name]))
        else:
            proto = helper.make_node(
                spec.op_type, spec.inputs, spec.outputs, name=spec.name, **spec.attributes
            )
        del proto.metadata_props[:]
        _annotate(proto, spec)
        nodes.append(proto)
    inputs = [v for v in prepared.graph.input if v.name in branched.inputs]
    outputs = [v for v in prepared.graph.output]
    graph_proto = helper.make_graph(
        nodes, f"{prepared.graph.name or 'model'}_nnstretch", inputs, outputs, initializers
    )
    model = helper.make_model(
        graph_proto,
        opset_imports=list(prepared.opset_import),
        ir_version=max(prepared.ir_version, MIN_IR_VERSION),
        producer_name="workbench nn-stretch",
    )
    for key, value in (
        ("nnstretch.needs_retraining", "true"),
        ("nnstretch.weights", WEIGHTS_NOTE.format(seed=seed)),
        ("nnstretch.design", json.dumps(design_summary, separators=(",", ":"))),
    ):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    try:  # the checker, then strict shape inference with type checks (what full_check runs)
        onnx.checker.check_model(model)
        inferred = onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as e:  # the checker and inference raise their own error types
        raise PartitionError(f"the branched model is not valid ONNX: {e}") from e
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)
    return model


def _annotate(proto: onnx.NodeProto, spec: NodeSpec) -> None:
    for key, value in (
        ("nnstretch.recommended_processor", spec.unit or ""),
        ("nnstretch.is_meeting_point", "true" if spec.meeting_point else "false"),
        ("nnstretch.role", spec.role),
        ("nnstretch.segment", "" if spec.segment is None else str(spec.segment)),
        ("nnstretch.branch", "" if spec.branch is None else str(spec.branch)),
    ):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value


def node_annotations(model: onnx.ModelProto) -> dict[str, dict[str, str]]:
    """Each node's ``nnstretch.*`` metadata, by node name."""
    return {
        n.name: {p.key: p.value for p in n.metadata_props if p.key.startswith("nnstretch.")}
        for n in model.graph.node
    }


def _first_output(graph: Graph, name: str) -> str:
    node = next(n for n in graph.nodes if n.name == name)
    return node.outputs[0]


def _elem(dtype: str) -> int:
    return {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16,
            "float64": onnx.TensorProto.DOUBLE, "bfloat16": onnx.TensorProto.BFLOAT16}[dtype]  # fmt: skip


def _weight_values(
    model: onnx.ModelProto, graph: Graph, constants: frozenset[str], protos: dict
) -> dict[str, np.ndarray]:
    """Initializers and the outputs of constant nodes (the light models' ConstantOfShape
    fills, evaluated once by onnx's reference evaluator), by name."""
    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    if not constants:
        return values
    from onnx.reference import ReferenceEvaluator

    for node in graph.nodes:  # topological: a constant's inputs are known before it
        if node.name not in constants:
            continue
        proto = protos[next(o for o in node.outputs if o)]
        outputs = [o for o in proto.output if o]
        sub = helper.make_graph(
            [proto],
            "constant",
            [],
            [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs],
            [numpy_helper.from_array(values[x], x) for x in dict.fromkeys(proto.input) if x],
        )
        evaluator = ReferenceEvaluator(
            helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=10)
        )
        for o, r in zip(outputs, evaluator.run(None, {}), strict=True):
            values[o] = np.asarray(r)
    return values
