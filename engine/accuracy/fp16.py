"""A real fp16 conversion of an ONNX model, with the nodes kept in fp32 listed.

What it does, in the manner of onnxconverter-common's ``convert_float_to_float16`` but
driven by each operator's schema instead of a fixed op list:

- the model's inputs and outputs stay float32; Casts convert at the edges;
- a node runs in fp16 when its float32 tensors are bound to type variables that allow
  ``tensor(float16)``; inputs that the schema fixes to ``tensor(float)`` (Resize's
  ``scales``) stay float32;
- nodes stay fp32, each listed with the reason: precision-sensitive ops
  (``DEFAULT_KEEP_FP32``: softmax, normalisations, mean/sum reductions, exp/log/pow, LRN),
  ops whose output type an attribute sets (Cast, Random*), control flow, other domains,
  and nodes whose tensor types shape inference could not tell;
- float32 weights that only fp16 nodes read become fp16 (values beyond +-65504 are
  clamped and counted); shared ones keep fp32 and get a Cast;
- a tensor read by name in fp32 (a graph output, a subgraph's outer-scope read) keeps its
  name in fp32: the fp16 producer writes ``<name>__fp16`` and a Cast restores ``<name>``.

Every other tensor keeps its name, so the converted model's intermediates line up with
the original's for layer-wise comparison.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from engine.graph.topology import outer_scope_inputs, sorted_model, subgraphs, unique_node_names

FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16
FP16_MAX = float(np.finfo(np.float16).max)

DEFAULT_KEEP_FP32 = frozenset(
    {
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "InstanceNormalization",
        "GroupNormalization",
        "LRN",
        "ReduceMean",
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "Exp",
        "Log",
        "Pow",
    }
)
"""Op types kept in fp32 by default: exponentials overflow fp16 (max 65504) and long
sums and normalisations lose its 11-bit mantissa."""

_TYPED_BY_ATTRIBUTE = frozenset(
    {
        "Cast",
        "EyeLike",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)
_CONSTANTS = frozenset({"Constant", "ConstantOfShape"})
_SHAPE_ONLY = frozenset({"Shape", "Size"})  # read any precision: only the shape matters
_DEFAULT_DOMAINS = ("", "ai.onnx")
_SUFFIX = {FLOAT16: "__fp16", FLOAT: "__fp32"}


@dataclass(frozen=True)
class KeptNode:
    """A node that carries float32 tensors and stays in fp32, and why."""

    node: str
    op_type: str
    reason: str

    def to_dict(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "reason": self.reason}


@dataclass
class Fp16Conversion:
    """The converted model and what the conversion did."""

    model: onnx.ModelProto
    converted_nodes: int
    kept: list[KeptNode] = field(default_factory=list)
    keep_op_types: list[str] = field(default_factory=list)
    casts: int = 0
    initializers_converted: int = 0
    clamped_values: int = 0

    def to_dict(self) -> dict:
        """Everything but the model itself."""
        return {
            "converted_nodes": self.converted_nodes,
            "kept_fp32": [k.to_dict() for k in self.kept],
            "keep_op_types": self.keep_op_types,
            "casts": self.casts,
            "initializers_converted": self.initializers_converted,
            "clamped_values": self.clamped_values,
        }


def convert_to_fp16(
    model: onnx.ModelProto,
    *,
    keep_op_types: Collection[str] = DEFAULT_KEEP_FP32,
    keep_nodes: Collection[str] = (),
) -> Fp16Conversion:
    """Return an fp16 copy of ``model`` (float32 in, float32 out) and its bookkeeping.

    ``keep_nodes`` names further nodes to keep in fp32 (names as in the analysis: given
    names, or ``<op_type>_<index>`` for unnamed nodes). The input model is not changed.
    """
    return _Converter(model, frozenset(keep_op_types), frozenset(keep_nodes)).run()


class _Converter:
    def __init__(self, model: onnx.ModelProto, keep_ops: frozenset, keep_nodes: frozenset):
        ordered, _ = sorted_model(model)
        self.model = onnx.ModelProto()
        self.model.CopyFrom(ordered)
        self.graph = self.model.graph
        self.names = unique_node_names(self.graph.node)
        self.keep_ops, self.keep_nodes = keep_ops, keep_nodes
        self.opset = next(
            (o.version for o in self.model.opset_import if o.domain in _DEFAULT_DOMAINS), 1
        )
        self.types = _elem_types(self.model)
        self.taken = _all_names(self.graph)
        self.read = {o.name for o in self.graph.output}
        for node in self.graph.node:
            self.read |= set(node.input) | outer_scope_inputs(node)
        self.kept: list[KeptNode] = []
        self.casts = 0
        self.clamped = 0

    def run(self) -> Fp16Conversion:
        nodes = list(self.graph.node)
        plans = [self._plan(i, node) for i, node in enumerate(nodes)]
        pinned = {o.name for o in self.graph.output}
        for node in nodes:
            pinned |= outer_scope_inputs(node)
        initializers = self._convert_initializers(nodes, plans, pinned)
        # versions[t][precision] is the tensor name holding t at that precision.
        self.versions: dict[str, dict[int, str]] = {}
        for name, elem in self.types.items():
            if elem == FLOAT:
                self.versions[name] = {FLOAT: name}
        for name in initializers:
            self.versions[name] = {FLOAT16: name}
        self.emitted: list[onnx.NodeProto] = []
        converted = 0
        for node, plan in zip(nodes, plans, strict=True):
            if plan is None:
                self._emit_inputs(node, frozenset())
                self.emitted.append(node)
                continue
            fp16_in, fp16_out = plan
            converted += 1
            self._emit_inputs(node, fp16_in)
            if node.op_type in _CONSTANTS:
                self._constant_to_fp16(node)
            outputs = [(i, name) for i, name in enumerate(node.output) if i in fp16_out and name]
            for i, name in outputs:
                if name in pinned:
                    node.output[i] = self._fresh(name + _SUFFIX[FLOAT16])
                self.versions[name] = {FLOAT16: node.output[i]}
            self.emitted.append(node)
            for _, name in outputs:
                if name in pinned:
                    self._emit_cast(self.versions[name][FLOAT16], name, FLOAT)
                    self.versions[name][FLOAT] = name
        del self.graph.node[:]
        self.graph.node.extend(self.emitted)
        del self.graph.value_info[:]  # stale float32 annotations; runtimes re-infer
        self._retype_declared_inputs()
        return Fp16Conversion(
            model=self.model,
            converted_nodes=converted,
            kept=self.kept,
            keep_op_types=sorted(self.keep_ops),
            casts=self.casts,
            initializers_converted=len(initializers),
            clamped_values=self.clamped,
        )

    # -- deciding -------------------------------------------------------------------------

    def _plan(self, index: int, node: onnx.NodeProto) -> tuple[frozenset, frozenset] | None:
        """``(fp16 input positions, fp16 output positions)``, or ``None`` to keep fp32."""
        io = [*node.input, *node.output]
        touches_float = any(self.types.get(t) == FLOAT for t in io if t)
        if not touches_float:
            return None
        reason = self._keep_reason(index, node)
        if reason is None:
            positions = self._schema_positions(node)
            if isinstance(positions, str):
                reason = positions
            else:
                return positions
        self.kept.append(KeptNode(self.names[index], node.op_type, reason))
        return None

    def _keep_reason(self, index: int, node: onnx.NodeProto) -> str | None:
        if self.names[index] in self.keep_nodes:
            return "kept by request"
        if node.domain not in _DEFAULT_DOMAINS:
            return f"operator of domain '{node.domain}'"
        if node.op_type in self.keep_ops:
            return "precision-sensitive (exponent or long reduction)"
        if node.op_type in _TYPED_BY_ATTRIBUTE:
            return "its output type is set by an attribute"
        if subgraphs(node):
            return "control flow (subgraphs stay fp32)"
        unknown = [t for t in node.input if t and t not in self.types]
        unknown += [t for t in node.output if t in self.read and t not in self.types]
        if unknown:
            return "shape inference could not tell its tensor types"
        return None

    def _schema_positions(self, node: onnx.NodeProto) -> tuple[frozenset, frozenset] | str:
        if node.op_type in _CONSTANTS:
            kinds = {a.name for a in node.attribute}
            if kinds <= {"value", "value_float", "value_floats"}:
                return frozenset(), frozenset({0})
            return "a constant given as a sparse tensor"
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset, node.domain)
        except onnx.defs.SchemaError:
            return f"no schema for {node.op_type} at opset {self.opset}"
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        fp16_in = self._bound(node.input, schema.inputs, allowed)
        fp16_out = self._bound(node.output, schema.outputs, allowed)
        if isinstance(fp16_in, str) or isinstance(fp16_out, str):
            return fp16_in if isinstance(fp16_in, str) else fp16_out
        return fp16_in, fp16_out

    def _bound(self, names, formals, allowed) -> frozenset | str:
        """Positions of float32 tensors bound to a type variable that allows float16."""
        positions = set()
        for i, name in enumerate(names):
            if not name or self.types.get(name) != FLOAT or not formals:
                continue
            formal = formals[min(i, len(formals) - 1)]
            if formal.type_str not in allowed:
                continue  # fixed to tensor(float) by the schema
            if "tensor(float16)" not in allowed[formal.type_str]:
                return f"its schema allows no float16 for '{formal.type_str}'"
            positions.add(i)
        return frozenset(positions)

    def _convert_initializers(self, nodes, plans, pinned) -> set[str]:
        """Convert float32 initializers that only fp16 inputs read; return their names."""
        readers: dict[str, set[bool]] = {}
        for node, plan in zip(nodes, plans, strict=True):
            fp16_in = plan[0] if plan else frozenset()
            for i, name in enumerate(node.input):
                readers.setdefault(name, set()).add(i in fp16_in)
        converted = set()
        for tensor in self.graph.initializer:
            if tensor.data_type != FLOAT or tensor.name in pinned:
                continue
            if readers.get(tensor.name) != {True}:
                continue
            tensor.CopyFrom(self._to_fp16_tensor(tensor))
            converted.add(tensor.name)
        return converted

    # -- rewriting ------------------------------------------------------------------------

    def _emit_inputs(self, node: onnx.NodeProto, fp16_in: frozenset) -> None:
        for i, name in enumerate(node.input):
            if not name or name not in self.versions:
                continue
            if node.op_type in _SHAPE_ONLY:
                node.input[i] = next(iter(self.versions[name].values()))
                continue
            want = FLOAT16 if i in fp16_in else FLOAT
            node.input[i] = self._version(name, want)
        if subgraphs(node):
            for name in outer_scope_inputs(node):
                if name in self.versions:
                    self._version(name, FLOAT)  # pinned names already hold fp32

    def _version(self, name: str, want: int) -> str:
        have = self.versions[name]
        if want not in have:
            source = next(iter(have.values()))
            have[want] = self._emit_cast(source, self._fresh(name + _SUFFIX[want]), want)
        return have[want]

    def _emit_cast(self, source: str, target: str, to: int) -> str:
        self.casts += 1
        self.emitted.append(
            helper.make_node("Cast", [source], [target], name=f"{target}__cast", to=to)
        )
        return target

    def _fresh(self, name: str) -> str:
        candidate, k = name, 1
        while candidate in self.taken:
            candidate, k = f"{name}_{k}", k + 1
        self.taken.add(candidate)
        return candidate

    def _constant_to_fp16(self, node: onnx.NodeProto) -> None:
        if not node.attribute:  # ConstantOfShape without a value fills float32 zeros
            zero = numpy_helper.from_array(np.zeros(1, np.float16))
            node.attribute.append(helper.make_attribute("value", zero))
            return
        for attr in node.attribute:
            if attr.name == "value" and attr.t.data_type == FLOAT:
                attr.t.CopyFrom(self._to_fp16_tensor(attr.t))
            elif attr.name in ("value_float", "value_floats"):
                values = [attr.f] if attr.name == "value_float" else list(attr.floats)
                tensor = numpy_helper.from_array(np.asarray(values, np.float32))
                if attr.name == "value_float":
                    tensor.ClearField("dims")
                node.ClearField("attribute")
                node.attribute.append(helper.make_attribute("value", self._to_fp16_tensor(tensor)))
                return

    def _to_fp16_tensor(self, tensor: TensorProto) -> TensorProto:
        values = numpy_helper.to_array(tensor)
        beyond = np.abs(values) > FP16_MAX
        self.clamped += int(np.count_nonzero(beyond & np.isfinite(values)))
        halves = np.where(beyond & np.isfinite(values), np.sign(values) * FP16_MAX, values)
        return numpy_helper.from_array(halves.astype(np.float16), tensor.name)

    def _retype_declared_inputs(self) -> None:
        """Old models list weights as graph inputs; declare the ones now fp16 as such."""
        for value in self.graph.input:
            version = self.versions.get(value.name, {})
            if version.get(FLOAT16) == value.name and value.type.HasField("tensor_type"):
                value.type.tensor_type.elem_type = FLOAT16


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type per tensor name, from shape inference where it succeeds."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = model
    graph = inferred.graph
    types = {}
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            types[value.name] = value.type.tensor_type.elem_type
    for tensor in graph.initializer:
        types[tensor.name] = tensor.data_type
    return types


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    names |= {t.name for t in graph.initializer}
    for node in graph.node:
        names |= set(node.input) | set(node.output)
        names |= outer_scope_inputs(node)
    return names
