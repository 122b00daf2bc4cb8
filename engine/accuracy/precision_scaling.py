"""Power-of-two precision scaling for fp16 (GDPNPU, thesis ch. 5, L1660-L1718).

fp16 holds at most 65504; a MatMul with large weights or a long sum overflows to inf
where fp32 did not. The thesis scales tensors by powers of two (only the exponent bits
change, so no mantissa precision is lost) and restores the result with one multiply:

- operators fall into the sensitivity classes of Table 5-2 (:data:`SENSITIVITY`);
  insensitive ones (memory ops, ops returning existing values) are skipped;
- the value range is propagated through the graph by simulation from calibration inputs;
- where a linear operator would overflow, a factor from formulas 5-1 to 5-6 is applied to
  its inputs and recorded; an operator feeding a non-linear one is not scaled, except
  before ``sqrt``, where ``sqrt(Sx) = sqrt(S) sqrt(x)``;
- the product of the recorded factors is undone by one fp32 multiply per graph output.

What differs here: the ranges are the calibration run's measured maxima (onnxruntime fp32
on the given inputs) rather than the thesis's image-range [0, 255]; a linear operator's
overflow test is its formula's worst-case bound on those ranges. Operators not in Table
5-2 that commute with a positive scale (Relu, Flatten, Gemm, Div, pooling...) are placed
in the nearest class, and any other operator is treated as non-linear: its inputs are
restored before it (an extra fp32 multiply the report lists), and it runs in fp32 when
the restored values exceed 65504. Formulas 5-4 to 5-6 bound a product of two operands of
range m by m^2; with two measured ranges this is m_a m_b, and the factor is split
between the operands so both keep the same headroom above fp16's smallest normal. The
inserted multiplies run in fp32 (the fp16 conversion keeps them), so a factor is applied
exactly and a restore cannot overflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from engine.graph.topology import sorted_model, subgraphs

FP16_MAX = float(np.finfo(np.float16).max)

MEMORY, SELECTION, LINEAR, NONLINEAR = "memory", "selection", "linear", "non-linear"

SENSITIVITY: dict[str, str] = {
    # Table 5-2, insensitive, memory ops (pad, split, concat, slice, expand, reshape,
    # transpose, resize) and, here, other pure data movement
    **dict.fromkeys(
        ["Pad", "Split", "Concat", "Slice", "Expand", "Reshape", "Transpose", "Resize"]
        + ["Flatten", "Squeeze", "Unsqueeze", "Identity", "Gather", "Tile"]
        + ["DepthToSpace", "SpaceToDepth", "Dropout", "Shape", "Size"],
        MEMORY,
    ),
    # insensitive, returns existing values (max_pool, compare ops, min, reduce_min, topk),
    # and, here, max / argmax and Relu (relu(Sx) = S relu(x) for S > 0)
    **dict.fromkeys(
        ["MaxPool", "GlobalMaxPool", "Greater", "Less", "Equal", "GreaterOrEqual"]
        + ["LessOrEqual", "Min", "Max", "ReduceMin", "ReduceMax", "TopK", "ArgMax"]
        + ["ArgMin", "Relu", "Where"],
        SELECTION,
    ),
    # sensitive, linear (add, mul, reduce_sum, reduce_mean, conv, matmul) and, here,
    # sub, div, neg, gemm, average pooling, variadic Sum (a reduce_sum over its K
    # inputs, formula 5-3) and inference batch norm (per-channel affine:
    # BN(Sx) = S BN(x) once its mean and bias carry S)
    **dict.fromkeys(
        ["Add", "Sub", "Mul", "Div", "Neg", "ReduceSum", "ReduceMean", "Conv", "MatMul"]
        + ["Gemm", "AveragePool", "GlobalAveragePool", "BatchNormalization", "Sum"],
        LINEAR,
    ),
    # sensitive, non-linear (exp, sin, tanh, softmax, log, sigmoid, sqrt, pow, abs)
    **dict.fromkeys(
        ["Exp", "Sin", "Tanh", "Softmax", "Log", "Sigmoid", "Sqrt", "Pow", "Abs"], NONLINEAR
    ),
}
"""Operator type -> sensitivity class; any other operator counts as non-linear."""

# Inputs that carry the data (and so the scale); the others are shapes, indices, axes.
_DATA_INPUTS = {"Pad": (0, 2), "Where": (1, 2), "Conv": (0, 1), "Gemm": (0, 1)}
_ALL_INPUTS = {"Concat", "Min", "Max", "Add", "Sub", "Mul", "Div", "MatMul", "Sum"}
_COMPARE = {"Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"}
_SUMS = {"ReduceSum"}
_MEANS = {"ReduceMean", "AveragePool", "GlobalAveragePool"}


def sensitivity(op_type: str) -> str:
    """The class of ``op_type`` (Table 5-2, extended as the module docstring says)."""
    return SENSITIVITY.get(op_type, NONLINEAR)


def rupw2(x: float) -> float:
    """Round ``x`` (> 0) up to a power of two: rupw2(3) = 4, rupw2(11) = 16, rupw2(0.3) = 0.5."""
    if not x > 0 or not math.isfinite(x):
        raise ValueError(f"rupw2 needs a finite positive number, got {x}")
    mantissa, exponent = math.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= mantissa < 1
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def scale_default(m: float) -> float:
    """Formula 5-1: S = 1 / rupw2(m)."""
    return 1.0 / rupw2(m)


def scale_add(m: float) -> float:
    """Formula 5-2 (add/sub): S = 1 / (2 rupw2(m))."""
    return 1.0 / (2 * rupw2(m))


def scale_reduce(m: float, k: int) -> float:
    """Formula 5-3 (reduce_sum/mean over K elements): S = 1 / (K rupw2(m))."""
    return 1.0 / (k * rupw2(m))


def scale_mul(m: float) -> float:
    """Formula 5-4 (mul): S = 1 / rupw2(m^2)."""
    return 1.0 / rupw2(m * m)


def scale_conv(m: float, k: int) -> float:
    """Formula 5-5 (conv with K kernel elements): S = 1 / (K rupw2(m^2))."""
    return 1.0 / (k * rupw2(m * m))


def scale_matmul(m: float, k: int) -> float:
    """Formula 5-6 (matmul M x K . K x N): S = 1 / (K rupw2(m^2))."""
    return 1.0 / (k * rupw2(m * m))


@dataclass(frozen=True)
class ScaleFactor:
    """One recorded decision: a factor applied to a node's inputs, or a restore."""

    node: str
    op_type: str
    kind: str  # "scale", "restore", "skipped" or "fp32" (a non-linear op kept in fp32)
    factor: float
    formula: str
    range_in: float  # m: the largest |input| the op sees (scaled), from the calibration run
    bound: float  # the formula's worst-case |output| before the factor
    tensors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "kind": self.kind,
            "factor": self.factor,
            "log2": round(math.log2(self.factor)) if self.factor > 0 else None,
            "formula": self.formula,
            "range_in": self.range_in,
            "bound": self.bound,
            "tensors": self.tensors,
        }


