"""Which operators may write their output over an input (in-place reuse).

An elementwise operator reads element ``i`` of its input only to write element ``i`` of its
output, so once that input dies at this operator the output can take its memory. View
operators (Reshape and kin) write the same bytes they read. TFLite's paper
(tflite_gpu, section 2.7) never shares an op's input with its output; this is our addition,
and it is off unless asked for.
"""

from __future__ import annotations

ELEMENTWISE_OPS = frozenset(
    {
        # unary
        "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BatchNormalization",
        "Cast", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Dropout", "Elu", "Erf", "Exp",
        "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log", "Mish",
        "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Shrink", "Sigmoid", "Sign",
        "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
        # broadcasting n-ary
        "Add", "And", "BitShift", "Div", "Max", "Mean", "Min", "Mod", "Mul", "Or", "PRelu",
        "Pow", "Sub", "Sum", "Where", "Xor",
    }
)  # fmt: skip
"""Ops whose output element ``i`` depends only on element ``i`` of each (broadcast) input."""

VIEW_OPS = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
"""Ops whose output holds exactly the input's bytes."""


def may_write_in_place(op_type: str, domain: str = "") -> bool:
    """True when the op's first output may overwrite a same-sized input that dies here."""
    return domain in ("", "ai.onnx") and (op_type in ELEMENTWISE_OPS or op_type in VIEW_OPS)
