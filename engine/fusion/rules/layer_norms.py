"""The fusion rule ``layer-norm`` (reductions with their producers and consumers, Souffle's
one-relies-on-many TEs): exporters below opset 17 (PyTorch's among them) write a layer
normalization as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add. FuseOps
cuts that chain at each reduction, into four kernels that read the activation four
times; one LayerNormalization node imports as one fused reduction kernel, which reads
it once for both moments. A model below opset 17 is converted to opset 17 first
(``onnx.version_converter``); where that fails, the rule does not apply.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.fusion.rules.graph_edits import (
    Rewrite,
    RuleNotApplicable,
    copy_model,
    drop_unused_initializers,
    opset_version,
    replace_nodes,
)
from engine.graph.shapes import infer_value_shapes

LAYER_NORM_OPSET = 17


def layer_norm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Replace decomposed layer normalizations over the last axis by LayerNormalization."""
    if not _layer_norms(model):
        return model, []
    out = copy_model(model)
    if opset_version(out) < LAYER_NORM_OPSET:
        from onnx import version_converter

        try:
            out = version_converter.convert_version(out, LAYER_NORM_OPSET)
        except Exception as e:  # noqa: BLE001 - the converter raises its own errors
            raise RuleNotApplicable(
                f"the model is opset {opset_version(model)} and onnx's version converter could "
                f"not bring it to {LAYER_NORM_OPSET}: {str(e).splitlines()[0][:200]}"
            ) from e
    matches = _layer_norms(out)
    if not matches:
        raise RuleNotApplicable("the opset conversion changed the pattern")
    replaced: dict[str, onnx.NodeProto] = {}  # the last node of a match -> its replacement
    dead: set[str] = set()
    rewrites = []
    for match in matches:
        x, eps, scale, bias, width, chain = match
        last = chain[-1]
        name = f"{chain[0].name}__layer_norm"
        if scale is None:
            scale = _add_initializer(out, f"{name}_scale", np.ones(width, np.float32))
        if bias is None:
            bias = _add_initializer(out, f"{name}_bias", np.zeros(width, np.float32))
        replaced[last.name] = helper.make_node(
            "LayerNormalization", [x, scale, bias], [last.output[0]], name=name,
            axis=-1, epsilon=eps,
        )  # fmt: skip
        dead.update(n.name for n in chain)
        rewrites.append({"rule": "layer-norm", "nodes": [n.name for n in chain], "into": [name]})
    nodes = []
    for node in out.graph.node:
        if node.name in replaced:
            nodes.append(replaced[node.name])
        elif node.name not in dead:
            nodes.append(node)
    replace_nodes(out, nodes)
    drop_unused_initializers(out)
    del out.graph.value_info[:]
    return out, rewrites


def _layer_norms(model: onnx.ModelProto) -> list[tuple]:
    """Decomposed layer norms over the last axis, as (input, epsilon, scale or None, bias
    or None, width, [nodes in order]); only chains whose intermediate values nothing else
    reads."""
    consts = _float_constants(model)
    types, shapes = _types_and_dims(model)
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in model.graph.node:
        for name in dict.fromkeys(node.input):  # Mul(d, d) reads d once
            consumers[name].append(node)
    outputs = {o.name for o in model.graph.output}

    def only(value: str, op: str) -> onnx.NodeProto | None:
        users = consumers.get(value, [])
        if value in outputs or len(users) != 1 or users[0].op_type != op:
            return None
        return users[0] if users[0].domain in ("", "ai.onnx") else None

    def other(node: onnx.NodeProto, value: str) -> str | None:
        rest = [i for i in node.input if i != value]
        return rest[0] if len(rest) == 1 else None

    found, claimed = [], set()
    for mean in model.graph.node:
        if mean.op_type != "ReduceMean" or mean.name in claimed:
            continue
        x = mean.input[0]
        shape = shapes.get(x)  # dims, None where unknown
        if not shape or not shape[-1] or types.get(x) != onnx.TensorProto.FLOAT:
            continue
        if not _last_axis(mean, shape, model):
            continue
        sub = only(mean.output[0], "Sub")
        if sub is None or list(sub.input) != [x, mean.output[0]]:
            continue
        centred = sub.output[0]
        users = consumers.get(centred, [])
        square = next((u for u in users if _is_square(u, centred, consts)), None)
        divide = next((u for u in users if u.op_type == "Div" and list(u.input) == [centred, u.input[1]]), None)  # fmt: skip
        if square is None or divide is None or len(users) != 2 or centred in outputs:
            continue
        var = only(square.output[0], "ReduceMean")
        if var is None or not _last_axis(var, shape, model):
            continue
        add_eps = only(var.output[0], "Add")
        eps_name = add_eps and other(add_eps, var.output[0])
        if eps_name is None or eps_name not in consts or consts[eps_name].size != 1:
            continue
        sqrt = only(add_eps.output[0], "Sqrt")
        if sqrt is None or divide.input[1] != sqrt.output[0] or len(consumers[sqrt.output[0]]) != 1:  # fmt: skip
            continue
        chain = [mean, sub, square, var, add_eps, sqrt, divide]
        scale = bias = None
        width = shape[-1]
        mul = only(divide.output[0], "Mul")
        gamma = mul and other(mul, divide.output[0])
        if gamma in consts and consts[gamma].shape == (width,) and consts[gamma].dtype == np.float32:  # fmt: skip
            chain.append(mul)
            scale = gamma
            add = only(mul.output[0], "Add")
            beta = add and other(add, mul.output[0])
            if beta in consts and consts[beta].shape == (width,) and consts[beta].dtype == np.float32:  # fmt: skip
                chain.append(add)
                bias = beta
        if {n.name for n in chain} & claimed or any(not n.name for n in chain):
            continue
        claimed.update(n.name for n in chain)
        found.append((x, float(consts[eps_name].reshape(-1)[0]), scale, bias, width, chain))
    return found


def _last_axis(node: onnx.NodeProto, shape: tuple[int, ...], model: onnx.ModelProto) -> bool:
    """A ReduceMean over the last axis only, keeping dims."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("keepdims", 1) != 1 or attrs.get("noop_with_empty_axes", 0):
        return False
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        weights = {t.name: t for t in model.graph.initializer}
        if node.input[1] not in weights:
            return False
        axes = numpy_helper.to_array(weights[node.input[1]]).reshape(-1).tolist()
    return axes is not None and [a % len(shape) for a in axes] == [len(shape) - 1]


def _is_square(node: onnx.NodeProto, value: str, consts: dict) -> bool:
    if node.op_type == "Mul":
        return list(node.input) == [value, value]
    if node.op_type == "Pow" and node.input[0] == value:
        exponent = consts.get(node.input[1])
        return exponent is not None and exponent.size == 1 and float(exponent.reshape(-1)[0]) == 2.0  # fmt: skip
    return False


def _float_constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and Constant-node values, as arrays."""
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    return values


def _types_and_dims(model: onnx.ModelProto) -> tuple[dict[str, int], dict[str, tuple]]:
    """Element type and dims (None where not static) of every value shape inference knows."""
    inferred = infer_value_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    dims = {
        v.name: tuple(
            d.dim_value if d.dim_value > 0 else None for d in v.type.tensor_type.shape.dim
        )
        for v in values
        if v.type.tensor_type.HasField("shape")
    }
    return types, dims


def _add_initializer(model: onnx.ModelProto, name: str, value: np.ndarray) -> str:
    model.graph.initializer.append(numpy_helper.from_array(value, name))
    return name
