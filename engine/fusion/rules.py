"""Our fusion rules on top of TVM's FuseOps, as graph rewrites on the ONNX model.

Each rule is a function ``model -> (model, rewrites)`` registered by name in ``RULES``;
the planner applies them one at a time and keeps a rule only when the kernel count and
the estimated traffic after FuseOps do not grow (so the plan is never worse than
FuseOps alone).

- ``horizontal`` (Souffle, thesis ch.4 section 2.5, "horizontal transformation of
  independent TEs"; spatial reuse, section 2.2): MatMul / Gemm / Conv nodes that read
  the same activation with constant weights of the same reduction shape (BERT's Q, K, V
  projections; Inception's 1x1 branches) become one node over concatenated weights and
  one Slice per branch. The shared input is read once instead of n times, and n kernels become one.
  Souffle concatenates TEs with predicates; here the weights are concatenated at
  compile time, which needs no predicate because the outputs differ in one dimension.
- ``sink-reshape`` (epilogues into GEMM): a GEMM written as Reshape -> Gemm -> Reshape
  (BERT's FFN) ends its kernel at the trailing Reshape, so the GELU or residual Add after
  it runs as a kernel of its own, reading and writing the whole activation once more.
  Elementwise ops commute with a reshape: they move before it (scalar constants as they
  are, same-shaped operands through a reshape of their own, a view), FuseOps puts them into
  the GEMM's epilogue, and the reshape moves after them, where it is a view again.
- ``sum-to-add``: ONNX ``Sum`` imports as broadcast + stack + reduce, a reduction that
  FuseOps cannot put into the epilogue of the conv producing one of its inputs (the
  residual add of ResNet and DenseNet). A chain of ``Add`` is elementwise, so the add
  (and the ReLU after it) fuses into the conv kernel: "epilogues into conv/GEMM".
- ``layer-norm`` (reductions with their producers and consumers, Souffle's
  one-relies-on-many TEs): exporters below opset 17 (PyTorch's among them) write a layer
  normalization as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add. FuseOps
  cuts that chain at each reduction, into four kernels that read the activation four
  times; one LayerNormalization node imports as one fused reduction kernel, which reads
  it once for both moments. A model below opset 17 is converted to opset 17 first
  (``onnx.version_converter``); where that fails, the rule does not apply.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

Rewrite = dict
"""``{"rule", "nodes": [replaced names], "into": [new names], "origin"?: {new: [replaced]}}``"""
RuleFn = Callable[[onnx.ModelProto], tuple[onnx.ModelProto, list[Rewrite]]]


def sum_to_add(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Replace every ``Sum`` of two or more inputs by a chain of ``Add``."""
    out = _copy(model)
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
    _replace_nodes(out, nodes)
    return out, rewrites


