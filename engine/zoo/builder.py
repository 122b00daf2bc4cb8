"""A small graph builder for the zoo: seeded random weights and the usual layers.

Models are written as onnxruntime 1.31 reads them (IR version 10, opset 17). Weights
are drawn from one seeded ``numpy`` generator, so a builder called twice with the same
seed gives byte-identical models. With ``fill_weights=True`` every weight becomes a
``ConstantOfShape`` node instead (as in onnx's bundled light models): the file stays
tiny while shapes, parameter counts and MACs stay exact.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 10
_FILL_VALUE = 0.01


class ModelBuilder:
    """Collects nodes and weights; layer methods return the name of their output."""

    def __init__(self, name: str, seed: int = 0, *, fill_weights: bool = False):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.fill_weights = fill_weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._used: Counter[str] = Counter()
        self._scalars: dict[float, str] = {}

    def unique(self, prefix: str) -> str:
        self._used[prefix] += 1
        count = self._used[prefix]
        return prefix if count == 1 else f"{prefix}_{count - 1}"

    def input(self, name: str, shape: Sequence[int | str], dtype: int = TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        return name

    def const(self, prefix: str, value: np.ndarray) -> str:
        """A constant initializer (shapes, axes, scalars): never a filled weight."""
        name = self.unique(prefix)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def scalar(self, value: float) -> str:
        """A float32 scalar constant, shared by every node that uses the same value."""
        if value not in self._scalars:
            self._scalars[value] = self.const("scalar", np.array(value, np.float32))
        return self._scalars[value]

    def weight(self, prefix: str, shape: Sequence[int], std: float) -> str:
        """A float32 weight drawn from N(0, std^2), or a ConstantOfShape fill."""
        if self.fill_weights:
            shape_name = self.const(f"{prefix}_shape", np.array(shape, dtype=np.int64))
            fill = helper.make_tensor("value", TensorProto.FLOAT, [1], [_FILL_VALUE])
            return self.op("ConstantOfShape", [shape_name], name=f"{prefix}_fill", value=fill)
        array = (self.rng.standard_normal(shape) * std).astype(np.float32)
        return self.const(prefix, array)

    def uniform(self, prefix: str, shape: Sequence[int], low: float, high: float) -> str:
        if self.fill_weights:
            return self.weight(prefix, shape, 0.0)
        return self.const(prefix, self.rng.uniform(low, high, shape).astype(np.float32))

    def op(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        name: str | None = None,
        outputs: int = 1,
        domain: str = "",
        **attrs,
    ) -> str:
        """Add a node; returns its (first) output. Use :meth:`op_outputs` for several."""
        return self.op_outputs(op_type, inputs, name=name, outputs=outputs, domain=domain, **attrs)[
            0
        ]

    def op_outputs(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        name: str | None = None,
        outputs: int = 1,
        domain: str = "",
        **attrs,
    ) -> list[str]:
        node_name = self.unique(name or op_type.lower())
        names = [node_name if outputs == 1 else f"{node_name}_out{i}" for i in range(outputs)]
        self.nodes.append(
            helper.make_node(op_type, list(inputs), names, name=node_name, domain=domain, **attrs)
        )
        return names

    # Layers ------------------------------------------------------------------------------

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        group: int = 1,
        bias: bool = False,
        pad: int | None = None,
        name: str = "conv",
    ) -> str:
        """A square convolution, 'same' padding unless ``pad`` is given; He-normal weights."""
        fan_in = cin // group * kernel * kernel
        w = self.weight(f"{name}_w", (cout, cin // group, kernel, kernel), math.sqrt(2 / fan_in))
        inputs = [x, w]
        if bias:
            inputs.append(self.weight(f"{name}_b", (cout,), 0.01))
        pad = (kernel - 1) // 2 if pad is None else pad
        return self.op(
            "Conv",
            inputs,
            name=name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=group,
        )

    def batch_norm(self, x: str, channels: int, *, name: str = "bn") -> str:
        scale = self.uniform(f"{name}_scale", (channels,), 0.8, 1.2)
        shift = self.weight(f"{name}_bias", (channels,), 0.05)
        mean = self.weight(f"{name}_mean", (channels,), 0.05)
        var = self.uniform(f"{name}_var", (channels,), 0.5, 1.5)
        return self.op("BatchNormalization", [x, scale, shift, mean, var], name=name)

    def conv_bn(self, x: str, cin: int, cout: int, kernel: int, *, act: str | None, **kw) -> str:
        """Conv -> BatchNormalization -> activation (``relu``, ``relu6``, ``swish`` or None)."""
        name = kw.pop("name", "conv")
        y = self.batch_norm(
            self.conv(x, cin, cout, kernel, name=name, **kw), cout, name=f"{name}_bn"
        )
        return self.activation(y, act, name=f"{name}_act")

    def activation(self, x: str, act: str | None, *, name: str = "act") -> str:
        if act is None:
            return x
        if act == "relu":
            return self.op("Relu", [x], name=name)
        if act == "relu6":
            return self.op("Clip", [x, self.scalar(0.0), self.scalar(6.0)], name=name)
        if act == "swish":
            return self.op("Mul", [x, self.op("Sigmoid", [x], name=f"{name}_sigmoid")], name=name)
        if act == "gelu":
            return self.gelu(x, name=name)
        raise ValueError(f"unknown activation {act!r}")

    def gelu(self, x: str, *, name: str = "gelu") -> str:
        """GELU as exported at opset 17: 0.5 * x * (1 + erf(x / sqrt(2)))."""
        scaled = self.op("Div", [x, self.scalar(math.sqrt(2))], name=f"{name}_div")
        erf = self.op("Erf", [scaled], name=f"{name}_erf")
        gate = self.op("Add", [erf, self.scalar(1.0)], name=f"{name}_add")
        product = self.op("Mul", [x, gate], name=f"{name}_mul")
        return self.op("Mul", [product, self.scalar(0.5)], name=name)

    def linear(self, x: str, fan_in: int, fan_out: int, *, name: str = "linear") -> str:
        """MatMul + Add over the last axis, as torch exports ``nn.Linear`` on 3-D input."""
        w = self.weight(f"{name}_w", (fan_in, fan_out), 0.02)
        b = self.weight(f"{name}_b", (fan_out,), 0.02)
        return self.op("Add", [self.op("MatMul", [x, w], name=f"{name}_matmul"), b], name=name)

    def gemm(self, x: str, fan_in: int, fan_out: int, *, name: str = "fc") -> str:
        """A classifier layer on 2-D input: Gemm with transposed weight and bias."""
        w = self.weight(f"{name}_w", (fan_out, fan_in), math.sqrt(1 / fan_in))
        b = self.weight(f"{name}_b", (fan_out,), 0.01)
        return self.op("Gemm", [x, w, b], name=name, transB=1)

    def layer_norm(self, x: str, width: int, *, name: str = "ln") -> str:
        scale = self.uniform(f"{name}_scale", (width,), 0.9, 1.1)
        shift = self.weight(f"{name}_bias", (width,), 0.02)
        return self.op("LayerNormalization", [x, scale, shift], name=name, axis=-1, epsilon=1e-5)

    def classifier_head(self, x: str, channels: int, classes: int) -> str:
        """GlobalAveragePool -> Flatten -> Gemm."""
        pooled = self.op("GlobalAveragePool", [x], name="pool")
        return self.gemm(self.op("Flatten", [pooled], name="flatten"), channels, classes)

    def build(
        self, outputs: Sequence[str], *, output_dtype: int = TensorProto.FLOAT
    ) -> onnx.ModelProto:
        """The model, its outputs' shapes filled in by onnx shape inference."""
        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            [helper.make_tensor_value_info(o, output_dtype, None) for o in outputs],
            self.initializers,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="workbench-zoo",
        )
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        del model.graph.output[:]
        model.graph.output.extend(inferred.graph.output)
        onnx.checker.check_model(model, full_check=True)
        return model


