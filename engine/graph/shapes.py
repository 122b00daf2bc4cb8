"""Input-shape overrides and ONNX shape inference with errors a user can act on.

Shape inference runs in strict mode first, so that shapes which do not fit the model
are reported with the operator and reason. When strict inference fails on the model as
uploaded (some exporters emit graphs the strict checks reject but runtimes accept), the
non-strict result is used and the reason becomes a warning.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import onnx

from engine.errors import InvalidModelError, ModelLimitError, ShapeError
from engine.graph.ir import Graph, Node
from engine.graph.loader import model_inputs
from engine.graph.tensors import Dim, type_spec

_INFERENCE_ERRORS = (onnx.shape_inference.InferenceError, onnx.checker.ValidationError)
_MAX_REASON = 400
_INT64_LIMIT = 2**63
_MAX_EXPLAINED = 10
_INFERRED_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
# Output sizes that depend on input values, whatever the shapes.
_VALUE_DEPENDENT = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "TopK"})
_SIZE_HINT = "Check the model's declared shapes and the input shapes given."


def format_shape(shape: list | tuple | None) -> str:
    """``[1, 3, "N"]`` -> ``"1x3xN"``; an unknown rank is ``"?"``."""
    return "?" if shape is None else "x".join(str(d) for d in shape) or "scalar"


def apply_input_shapes(
    model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]], *, allow_empty: bool = False
) -> list[str]:
    """Set the given inputs' dimensions in place and return warnings.

    Raises :class:`ShapeError` for an unknown input name, a wrong rank, or a dimension
    that is not a positive integer (or zero, an empty tensor, with ``allow_empty``).
    """
    smallest = 0 if allow_empty else 1
    by_name = {v.name: v for v in model_inputs(model)}
    warnings = []
    for name, shape in shapes.items():
        value = by_name.get(name)
        if value is None:
            known = ", ".join(by_name) or "none"
            raise ShapeError(f"the model has no input '{name}' (its inputs: {known})")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= smallest for d in shape):
            kind = "a non-negative" if allow_empty else "a positive"
            raise ShapeError(f"input '{name}': every dimension must be {kind} integer")
        if any(d >= _INT64_LIMIT for d in shape):
            raise ShapeError(f"input '{name}': a dimension does not fit a 64-bit integer")
        declared, _ = type_spec(value.type)
        if declared is not None and len(declared) != len(shape):
            raise ShapeError(
                f"input '{name}' has rank {len(declared)} (shape {format_shape(declared)}), "
                f"but the given shape {format_shape(shape)} has rank {len(shape)}",
                hint=f"Give {len(declared)} dimensions for '{name}'.",
            )
        for axis, (old, new) in enumerate(zip(declared or [], shape, strict=False)):
            if isinstance(old, int) and old != new:
                warnings.append(f"input '{name}' axis {axis}: declared {old}, analyzed as {new}")
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        for d in shape:
            dims.add().dim_value = d
    if warnings:
        _forget_static_shapes(model.graph)
    return warnings


def _forget_static_shapes(graph: onnx.GraphProto) -> None:
    """Drop recorded shapes that a changed static input dim may contradict.

    Intermediate shapes are re-inferred; outputs keep their rank and symbolic dims.
    """
    del graph.value_info[:]
    for output in graph.output:
        for dim in output.type.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                dim.Clear()


def infer_shapes(
    model: onnx.ModelProto, *, original: onnx.ModelProto | None = None
) -> tuple[onnx.ModelProto, list[str]]:
    """Return the shape-inferred model and warnings.

    ``original`` is the model before input-shape overrides; when given and strict
    inference fails only with the overrides, :class:`ShapeError` says why.
    """
    try:
        return _infer(model, strict=True), []
    except _INFERENCE_ERRORS as e:
        reason = _reason(e)
        if "overflow" in reason.lower():
            raise ModelLimitError(
                f"tensor {_overflowing_tensor(model, reason)} would have a dimension that "
                f"overflows a 64-bit integer: {reason}",
                hint=_SIZE_HINT,
            ) from e
    if original is not None:
        try:
            _infer(original, strict=True)
        except _INFERENCE_ERRORS:
            pass  # the model fails on its own; the overrides are not to blame
        else:
            raise ShapeError(
                f"the given input shapes do not fit the model: {reason}",
                hint="Check the input shapes against the model's declared inputs.",
            )
    try:
        inferred = _infer(model, strict=False)
    except _INFERENCE_ERRORS as e:
        raise InvalidModelError(f"shape inference failed: {_reason(e)}") from e
    return inferred, [f"shape inference: {reason}"]


def _overflowing_tensor(model: onnx.ModelProto, reason: str) -> str:
    """Name the output of the node onnx's message names (``node name: X``)."""
    found = re.search(r"node name: ([^)]*)\)", reason)
    node = next((n for n in model.graph.node if found and n.name == found.group(1)), None)
    if node is None or not node.output:
        return "(unnamed)"
    return f"'{node.output[0]}' (output of {node.op_type} '{node.name}')"