def horizontal(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Merge MatMul/Gemm/Conv siblings reading one input with constant weights."""
    out = _copy(model)
    weights = {t.name: t for t in out.graph.initializer}
    groups: dict[tuple, list[onnx.NodeProto]] = defaultdict(list)
    for node in out.graph.node:
        key = _sibling_key(node, weights)
        if key is not None:
            groups[key].append(node)
    position = {n.name: i for i, n in enumerate(out.graph.node)}
    replace: dict[str, list[onnx.NodeProto]] = {}
    drop: set[str] = set()
    rewrites = []
    for key, members in groups.items():
        if len(members) < 2:
            continue
        members.sort(key=lambda n: position[n.name])
        merged, new_weights = _merge(key[0], members, weights, _opset(out))
        out.graph.initializer.extend(new_weights)
        # The merged node sits where the first sibling was, which every sibling follows.
        replace[members[0].name] = merged
        drop.update(n.name for n in members[1:])
        # The merged node computes every member; each slice computes one of them.
        origin = {merged[0].name: [n.name for n in members]}
        origin.update({sl.name: [m.name] for sl, m in zip(merged[1:], members, strict=True)})
        rewrites.append(
            {
                "rule": "horizontal",
                "nodes": [n.name for n in members],
                "into": [n.name for n in merged],
                "origin": origin,
            }
        )
    if not rewrites:
        return model, []
    nodes = []
    for node in out.graph.node:
        if node.name in replace:
            nodes.extend(replace[node.name])
        elif node.name not in drop:
            nodes.append(node)
    _replace_nodes(out, nodes)
    _drop_unused_initializers(out)
    return out, rewrites


_SINKABLE = frozenset(
    {
        "Abs", "Add", "Ceil", "Clip", "Cos", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu",
        "HardSigmoid", "HardSwish", "LeakyRelu", "Log", "Max", "Min", "Mul", "Neg", "Pow",
        "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Softplus",
        "Softsign", "Sqrt", "Sub", "Tanh",
    }
)  # fmt: skip
"""Elementwise ops whose result does not depend on the layout of their operands."""


def sink_reshape(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Move elementwise ops that follow a Reshape to before it (see the module doc)."""
    out = _copy(model)
    shapes = _static_shapes(out)
    weights = {t.name: t for t in out.graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in out.graph.node:
        for name in node.input:
            consumers[name].append(node)
    claimed: set[str] = set()
    plans = []
    for node in out.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        source, view = node.input[0], node.output[0]
        if shapes.get(source) is None or shapes.get(view) is None or source in weights:
            continue
        members = _sinkable_chain(out, view, shapes, weights, claimed)
        if members:
            claimed.update(m.name for m in members)
            plans.append((node, members))
    if not plans:
        return model, []
    outputs = {o.name for o in out.graph.output}
    before: dict[str, list[onnx.NodeProto]] = defaultdict(list)  # node -> nodes placed before
    after: dict[str, list[onnx.NodeProto]] = defaultdict(list)  # node -> nodes placed after
    renamed: dict[str, dict[str, str]] = {}  # member -> {old input: new input}
    new_outputs: dict[str, str] = {}
    rewrites = []
    for reshape, members in plans:
        source, view = reshape.input[0], reshape.output[0]
        inside = {m.name for m in members}
        produced = {o for m in members for o in m.output}
        target = _shape_constant(out, f"{reshape.name}__src_shape", shapes[source])
        into = []
        for m in members:
            mapping = {}
            for k, name in enumerate(m.input):
                if name == view:
                    mapping[name] = source
                elif name in produced:
                    mapping[name] = f"{name}__presink"
                elif name not in weights and shapes.get(name) == shapes[view]:
                    moved = f"{name}__sunk_{m.name}_{k}"
                    mapping[name] = moved
                    before[m.name].append(
                        helper.make_node(
                            "Reshape", [name, target], [moved], name=f"{m.name}__reshape_in{k}"
                        )
                    )
                    into.append(f"{m.name}__reshape_in{k}")
            renamed[m.name] = mapping
            for o in m.output:
                new_outputs[o] = f"{o}__presink"
                external = o in outputs or any(c.name not in inside for c in consumers[o])
                if external:
                    name = f"{o}__reshape"
                    after[m.name].append(
                        helper.make_node(
                            "Reshape", [f"{o}__presink", reshape.input[1]], [o], name=name
                        )
                    )
                    into.append(name)
        rewrites.append(
            {
                "rule": "sink-reshape",
                "nodes": [reshape.name, *inside],
                "into": into,
                "origin": {name: [reshape.name] for name in into},
            }
        )
    dead = {
        reshape.name
        for reshape, members in plans
        if reshape.output[0] not in outputs
        and all(c.name in {m.name for m in members} for c in consumers[reshape.output[0]])
    }
    nodes = []
    for node in out.graph.node:
        if node.name in dead:
            continue
        nodes.extend(before.get(node.name, []))
        if node.name in renamed:
            node = _clone(node)
            mapping = renamed[node.name]
            node.input[:] = [mapping.get(i, i) for i in node.input]
            node.output[:] = [new_outputs.get(o, o) for o in node.output]
        nodes.append(node)
        nodes.extend(after.get(node.name, []))
    _replace_nodes(out, nodes)
    del out.graph.value_info[:]  # shapes changed under the moved ops: inferred again
    return out, rewrites


def _sinkable_chain(model, view: str, shapes: dict, weights: dict, claimed: set) -> list:
    """Elementwise nodes that read only ``view``, each other, scalar constants or
    tensors shaped like ``view``, all of ``view``'s shape, in graph order."""
    members: list[onnx.NodeProto] = []
    inside = {view}
    for node in model.graph.node:
        if node.name in claimed or node.op_type not in _SINKABLE:
            continue
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            continue
        if not any(i in inside for i in node.input):
            continue
        if shapes.get(node.output[0]) != shapes[view]:
            continue
        ok = True
        for name in node.input:
            if not name or name in inside:
                continue
            weight = weights.get(name)
            if weight is not None and int(np.prod(weight.dims)) == 1:
                continue
            if weight is None and shapes.get(name) == shapes[view]:
                continue
            ok = False
            break
        if ok:
            members.append(node)
            inside.add(node.output[0])
    return members


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...] | None]:
    """Static shapes of every value shape inference knows (None when not static)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        dims = value.type.tensor_type.shape.dim
        static = all(d.HasField("dim_value") and d.dim_value > 0 for d in dims)
        shapes[value.name] = tuple(d.dim_value for d in dims) if static else None
    for t in model.graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _shape_constant(model: onnx.ModelProto, name: str, shape) -> str:
    if not any(t.name == name for t in model.graph.initializer):
        model.graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), name))
    return name


def layer_norm(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Rewrite]]:
    """Replace decomposed layer normalizations over the last axis by LayerNormalization."""
    if not _layer_norms(model):
        return model, []
    out = _copy(model)
    if _opset(out) < LAYER_NORM_OPSET:
        from onnx import version_converter

        try:
            out = version_converter.convert_version(out, LAYER_NORM_OPSET)
        except Exception as e:  # noqa: BLE001 - the converter raises its own errors
            raise RuleNotApplicable(
                f"the model is opset {_opset(model)} and onnx's version converter could "
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
    _replace_nodes(out, nodes)
    _drop_unused_initializers(out)
    del out.graph.value_info[:]
    return out, rewrites


class RuleNotApplicable(Exception):
    """A rule found its pattern but cannot rewrite this model; the message says why."""


LAYER_NORM_OPSET = 17


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
    inferred = onnx.shape_inference.infer_shapes(model)
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


RULES: dict[str, RuleFn] = {
    "horizontal": horizontal,
    "sink-reshape": sink_reshape,
    "sum-to-add": sum_to_add,
    "layer-norm": layer_norm,
}
"""Our rules in the order the planner tries them."""


def _sibling_key(node: onnx.NodeProto, weights: dict) -> tuple | None:
    """Nodes with equal keys may be merged: same op, input, weight layout, attributes."""
    if node.domain not in ("", "ai.onnx") or len(node.input) < 2 or len(node.output) != 1:
        return None
    w = weights.get(node.input[1])
    if w is None or w.data_type != onnx.TensorProto.FLOAT:
        return None
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is not None and bias not in weights:
        return None
    attrs = tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute))
    dims = tuple(w.dims)
    if node.op_type == "MatMul" and len(dims) == 2:
        return ("MatMul", node.input[0], dims[0], attrs, False)
    if node.op_type == "Gemm" and len(dims) == 2:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            return None
        k = dims[1] if a.get("transB", 0) else dims[0]
        if bias is not None and len(weights[bias].dims) > 1:
            return None  # a 2-D bias broadcasts over rows too: not a per-column bias
        return ("Gemm", node.input[0], k, attrs, bias is not None)
    if node.op_type == "Conv" and len(dims) >= 3:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        if a.get("group", 1) != 1 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            return None
        return ("Conv", node.input[0], dims[1:], attrs, bias is not None)
    return None


def _merge(op: str, members: list[onnx.NodeProto], weights: dict, opset: int):
    """One node over concatenated weights (and biases), then a Slice per original output."""
    first = members[0]
    base = f"hfuse_{first.name}"
    arrays = [numpy_helper.to_array(weights[n.input[1]]) for n in members]
    trans_b = op == "Gemm" and any(
        a.name == "transB" and helper.get_attribute_value(a) for a in first.attribute
    )
    axis = 1 if op == "MatMul" or (op == "Gemm" and not trans_b) else 0
    sizes = [a.shape[axis] for a in arrays]
    new = [numpy_helper.from_array(np.concatenate(arrays, axis=axis), f"{base}_weight")]
    inputs = [first.input[0], new[0].name]
    if len(first.input) > 2 and first.input[2]:
        biases = [numpy_helper.to_array(weights[n.input[2]]).reshape(-1) for n in members]
        biases = [np.broadcast_to(b, (s,)) for b, s in zip(biases, sizes, strict=True)]
        new.append(numpy_helper.from_array(np.concatenate(biases), f"{base}_bias"))
        inputs.append(new[1].name)
    merged_out = f"{base}_out"
    merged = helper.make_node(op, inputs, [merged_out], name=base)
    merged.attribute.extend(first.attribute)
    # Slices, not a Split: a slice is injective and FuseOps fuses it into whatever
    # reads that branch (reshape, transpose, bias), while a Split's tuple ends a kernel.
    axis_ = 1 if op == "Conv" else -1
    nodes = [merged]
    start = 0
    for k, (member, size) in enumerate(zip(members, sizes, strict=True)):
        name = f"{base}_slice{k}"
        bounds = (start, start + size)
        start += size
        if opset < 10:  # starts/ends were attributes before opset 10
            nodes.append(
                helper.make_node(
                    "Slice",
                    [merged_out],
                    [member.output[0]],
                    name=name,
                    axes=[axis_],
                    starts=[bounds[0]],
                    ends=[bounds[1]],
                )
            )
            continue
        consts = [
            numpy_helper.from_array(np.array([v], dtype=np.int64), f"{name}_{what}")
            for what, v in (("starts", bounds[0]), ("ends", bounds[1]), ("axes", axis_))
        ]
        new += consts
        nodes.append(
            helper.make_node(
                "Slice", [merged_out, *(c.name for c in consts)], [member.output[0]], name=name
            )
        )
    return nodes, new


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _replace_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    kept = [_clone(n) for n in nodes]
    del model.graph.node[:]
    model.graph.node.extend(kept)


def _clone(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    return copy


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    used = {i for n in model.graph.node for i in n.input}
    used |= {o.name for o in model.graph.output}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
