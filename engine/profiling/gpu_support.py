"""Which ONNX nodes the TFLite GPU delegate runs, per graphics API.

The paper (Lee et al., arXiv:1907.01989; ``reference/papers/tflite_gpu.md``) ships two
backends, OpenGL ES 3.1 compute shaders on Android and Metal on iOS (L71, L111); OpenCL
is future work there (L462) and came later. The paper names ops but prints no op list, so
the per-API support below is read from the delegate's own kernel registries of 2020
(``SOURCES``); the paper's statements about ops are cited where it makes them. An ONNX
op maps to the delegate's operation type (``GPU_OP``) as TFLite's converters express it.

A node is delegated when its op maps, the chosen API has the kernel, the unit's
``supports`` list names it, its runtime tensors are float with known shapes of rank <= 4
(the paper's [B, H, W, C], L213) and the op's own constraints hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.graph.ir import Graph, Node
from engine.graph.tensors import is_floating
from engine.profiling.options import DEFAULT_GPU_API, GPU_APIS
from engine.targets.profile import Unit

APIS = GPU_APIS
DEFAULT_API = DEFAULT_GPU_API

SOURCES = {
    "opengl-es-3.1": "tensorflow/lite/delegates/gpu/gl/kernels/registry.cc (2020, 11c9c47)",
    "opencl": "tensorflow/lite/delegates/gpu/cl/selectors/operation_selector.cc (2020, 024a835)",
    "metal": "tensorflow/lite/delegates/gpu/metal/api.cc (2020, 00f0938)",
}
PAPER = "Lee et al. 2019, arXiv:1907.01989"

_ALL = frozenset(APIS)
_CL_METAL = frozenset({"opencl", "metal"})
# The delegate's operation types and the APIs with a kernel for them (SOURCES).
KERNELS: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        (
            "ADD", "CONCAT", "CONVOLUTION_2D", "CONVOLUTION_TRANSPOSED", "DEPTHWISE_CONVOLUTION",
            "FULLY_CONNECTED", "MEAN", "MUL", "PAD", "POOLING_2D", "PRELU", "RELU", "RESHAPE",
            "RESIZE", "SLICE", "SOFTMAX", "ABS", "COS", "DIV", "HARD_SWISH", "LOG", "MAXIMUM",
            "MINIMUM", "POW", "RSQRT", "SIGMOID", "SIN", "SQRT", "SQUARE", "SQUARED_DIFF",
            "SUB", "TANH",
        ),
        _ALL,
    ),
    **dict.fromkeys(("EXP", "ELU", "SPACE_TO_DEPTH"), _CL_METAL),
    "TRANSPOSE": frozenset({"opencl"}),  # Metal's api.cc rejects it explicitly
}  # fmt: skip

# ONNX op -> the delegate's operation type (None: a clean-up pass removes the node, L137).
GPU_OP: dict[str, str | None] = {
    "Conv": "CONVOLUTION_2D",  # DEPTHWISE_CONVOLUTION when group == input channels
    "ConvTranspose": "CONVOLUTION_TRANSPOSED",
    "Gemm": "FULLY_CONNECTED",
    "MatMul": "FULLY_CONNECTED",
    "Add": "ADD",
    "Sum": "ADD",
    "Mul": "MUL",
    "Sub": "SUB",
    "Div": "DIV",
    "Max": "MAXIMUM",
    "Min": "MINIMUM",
    "Pow": "POW",
    "Relu": "RELU",
    "Clip": "RELU",  # ReLU6 is a RELU with a clip
    "LeakyRelu": "RELU",  # a RELU with alpha
    "PRelu": "PRELU",
    "Sigmoid": "SIGMOID",
    "Tanh": "TANH",
    "HardSwish": "HARD_SWISH",
    "Elu": "ELU",
    "Exp": "EXP",
    "Log": "LOG",
    "Sqrt": "SQRT",
    "Abs": "ABS",
    "Sin": "SIN",
    "Cos": "COS",
    "Concat": "CONCAT",
    "Slice": "SLICE",
    "MaxPool": "POOLING_2D",
    "AveragePool": "POOLING_2D",
    "GlobalMaxPool": "POOLING_2D",  # a max pool whose window is the whole plane
    "GlobalAveragePool": "MEAN",
    "ReduceMean": "MEAN",
    "Softmax": "SOFTMAX",
    "Reshape": "RESHAPE",
    "Flatten": "RESHAPE",
    "Squeeze": "RESHAPE",
    "Unsqueeze": "RESHAPE",
    "Transpose": "TRANSPOSE",
    "Pad": "PAD",
    "Resize": "RESIZE",
    "Upsample": "RESIZE",
    "SpaceToDepth": "SPACE_TO_DEPTH",
    "Identity": None,
    "Dropout": None,
    # Inference batch norm is a per-channel MUL and ADD once converted; TFLite's converter
    # folds it into the convolution before it, as the fusion here does.
    "BatchNormalization": "MUL",
}
RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})

# What the paper itself says about an op, for the support table.
PAPER_NOTES = {
    "Conv": "conv_2d and depthwise_conv are ~90% of a CNN's work; their work groups are tuned (L282)",
    "Relu": "activations fuse into the convolution before them (L186)",
    "Sigmoid": "activations fuse into the convolution before them (L186)",
    "Pad": "a separate PAD is merged into the next op's padding (L136)",
    "Resize": "a RESIZE with scale 1 is removed (L137)",
    "Add": "a single-input ADD is removed (L137)",
    "Concat": "a single-input CONCAT is removed (L137)",
    "Reshape": "much more expensive on the GPU than on the CPU under PHWC4 (L455)",
    "Identity": "superfluous identity ops are removed at initialization (L137)",
    "LSTM": "LSTM and RNN support is future work (L462)",
}


@dataclass(frozen=True)
class Delegation:
    """Where one node runs: ``gpu``, ``cpu``, ``removed`` (a clean-up pass drops it),
    ``constant`` (computed at load time) or ``unknown`` (a shape is unknown; counted on
    the CPU). ``reason`` says why it is not on the GPU."""

    status: str
    gpu_op: str | None = None
    reason: str | None = None


def support_table() -> list[dict]:
    """One row per ONNX op the delegate maps: its operation type, per API whether a kernel
    exists, and where that comes from."""
    rows = []
    for op, gpu_op in sorted(GPU_OP.items()):
        apis = _ALL if gpu_op is None else KERNELS[gpu_op]
        rows.append(
            {
                "op_type": op,
                "gpu_op": gpu_op or "removed at clean-up",
                **{api: api in apis for api in APIS},
                "source": PAPER if gpu_op is None else "; ".join(SOURCES[a] for a in sorted(apis)),
                "paper": PAPER_NOTES.get(op),
            }
        )
    rows.append(
        {
            "op_type": "LSTM / GRU / RNN",
            "gpu_op": None,
            **dict.fromkeys(APIS, False),
            "source": PAPER,
            "paper": PAPER_NOTES["LSTM"],
        }
    )
    return rows


def delegate_node(
    node: Node, graph: Graph, api: str, unit: Unit, static: set[str], opset: int | None = None
) -> Delegation:
    """Whether ``node`` runs on ``unit`` through the delegate's ``api`` backend. ``static``
    holds the tensors known at load time (weights, folded constants); ``opset`` is the
    model's default-domain opset (None: 13 or later), for rules whose defaults changed."""
    if node.op_type not in GPU_OP:
        return Delegation("cpu", reason=f"the delegate has no kernel for {node.op_type}")
    gpu_op = GPU_OP[node.op_type]
    if gpu_op is None:
        return Delegation("removed", reason="removed at clean-up (L137)")
    if not unit.supports_op(node.op_type):
        return Delegation("cpu", gpu_op, f"not in unit '{unit.name}''s supports list")
    if node.op_type == "Conv" and _is_depthwise(node, graph):
        gpu_op = "DEPTHWISE_CONVOLUTION"
    if api not in KERNELS[gpu_op]:
        return Delegation("cpu", gpu_op, f"the {api} backend has no {gpu_op} kernel")
    for name in _runtime_tensors(node, static):
        tensor = graph.tensors[name]
        if tensor.static_shape is None:
            return Delegation("unknown", gpu_op, f"the shape of '{name}' is unknown")
        if len(tensor.static_shape) > 4:
            rank = len(tensor.static_shape)
            why = (
                f"'{name}' is {rank}-D; the delegate's tensors are at most 4-D [B, H, W, C] (L213)"
            )
            return Delegation("cpu", gpu_op, why)
        if not is_floating(tensor.dtype):
            return Delegation(
                "cpu", gpu_op, f"'{name}' is {tensor.dtype}; the delegate computes in FP16/FP32"
            )
    rule = _RULES.get(node.op_type)
    problem = rule(node, graph, static, opset) if rule else None
    if problem:
        return Delegation("cpu", gpu_op, problem)
    return Delegation("gpu", gpu_op)