def _infer(model: onnx.ModelProto, *, strict: bool) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, strict_mode=strict, data_prop=True)


def _reason(error: Exception) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    text = text.replace("[ShapeInferenceError] Inference error(s): ", "")
    return text[:_MAX_REASON] or type(error).__name__


def check_declared_sizes(model: onnx.ModelProto, max_elements: int) -> None:
    """Refuse declared tensors (inputs, outputs, value_info, initializers) that are too big.

    Runs before shape inference. Raises :class:`ModelLimitError` naming the tensor when
    its element count overflows 64 bits or exceeds ``max_elements``, and
    :class:`InvalidModelError` for a negative dimension.
    """
    graph = model.graph
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims, _ = type_spec(value.type)
        _check_size(value.name, dims, max_elements, inferred=False)
    for initializer in graph.initializer:
        _check_size(initializer.name, list(initializer.dims), max_elements, inferred=False)


def check_tensor_sizes(graph: Graph, max_elements: int) -> None:
    """Like :func:`check_declared_sizes` for every tensor of the shape-inferred graph.

    A negative inferred dimension means a size overflowed inside shape inference:
    :class:`ModelLimitError`.
    """
    for tensor in graph.tensors.values():
        shape = tensor.static_shape
        if shape is not None and tensor.elements <= max_elements and (not shape or min(shape) >= 0):
            continue  # the common case, checked cheaply
        _check_size(tensor.name, tensor.shape, max_elements, inferred=True)


def _check_size(
    name: str, dims: Sequence[Dim] | None, max_elements: int, *, inferred: bool
) -> None:
    if dims is None:
        return
    known = [d for d in dims if isinstance(d, int)]
    if any(d < 0 for d in known):
        if inferred:
            raise ModelLimitError(
                f"tensor '{name}' has a negative dimension ({format_shape(dims)}): a size "
                "overflowed a 64-bit integer during shape inference",
                hint=_SIZE_HINT,
            )
        raise InvalidModelError(
            f"tensor '{name}' is declared with a negative dimension ({format_shape(dims)})"
        )
    elements = math.prod(known)
    at_least = "" if len(known) == len(dims) else "at least "
    if elements >= _INT64_LIMIT:
        raise ModelLimitError(
            f"tensor '{name}' has dimensions {format_shape(dims)} whose product "
            f"({at_least}{elements} elements) overflows a 64-bit integer",
            hint=_SIZE_HINT,
        )
    if elements > max_elements:
        raise ModelLimitError(
            f"tensor '{name}' has {at_least}{elements} elements ({format_shape(dims)}), "
            f"more than the limit of {max_elements}",
            hint="Use smaller input shapes, or ask an administrator to raise the limit.",
        )


