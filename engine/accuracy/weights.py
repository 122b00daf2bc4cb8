"""Weight surgery on model copies, to check the checker.

``perturb_weight`` makes the deliberately broken candidate: one weight (an initializer,
or the fill value of the ConstantOfShape node that produces it, as in onnx's light
models) scaled in a copy of the model. The accuracy check must fail it and name the
layer that reads the weight as the first divergent one.

``randomize_fills`` turns the light models' constant fills into He-initialised random
weights (BatchNorm statistics near identity), so their fp16 error can be measured on
activations of a realistic scale instead of the constant-weight blow-up.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from engine.errors import EngineError


def perturb_weight(
    model: onnx.ModelProto, name: str, *, factor: float = 1.5, element: int | None = None
) -> onnx.ModelProto:
    """Return a copy of ``model`` with weight ``name`` multiplied by ``factor``.

    ``name`` is an initializer (``element``: only that flat index changes) or the output
    of a Constant / ConstantOfShape node (its value is scaled). Raises
    :class:`EngineError` when no weight has that name.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    for tensor in graph.initializer:
        if tensor.name == name:
            values = numpy_helper.to_array(tensor).copy()
            if element is None:
                values = values * np.asarray(factor, values.dtype)
            else:
                values.flat[element] *= factor
            tensor.CopyFrom(numpy_helper.from_array(values, name))
            return copy
    for node in graph.node:
        if name in node.output and node.op_type in ("Constant", "ConstantOfShape"):
            attr = next((a for a in node.attribute if a.name == "value"), None)
            if attr is None:
                break
            values = numpy_helper.to_array(attr.t)
            scaled = (values * factor).astype(values.dtype)
            attr.t.CopyFrom(numpy_helper.from_array(scaled, attr.t.name))
            return copy
    raise EngineError(f"no initializer or constant named '{name}' to perturb", code="usage")


def weight_fills(model: onnx.ModelProto) -> dict[str, tuple[onnx.NodeProto, tuple[int, ...]]]:
    """ConstantOfShape nodes whose shape is an initializer: ``{output: (node, shape)}``."""
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    fills = {}
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            fills[node.output[0]] = (node, tuple(int(d) for d in shapes[node.input[0]]))
    return fills


def randomize_fills(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Return a copy whose ConstantOfShape weights are random initializers.

    Conv / Gemm / MatMul weights: N(0, 2 / fan_in) (He); biases N(0, 0.01^2); BatchNorm
    scale U(0.8, 1.2), bias and mean N(0, 0.1^2), variance U(0.5, 1.5). Other fills keep
    their value (as an initializer).
    """
    rng = np.random.default_rng(seed)
    fills = weight_fills(model)
    role = _roles(model)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    kept = [n for n in graph.node if not (n.output and n.output[0] in fills)]
    del graph.node[:]
    graph.node.extend(kept)
    used = {i for n in kept for i in n.input}
    unused = [t for t in graph.initializer if t.name not in used]
    for tensor in unused:  # the fills' shape tensors
        graph.initializer.remove(tensor)
    dropped = {t.name for t in unused}
    inputs = [v for v in graph.input if v.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    for name, (node, shape) in fills.items():
        fill = numpy_helper.to_array(node.attribute[0].t).ravel()[0] if node.attribute else 0.0
        values = _random_weight(rng, role.get(name), shape, float(fill))
        graph.initializer.append(numpy_helper.from_array(values.astype(np.float32), name))
    # Before IR 4 every initializer had to be a graph input too; IR 4 came with opset 9,
    # the oldest the light models use, so raising it changes nothing else.
    copy.ir_version = max(copy.ir_version, 4)
    return copy


def _roles(model: onnx.ModelProto) -> dict[str, tuple[str, int, dict]]:
    roles = {}
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        for i, name in enumerate(node.input):
            roles.setdefault(name, (node.op_type, i, attrs))
    return roles


def _random_weight(rng, role, shape: tuple[int, ...], fill: float) -> np.ndarray:
    op, position, attrs = role or ("", -1, {})
    if op in ("Conv", "ConvTranspose", "Gemm", "MatMul") and position == 1 and len(shape) >= 2:
        if op == "Gemm":
            fan_in = shape[1] if attrs.get("transB") else shape[0]
        elif op == "MatMul":
            fan_in = shape[0]
        else:
            fan_in = math.prod(shape[1:])
        return rng.normal(0.0, math.sqrt(2.0 / max(fan_in, 1)), shape)
    if op in ("Conv", "ConvTranspose", "Gemm") and position == 2:
        return rng.normal(0.0, 0.01, shape)
    if op == "BatchNormalization" and position >= 1:
        if position == 1:
            return rng.uniform(0.8, 1.2, shape)
        if position == 4:
            return rng.uniform(0.5, 1.5, shape)
        return rng.normal(0.0, 0.1, shape)
    return np.full(shape, fill)