def _runtime_tensors(node: Node, static: set[str]) -> list[str]:
    return [n for n in (*node.inputs, *node.outputs) if n and n not in static]


def _input_rank(node: Node, graph: Graph) -> int | None:
    shape = graph.tensors[node.inputs[0]].static_shape
    return None if shape is None else len(shape)


def _is_depthwise(node: Node, graph: Graph) -> bool:
    shape = graph.tensors[node.inputs[0]].static_shape
    group = node.attributes.get("group", 1)
    return shape is not None and len(shape) == 4 and group > 1 and group == shape[1]


def _conv_rule(node: Node, graph: Graph, static: set[str], opset: int | None) -> str | None:
    if _input_rank(node, graph) != 4:
        return "only 2-D convolutions (4-D tensors) have a kernel"
    group = node.attributes.get("group", 1)
    if group > 1 and (node.op_type == "ConvTranspose" or not _is_depthwise(node, graph)):
        return f"grouped {node.op_type} (group={group}) has no kernel; only depthwise Conv does"
    return None


def _weights_rule(node: Node, graph: Graph, static: set[str], opset: int | None) -> str | None:
    weights = graph.tensors[node.inputs[1]]
    if weights.name not in static:
        return "FULLY_CONNECTED takes constant weights; both operands are computed"
    if weights.static_shape is not None and len(weights.static_shape) != 2:
        return "FULLY_CONNECTED takes 2-D weights"
    if node.attributes.get("transA", 0):
        return "FULLY_CONNECTED takes no transposed input (transA=1)"
    return None