def explain_unknown_shapes(graph: Graph) -> list[str]:
    """Warnings naming each tensor whose shape is unknown at its origin, and why.

    Inputs with symbolic dimensions come first; then, for every node whose inputs are all
    known but whose used output is not, the first such output and the likely reason. Shapes
    unknown only because an input's is are not repeated.
    """
    tensors = graph.tensors
    warnings = []
    for name in graph.inputs:
        tensor = tensors[name]
        if tensor.static_shape is None and tensor.shape is not None:
            warnings.append(
                f"input '{name}' has shape {format_shape(tensor.shape)}: set its dimensions "
                f"(input shapes, e.g. --shape {name}=...) to cost the nodes that depend on it"
            )
    outputs = set(graph.outputs)
    roots = []
    for node in graph.nodes:
        unknown = None  # the node's first used output of unknown shape
        for name in node.outputs:
            if name:
                tensor = tensors[name]
                if tensor.static_shape is None and (tensor.consumers or name in outputs):
                    unknown = name
                    break
        if unknown is not None and all(
            tensors[i].static_shape is not None for i in node.inputs if i
        ):
            roots.append(
                f"shape of '{unknown}' (output of {node.op_type} '{node.name}') is unknown: "
                f"{_why_unknown(node, graph)}"
            )
    if len(roots) > _MAX_EXPLAINED:
        more = len(roots) - _MAX_EXPLAINED
        roots = roots[:_MAX_EXPLAINED] + [f"... and {more} more tensors whose shapes are unknown"]
    return warnings + roots


def _why_unknown(node: Node, graph: Graph) -> str:
    if node.domain not in _INFERRED_DOMAINS:
        return f"onnx has no shape inference for operators of domain '{node.domain}'"
    if node.subgraph_nodes:
        return "it is computed by a control-flow subgraph"
    if node.op_type in _VALUE_DEPENDENT:
        return "its size depends on the values of the input, known only at run time"
    for name in node.inputs[1:]:
        tensor = graph.tensors[name] if name else None
        if tensor is not None and tensor.producer and tensor.dtype in ("int64", "int32"):
            return (
                f"it depends on the values of '{name}', which are computed at run time "
                "(simplifying the model folds such shape arithmetic)"
            )
    return "onnx shape inference could not determine it"


LIGHT_TENSOR_BYTES = 1 << 16
"""Initializers above this size sit out :func:`infer_value_shapes`: no shape depends on
their values (shape operands are a few int64s)."""


def infer_value_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model)`` without its weights: onnx serializes
    the whole model to infer it, and parses the result back, which took 6 s a call on
    VGG-16's 550 MB (three calls in a compile). Initializers over
    :data:`LIGHT_TENSOR_BYTES` take part as graph inputs of their type and shape instead
    (:func:`without_heavy_weights`). Returns a model without those weights (they are
    graph inputs there): read its ``value_info``, inputs and outputs, do not run it."""
    return onnx.shape_inference.infer_shapes(without_heavy_weights(model))


def without_heavy_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s graph with every initializer over :data:`LIGHT_TENSOR_BYTES` turned
    into a graph input of its type and shape (``model`` itself when it has none): for
    checks and inference that read the graph, not the weights' values."""
    graph = model.graph
    heavy = [t for t in graph.initializer if _tensor_bytes(t) > LIGHT_TENSOR_BYTES]
    if not heavy:
        return model
    names = {t.name for t in heavy}
    light = onnx.helper.make_graph(
        list(graph.node),
        graph.name,
        [i for i in graph.input if i.name not in names]
        + [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in heavy],
        list(graph.output),
        initializer=[t for t in graph.initializer if t.name not in names],
        value_info=list(graph.value_info),
    )
    slim = onnx.helper.make_model(
        light, opset_imports=list(model.opset_import), functions=list(model.functions)
    )
    slim.ir_version = model.ir_version
    return slim


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    count = 1
    for d in tensor.dims:
        count *= d
    return count * 4  # typed fields: at least as many bytes as elements, near enough


def with_inferred_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself, its ``value_info`` and outputs replaced by what
    :func:`infer_value_shapes` inferred (its weights are never copied)."""
    inferred = infer_value_shapes(model).graph
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.value_info)
    outputs = {o.name: o for o in inferred.output}
    for output in model.graph.output:
        if output.name in outputs:
            output.CopyFrom(outputs[output.name])
    return model
