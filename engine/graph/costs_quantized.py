"""Costs of quantized ops: integer convolutions and matrix products, (de)quantization.

Integer multiply-accumulates count as MACs exactly like float ones (2 ops each, reported
as FLOPs). The QLinear* ops requantize every output (scale multiply and zero-point add:
2 ops per element) and add their int32 bias (1 per element) when present.
``QuantizeLinear`` and ``DequantizeLinear`` cost 2 ops per element (scale, zero point);
``DynamicQuantizeLinear`` 4 (min/max over the input, then quantize).
"""

from __future__ import annotations

from engine.graph.costs import OpShapes, Work, conv_macs, register

_REQUANTIZE = 2


@register("ConvInteger")
def _conv_integer(s: OpShapes) -> Work | None:
    macs = conv_macs(s, weight_index=1)
    return None if macs is None else (macs, 2 * macs)


@register("QLinearConv")
def _qlinear_conv(s: OpShapes) -> Work | None:
    macs = conv_macs(s, weight_index=3)
    if macs is None:
        return None
    bias = s.out_elements if s.input(8) is not None else 0
    return macs, 2 * macs + bias + _REQUANTIZE * s.out_elements


def _matmul_macs(s: OpShapes, a_index: int) -> int | None:
    a = s.input(a_index)
    if not a or s.outputs[0] is None:
        return None
    return s.out_elements * a[-1]


@register("MatMulInteger")
def _matmul_integer(s: OpShapes) -> Work | None:
    macs = _matmul_macs(s, 0)
    return None if macs is None else (macs, 2 * macs)


@register("QLinearMatMul")
def _qlinear_matmul(s: OpShapes) -> Work | None:
    macs = _matmul_macs(s, 0)
    return None if macs is None else (macs, 2 * macs + _REQUANTIZE * s.out_elements)


@register("QuantizeLinear", "DequantizeLinear")
def _quantize(s: OpShapes) -> Work:
    return 0, 2 * s.out_elements


@register("DynamicQuantizeLinear")
def _dynamic_quantize(s: OpShapes) -> Work:
    return 0, 4 * s.out_elements