def decompose_layer_norms(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose LayerNormalization nodes (last axis, with scale and bias)
    are written out as exporters below opset 17 write them (PyTorch's among them):
    ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add. For the ``layer-norm``
    fusion rule's benchmark: the same model in the form real exports arrive in."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes: list[onnx.NodeProto] = []
    extra: list[onnx.TensorProto] = []
    for node in out.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type != "LayerNormalization" or attrs.get("axis", -1) != -1 or len(node.input) < 3:  # fmt: skip
            nodes.append(node)
            continue
        x, scale, bias = node.input[:3]
        p = node.name

        def op(kind: str, inputs: list[str], suffix: str, p: str = p, **kw) -> str:
            name = f"{p}__{suffix}"
            nodes.append(helper.make_node(kind, inputs, [name], name=name, **kw))
            return name

        extra += [
            numpy_helper.from_array(np.array(2.0, np.float32), f"{p}__two"),
            numpy_helper.from_array(np.array(attrs.get("epsilon", 1e-5), np.float32), f"{p}__eps"),
        ]
        mean = op("ReduceMean", [x], "mean", axes=[-1])
        centred = op("Sub", [x, mean], "centred")
        var = op("ReduceMean", [op("Pow", [centred, f"{p}__two"], "square")], "var", axes=[-1])
        std = op("Sqrt", [op("Add", [var, f"{p}__eps"], "var_eps")], "std")
        scaled = op("Mul", [op("Div", [centred, std], "normed"), scale], "scaled")
        nodes.append(helper.make_node("Add", [scaled, bias], [node.output[0]], name=p))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(extra)
    return out
