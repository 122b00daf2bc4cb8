"""Preparing a model for compilation: its input shapes, the nodes TVM cannot import
(they fall back to onnxruntime, see ``delegate``), where the simplifier's nodes came
from, and the inputs' specs and dtypes."""

from __future__ import annotations

import numpy as np
import onnx

from engine.accuracy.inputs import DEFAULT_INT_HIGH, index_bounds
from engine.errors import UnsupportedModelError
from engine.fusion import delegate
from engine.fusion.importer import NodeImportError, import_onnx, supported_op_types
from engine.graph.shapes import without_heavy_weights
from engine.graph.tensors import type_spec

MAX_FALLBACK_ROUNDS = 50
_CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


def full_shapes(model, given: dict, model_inputs) -> dict[str, tuple[int, ...]]:
    """Given shapes, and every other input's symbolic dimensions set to 1."""
    shapes = {}
    for value in model_inputs(model):
        if value.name in given:
            shapes[value.name] = tuple(given[value.name])
            continue
        dims, _ = type_spec(value.type)
        if dims is not None and not all(isinstance(d, int) and d > 0 for d in dims):
            shapes[value.name] = tuple(d if isinstance(d, int) and d > 0 else 1 for d in dims)
    shapes.update({name: tuple(shape) for name, shape in given.items()})  # unknown: ShapeError
    return shapes


def find_fallback(model: onnx.ModelProto, report) -> dict[str, str]:
    """Nodes TVM cannot import, with the reason: no converter, or the converter failed."""
    supported = supported_op_types()
    fallback = {}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            fallback[node.name] = f"operator domain '{node.domain}' is not supported by TVM"
        elif node.op_type not in supported:
            fallback[node.name] = f"TVM's ONNX frontend has no converter for {node.op_type}"
    # Whether TVM imports a node depends on shapes, not on the weights' values: the check
    # imports a copy whose large weights are graph inputs (VGG-19: 6 s less a compile).
    light = without_heavy_weights(model)
    for _ in range(MAX_FALLBACK_ROUNDS):
        failed = None
        for seg in delegate.partition(light, set(fallback)):
            if seg.backend != delegate.TVM:
                continue
            try:
                import_onnx(seg.model, {}, dtypes(seg.model))
            except NodeImportError as e:
                failed = (seg, e)
                break
        if failed is None:
            return fallback
        seg, error = failed
        if error.node in seg.nodes:
            fallback[error.node] = f"TVM import failed: {error.reason}"
        else:  # the whole segment failed without naming a node
            for name in seg.nodes:
                fallback[name] = f"TVM import of its segment failed: {error.reason}"
        report(0.1, f"falling back: {len(fallback)} nodes")
    raise UnsupportedModelError("too many nodes fail to import into TVM one after another")


def simplified_origin(original, model) -> dict[str, list[str]]:
    """Nodes the simplifier made (e.g. Conv + BatchNormalization -> Conv) -> the model's
    nodes they replace: the producers of the same output tensors, and behind them the
    producers of tensors that no longer exist (fused away)."""
    names = {n.name for n in original.graph.node}
    nodes = {n.name: n for n in original.graph.node}
    producer = {o: n.name for n in original.graph.node for o in n.output if o}
    kept = {t for n in model.graph.node for t in (*n.input, *n.output)}
    origin = {}
    for node in model.graph.node:
        if node.name in names:
            continue
        found = [producer[o] for o in node.output if o in producer]
        # onnxslim names a node it made after the tensor it replaces ("mq_pre_reshape").
        parts = node.name.split("_")
        prefixes = ("_".join(parts[:k]) for k in range(len(parts), 0, -1))
        found = found or [producer[p] for p in prefixes if p in producer][:1]
        todo = list(found)
        while todo:
            for tensor in nodes[todo.pop()].input:
                source = producer.get(tensor)
                if (
                    source is not None
                    and tensor not in kept
                    and source not in found
                    and nodes[source].op_type not in _CONSTANT_OPS
                ):
                    found.append(source)
                    todo.append(source)
        if found:
            origin[node.name] = sorted(found, key=list(nodes).index)
    return origin


def input_specs(model, model_inputs) -> list[dict]:
    """Name, shape and numpy dtype of every model input; an integer input also has the
    exclusive bound ``high`` of valid generated values (the size of the table it indexes,
    as the accuracy stage draws them), so example inputs never index out of range."""
    bounds = index_bounds(model)
    specs = []
    for v in model_inputs(model):
        spec = {"name": v.name, "shape": list(type_spec(v.type)[0] or []), "dtype": _np_dtype(v)}
        if np.issubdtype(np.dtype(spec["dtype"]), np.integer):
            spec["high"] = int(bounds.get(v.name, DEFAULT_INT_HIGH))
        specs.append(spec)
    return specs


def dtypes(model: onnx.ModelProto) -> dict[str, str]:
    """Numpy dtype name of every graph input (float32 where the type is unset)."""
    return {v.name: _np_dtype(v) for v in model.graph.input}


def _np_dtype(value: onnx.ValueInfoProto) -> str:
    elem = value.type.tensor_type.elem_type
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)).name if elem else "float32"