def _softmax_rule(node: Node, graph: Graph, static: set[str], opset: int | None) -> str | None:
    shape = graph.tensors[node.inputs[0]].static_shape or (1,)
    rank = len(shape)
    modern = opset is None or opset >= 13
    axis = (node.attributes.get("axis", -1 if modern else 1) + rank) % rank
    # Before opset 13 Softmax normalizes over every axis from ``axis`` on, flattened.
    reduced = {axis} if modern else set(range(axis, rank))
    channel = min(1, rank - 1)
    if channel not in reduced or any(shape[a] != 1 for a in reduced - {channel}):
        return "SOFTMAX runs over channels only (gl/kernels/softmax.cc, metal/api.cc)"
    return None


def _resize_rule(node: Node, graph: Graph, static: set[str], opset: int | None) -> str | None:
    mode = node.attributes.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear"):
        return f"RESIZE is bilinear or nearest, not {mode}"
    return None


_RULES: dict[str, Callable[[Node, Graph, set[str], int | None], str | None]] = {
    "Conv": _conv_rule,
    "ConvTranspose": _conv_rule,
    "Gemm": _weights_rule,
    "MatMul": _weights_rule,
    "Softmax": _softmax_rule,
    "Resize": _resize_rule,
    "Upsample": _resize_rule,
}