@dataclass
class ScalingPlan:
    """The rewritten fp32 model with scale multiplies, ready for fp16 conversion.

    ``scales[t]`` is the factor tensor ``t`` carries in the rewritten model (its values
    are ``scales[t]`` times the original's); ``stored`` maps each graph output to the
    tensor holding it before the restore; ``fp32_nodes`` are the inserted multiplies.
    """

    model: onnx.ModelProto
    factors: list[ScaleFactor]
    scales: dict[str, float]
    stored: dict[str, str]
    fp32_nodes: list[str]
    ranges: dict[str, float]
    calibration: str
    note: str | None = None

    @property
    def restores(self) -> int:
        return sum(1 for f in self.factors if f.kind == "restore")

    def to_dict(self) -> dict:
        return {
            "method": "power-of-two precision scaling (GDPNPU, thesis ch. 5)",
            "calibration": self.calibration,
            "factors": [f.to_dict() for f in self.factors],
            "scaled_nodes": sum(1 for f in self.factors if f.kind == "scale"),
            "restore_multiplies": self.restores,
            "scaled_tensors": sum(1 for s in self.scales.values() if s != 1.0),
            "note": self.note,
        }


def tensor_ranges(
    model: onnx.ModelProto, values: Mapping[str, np.ndarray]
) -> tuple[dict[str, float], dict[str, tuple]]:
    """The largest finite |value| and the shape of each float tensor: ``values`` from a
    calibration run (every tensor the fp32 model computes on the inputs) and the weights."""
    arrays = dict(values)
    for tensor in model.graph.initializer:
        arrays[tensor.name] = numpy_helper.to_array(tensor)
    ranges, shapes = {}, {}
    for name, value in arrays.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            finite = np.abs(value[np.isfinite(value)])
            ranges[name] = float(finite.max()) if finite.size else 0.0
            shapes[name] = value.shape
    return ranges, shapes


