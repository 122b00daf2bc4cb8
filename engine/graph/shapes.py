"""Input-shape overrides and ONNX shape inference with errors a user can act on.

Shape inference runs in strict mode first, so that shapes which do not fit the model
are reported with the operator and reason. When strict inference fails on the model as
uploaded (some exporters emit graphs the strict checks reject but runtimes accept), the
non-strict result is used and the reason becomes a warning.
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx

from engine.errors import InvalidModelError, ShapeError
from engine.graph.loader import model_inputs
from engine.graph.tensors import type_spec

_INFERENCE_ERRORS = (onnx.shape_inference.InferenceError, onnx.checker.ValidationError)
_MAX_REASON = 400


def format_shape(shape: list | tuple | None) -> str:
    """``[1, 3, "N"]`` -> ``"1x3xN"``; an unknown rank is ``"?"``."""
    return "?" if shape is None else "x".join(str(d) for d in shape) or "scalar"


def apply_input_shapes(model: onnx.ModelProto, shapes: Mapping[str, tuple[int, ...]]) -> list[str]:
    """Set the given inputs' dimensions in place and return warnings.

    Raises :class:`ShapeError` for an unknown input name, a wrong rank, or a dimension
    that is not a positive integer.
    """
    by_name = {v.name: v for v in model_inputs(model)}
    warnings = []
    for name, shape in shapes.items():
        value = by_name.get(name)
        if value is None:
            known = ", ".join(by_name) or "none"
            raise ShapeError(f"the model has no input '{name}' (its inputs: {known})")
        if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            raise ShapeError(f"input '{name}': every dimension must be a positive integer")
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


def _infer(model: onnx.ModelProto, *, strict: bool) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, strict_mode=strict, data_prop=True)


def _reason(error: Exception) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    text = text.replace("[ShapeInferenceError] Inference error(s): ", "")
    return text[:_MAX_REASON] or type(error).__name__
