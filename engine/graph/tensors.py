"""Tensor descriptions taken from ONNX type protos: dtype names, shapes, sizes in bytes."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import onnx

Dim = int | str
"""A dimension: a static size, a symbolic name, or ``"?"`` when unknown."""

UNKNOWN_DIM = "?"

# Sub-byte element types; every other numeric type's width comes from numpy.
_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4e2m1": 4, "int2": 2, "uint2": 2}
_RENAMED = {"float": "float32", "double": "float64"}
_FLOATING_PREFIXES = ("float", "bfloat")


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of a model input or output.

    ``shape`` is ``None`` when the rank is unknown; its entries are ints, symbolic dim
    names, or ``"?"``.
    """

    name: str
    shape: list[Dim] | None
    dtype: str

    def to_dict(self) -> dict:
        return asdict(self)


def dtype_name(elem_type: int) -> str:
    """Return a numpy-style name for an ONNX element type (``1`` -> ``"float32"``)."""
    if elem_type == onnx.TensorProto.UNDEFINED:
        return UNKNOWN_DIM
    try:
        name = onnx.TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return UNKNOWN_DIM
    return _RENAMED.get(name, name)


def dtype_bits(dtype: str) -> int | None:
    """Return the element width in bits, or ``None`` (strings, unknown types)."""
    return _BITS.get(dtype)


def is_floating(dtype: str) -> bool:
    """True for every floating-point element type (float32, float16, bfloat16, float8...)."""
    return dtype.startswith(_FLOATING_PREFIXES)


def _element_bits(elem_type: int) -> int | None:
    name = dtype_name(elem_type)
    if name in _SUB_BYTE_BITS:
        return _SUB_BYTE_BITS[name]
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, TypeError, ValueError):
        return None
    return None if np_dtype.kind in "OSU" else np_dtype.itemsize * 8


_BITS = {
    dtype_name(v): bits
    for v in onnx.TensorProto.DataType.values()
    if (bits := _element_bits(v)) is not None
}


def type_spec(type_proto: onnx.TypeProto) -> tuple[list[Dim] | None, str]:
    """Return ``(shape, dtype)`` for a type proto; non-tensor types have no shape."""
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return None, kind or UNKNOWN_DIM
    tensor_type = type_proto.tensor_type
    dtype = dtype_name(tensor_type.elem_type)
    if not tensor_type.HasField("shape"):
        return None, dtype
    return [_dim(d) for d in tensor_type.shape.dim], dtype


def _dim(dim: onnx.TensorShapeProto.Dimension) -> Dim:
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return dim.dim_value
    if which == "dim_param":
        return dim.dim_param
    return UNKNOWN_DIM


def value_spec(value_info: onnx.ValueInfoProto) -> TensorSpec:
    """Return the :class:`TensorSpec` of a graph input or output."""
    shape, dtype = type_spec(value_info.type)
    return TensorSpec(value_info.name, shape, dtype)


def static_shape(shape: list[Dim] | tuple[Dim, ...] | None) -> tuple[int, ...] | None:
    """Return the shape as ints if every dimension is known, else ``None``."""
    if shape is None:
        return None
    for d in shape:
        if not isinstance(d, int):
            return None
    return tuple(shape)


def tensor_bytes(shape: tuple[int, ...] | None, dtype: str) -> int | None:
    """Return the size in bytes of a tensor of static ``shape``, or ``None`` if unknown."""
    bits = dtype_bits(dtype)
    if shape is None or bits is None:
        return None
    return (math.prod(shape) * bits + 7) // 8