def plan_scaling(
    model: onnx.ModelProto,
    values: Mapping[str, np.ndarray],
    *,
    calibration: str = "given values",
    limit: float = FP16_MAX,
) -> ScalingPlan:
    """Choose and apply power-of-two factors so no linear op's worst case exceeds ``limit``.

    ``values`` are the tensors of an fp32 run on the calibration inputs (inputs included),
    by name; ``calibration`` says which inputs. The model is not changed.
    """
    ordered, _ = sorted_model(model)
    ranges, shapes = tensor_ranges(ordered, values)
    if any(subgraphs(node) for node in ordered.graph.node):
        # a subgraph reads outer tensors by name and would see them scaled
        return ScalingPlan(ordered, [], {}, {}, [], ranges, calibration, note=_CONTROL_FLOW)
    return _Rewriter(ordered, ranges, shapes, limit, calibration).run()


_CONTROL_FLOW = "not scaled: the model has control flow (If/Loop/Scan subgraphs)"


class _Rewriter:
    def __init__(self, model, ranges, shapes, limit, calibration):
        self.model = onnx.ModelProto()
        self.model.CopyFrom(model)
        self.graph = self.model.graph
        self.ranges, self.shapes, self.limit = ranges, shapes, limit
        self.calibration = calibration
        self.scales: dict[str, float] = {}
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.factors: list[ScaleFactor] = []
        self.fp32_nodes: list[str] = []
        self.emitted: list[onnx.NodeProto] = []
        self.counter = 0

    def run(self) -> ScalingPlan:
        for index, node in enumerate(list(self.graph.node)):
            if not node.name:
                node.name = f"{node.op_type}_{index}"
            self._visit(node)
            self.emitted.append(node)
        stored = self._restore_outputs()
        del self.graph.node[:]
        self.graph.node.extend(self.emitted)
        return ScalingPlan(
            model=self.model,
            factors=self.factors,
            scales={k: v for k, v in self.scales.items() if v != 1.0},
            stored=stored,
            fp32_nodes=self.fp32_nodes,
            ranges=self.ranges,
            calibration=self.calibration,
        )

    # -- per class ---------------------------------------------------------------------

    def _visit(self, node: onnx.NodeProto) -> None:
        cls = sensitivity(node.op_type)
        data = self._data_inputs(node)
        if cls != NONLINEAR and not data:  # integer arithmetic on shapes: nothing to scale
            self._set_outputs(node, 1.0)
        elif cls in (MEMORY, SELECTION):
            scale = self._align(node, data) if data else 1.0
            out_scale = 1.0 if node.op_type in _COMPARE else scale
            self._set_outputs(node, out_scale)
        elif cls == LINEAR:
            self._linear(node, data)
        else:
            self._nonlinear(node)

    def _linear(self, node: onnx.NodeProto, data: list[int]) -> None:
        op = node.op_type
        if op in ("Add", "Sub", "Sum"):
            s = self._align(node, data)
            m = max(self._range(node.input[i]) for i in data)
            k = len(data) if op == "Sum" else None
            bound = len(data) * m
        elif op in ("Mul", "Div"):
            a, b = (self._scale(node.input[i]) for i in (0, 1))
            s = a * b if op == "Mul" else a / b
            m = math.sqrt(self._range(node.input[0]) * self._range(node.input[1]))
            bound, k = m * m, None
            if op == "Div":
                bound = 0.0  # a quotient's bound is not a product's; never scaled here
        elif op in ("MatMul", "Gemm", "Conv"):
            s = self._scale(node.input[0]) * self._scale(node.input[1])
            k = self._inner(node)
            # m^2 of formulas 5-4 to 5-6 bounds |a b|; with two ranges it is m_a m_b
            m = math.sqrt(self._range(node.input[0]) * self._range(node.input[1]))
            bound = (k or 1) * m * m
        elif op == "BatchNormalization":
            s, m, k, bound = self._scale(node.input[0]), self._range(node.input[0]), None, 0.0
            for i in (2, 3):  # bias and mean are added to the scaled input: scale them too
                if len(node.input) > i and self._scale(node.input[i]) != s:
                    self._scale_input(node, i, s / self._scale(node.input[i]))
        else:  # Neg, reductions, average pooling
            s, m = self._scale(node.input[0]), self._range(node.input[0])
            k = self._reduced(node) if op in _SUMS else None
            bound = (k or 1) * m
        if bound > self.limit and self._feeds_nonlinear(node):
            self.factors.append(
                ScaleFactor(node.name, op, "skipped", 1.0, "feeds a non-linear operator", m, bound)
            )
        elif bound > self.limit:
            factor, formula = self._formula(op, m, k)
            self._apply(node, factor)
            s *= factor
            self.factors.append(
                ScaleFactor(node.name, op, "scale", factor, formula, m, bound, list(node.output))
            )
        self._fix_bias(node, s)
        self._set_outputs(node, s)

    def _nonlinear(self, node: onnx.NodeProto) -> None:
        if node.op_type == "Sqrt" and self._scale(node.input[0]) != 1.0:
            s = self._scale(node.input[0])
            if round(math.log2(s)) % 2:  # sqrt(S) must be a power of two as well
                self._restore_input(node, 0, 0.5, "sqrt needs an even power of two")
                s /= 2
            self._set_outputs(node, math.sqrt(s))
            return
        for i, name in enumerate(node.input):
            if name and self._scale(name) != 1.0:
                self._restore_input(node, i, 1.0 / self._scale(name), "restore before non-linear")
                true_range = self.ranges.get(name, 0.0)
                if true_range > self.limit:  # restored, it no longer fits fp16
                    self.fp32_nodes.append(node.name)
                    self.factors.append(
                        ScaleFactor(
                            node.name, node.op_type, "fp32",
                            1.0, "kept in fp32: its restored input exceeds 65504",
                            true_range, true_range,
                        )
                    )  # fmt: skip
        self._set_outputs(node, 1.0)

    # -- formulas ------------------------------------------------------------------------

    def _formula(self, op: str, m: float, k: int | None) -> tuple[float, str]:
        if op in ("Add", "Sub"):
            return scale_add(m), "5-2: 1/(2 rupw2(m))"
        if op == "Mul":
            return scale_mul(m), "5-4: 1/rupw2(m^2)"
        if op == "Conv":
            return scale_conv(m, k or 1), f"5-5: 1/(K rupw2(m^2)), K={k}"
        if op in ("MatMul", "Gemm"):
            return scale_matmul(m, k or 1), f"5-6: 1/(K rupw2(m^2)), K={k}"
        if (op in _SUMS or op == "Sum") and k:
            return scale_reduce(m, k), f"5-3: 1/(K rupw2(m)), K={k}"
        return scale_default(m), "5-1: 1/rupw2(m)"

    def _apply(self, node: onnx.NodeProto, factor: float) -> None:
        """Multiply the op's inputs so its output carries ``factor``: every addend by it;
        for a product, the two operands share it (both end with the same range)."""
        if node.op_type in ("Add", "Sub", "Sum"):
            for i in self._data_inputs(node):
                self._scale_input(node, i, factor)
            return
        if node.op_type in ("Mul", "MatMul", "Gemm", "Conv"):
            # both scaled operands end near sqrt(factor m_a m_b): the same headroom
            # above fp16's smallest normal for each, none left with the whole factor
            first, second = self._range(node.input[0]), self._range(node.input[1])
            if first > 0 and second > 0:
                target = math.sqrt(factor * first * second)
                part = 2.0 ** round(math.log2(target / first))
            else:
                part = factor
            self._scale_input(node, 0, part)
            if factor / part != 1.0:
                self._scale_input(node, 1, factor / part)
            return
        self._scale_input(node, 0, factor)

    def _fix_bias(self, node: onnx.NodeProto, s: float) -> None:
        """Conv's bias and Gemm's C are added to the product: give them its scale."""
        if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 and node.input[2]:
            have = self._scale(node.input[2])
            if have != s:
                self._scale_input(node, 2, s / have)

    # -- rewriting -------------------------------------------------------------------------

    def _align(self, node: onnx.NodeProto, data: list[int]) -> float:
        """Bring the data inputs to one common (the smallest) scale; return it."""
        scales = [self._scale(node.input[i]) for i in data if node.input[i]]
        target = min(scales) if scales else 1.0
        for i in data:
            if node.input[i] and self._scale(node.input[i]) != target:
                self._scale_input(node, i, target / self._scale(node.input[i]))
        return target

    def _scale_input(self, node: onnx.NodeProto, i: int, factor: float) -> None:
        """Make input ``i`` carry ``factor`` more: fold it into a weight, or insert a Mul."""
        name = node.input[i]
        new = self._fresh(f"{name}__x2e{round(math.log2(factor))}")
        if name in self.initializers:
            array = numpy_helper.to_array(self.initializers[name])
            tensor = numpy_helper.from_array((array * factor).astype(array.dtype), new)
            self.graph.initializer.append(tensor)
            self.initializers[new] = tensor
        else:
            self._emit_mul(name, factor, new)
        self.scales[new] = self._scale(name) * factor
        self.ranges[new] = self.ranges.get(name, 0.0)  # measured, unscaled, as for all
        self.shapes[new] = self.shapes.get(name, ())
        node.input[i] = new

    def _restore_input(self, node: onnx.NodeProto, i: int, factor: float, why: str) -> None:
        name = node.input[i]
        self._scale_input(node, i, factor)
        self.factors.append(
            ScaleFactor(node.name, node.op_type, "restore", factor, why, self._range(name), 0.0)
        )

    def _emit_mul(self, source: str, factor: float, target: str) -> None:
        const = self._fresh(f"{target}__factor")
        self.graph.initializer.append(numpy_helper.from_array(np.float32(factor), const))
        name = f"{target}__mul"
        self.emitted.append(helper.make_node("Mul", [source, const], [target], name=name))
        self.fp32_nodes.append(name)

    def _restore_outputs(self) -> dict[str, str]:
        """One fp32 multiply per scaled graph output (step 5 of the procedure)."""
        stored = {}
        for output in self.graph.output:
            s = self._scale(output.name)
            if s == 1.0:
                continue
            inner = self._fresh(f"{output.name}__scaled")
            for node in self.emitted:
                node.output[:] = [inner if o == output.name else o for o in node.output]
                node.input[:] = [inner if o == output.name else o for o in node.input]
            self.scales[inner], self.ranges[inner] = s, self.ranges.get(output.name, 0.0)
            self._emit_mul(inner, 1.0 / s, output.name)
            self.scales[output.name] = 1.0
            stored[output.name] = inner
            self.factors.append(
                ScaleFactor(
                    output.name, "output", "restore", 1.0 / s,
                    "one fp32 multiply by the reciprocal of the recorded factors",
                    self._range(inner), 0.0, [output.name],
                )
            )  # fmt: skip
        return stored

    # -- bookkeeping -------------------------------------------------------------------------

    def _data_inputs(self, node: onnx.NodeProto) -> list[int]:
        if node.op_type in _DATA_INPUTS:
            positions = _DATA_INPUTS[node.op_type]
        elif node.op_type in _ALL_INPUTS or node.op_type in _COMPARE:
            positions = range(len(node.input))
        else:
            positions = (0,)
        return [i for i in positions if i < len(node.input) and node.input[i] in self.ranges]

    def _set_outputs(self, node: onnx.NodeProto, s: float) -> None:
        for name in node.output:
            if name in self.ranges:
                self.scales[name] = s

    def _scale(self, name: str) -> float:
        return self.scales.get(name, 1.0)

    def _range(self, name: str) -> float:
        """|max| of ``name`` as the rewritten model holds it (measured x its scale)."""
        return self.ranges.get(name, 0.0) * self._scale(name)

    def _inner(self, node: onnx.NodeProto) -> int | None:
        """K: the reduced length of a MatMul/Gemm, the kernel elements of a Conv."""
        shape = self.shapes.get(node.input[1])
        if not shape:
            return None
        if node.op_type == "Conv":
            return int(np.prod(shape[1:]))
        if node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            return int(shape[1] if trans_b else shape[0])
        return int(shape[-2]) if len(shape) >= 2 else int(shape[0])

    def _reduced(self, node: onnx.NodeProto) -> int | None:
        shape_in, shape_out = self.shapes.get(node.input[0]), self.shapes.get(node.output[0])
        if shape_in is None or shape_out is None:
            return None
        return max(1, int(np.prod(shape_in)) // max(1, int(np.prod(shape_out))))

    def _feeds_nonlinear(self, node: onnx.NodeProto) -> bool:
        return any(
            sensitivity(c.op_type) == NONLINEAR and c.op_type != "Sqrt"
            for o in node.output
            for c in self.consumers.get(o, [])
        )

    def _fresh(self, name: str) -> str:
        self.counter += 1
        return f"{name}_{self.counter}"
