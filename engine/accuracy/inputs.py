"""The inputs an accuracy check feeds: an uploaded ``.npz`` archive or generated ones.

Uploaded archives are opened with ``allow_pickle=False``: an array of Python objects is
a pickle, and a pickle is code, so it is refused, never loaded. Everything else wrong
with an upload (unreadable archive, missing or unknown names, wrong rank, size or dtype)
is an :class:`InputDataError` that names the input and what the model expects.

Generated inputs record their seed and distribution. Floating inputs follow the chosen
distribution; integer inputs are token ids in range: below the size of the table a
Gather indexes with them (the vocabulary of an embedding), else in ``[0, int_high)``.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from engine.accuracy.errors import InputDataError
from engine.graph.loader import ModelSource, load_model, model_inputs
from engine.graph.shapes import format_shape
from engine.graph.tensors import TensorSpec, value_spec

DISTRIBUTIONS = ("normal", "uniform")
"""``normal``: N(0, 1); ``uniform``: U[-1, 1). Both for floating inputs only."""

DEFAULT_MAX_BYTES = 2 << 30
DEFAULT_INT_HIGH = 2
"""Generated integer inputs that index no table are drawn from [0, 2): masks and type ids."""
_GATHER_OPS = frozenset({"Gather", "GatherElements", "GatherND"})
_UNSAFE = ("Object arrays", "pickled data", "allow_pickle")


@dataclass
class InputSet:
    """Named arrays to feed, and where they came from."""

    feeds: dict[str, np.ndarray]
    source: str
    seed: int | None = None
    distribution: str | None = None
    int_ranges: dict[str, list[int]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """``{"source", "seed", "distribution", "tensors": [{"name", "shape", "dtype"}]}``."""
        tensors = []
        for name, array in self.feeds.items():
            entry = {"name": name, "shape": list(array.shape), "dtype": array.dtype.name}
            if name in self.int_ranges:
                entry["range"] = self.int_ranges[name]
            tensors.append(entry)
        return {
            "source": self.source,
            "seed": self.seed,
            "distribution": self.distribution,
            "tensors": tensors,
        }


def load_inputs_npz(
    path: str | os.PathLike,
    model: ModelSource,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> InputSet:
    """Read an ``.npz`` archive and check it against the model's inputs.

    Every model input must be present with the declared rank, static dimensions and
    dtype (symbolic dimensions take any size, the same size wherever the same name
    appears); no other array may be present. Raises :class:`InputDataError`.
    """
    path = Path(path)
    specs = [value_spec(v) for v in model_inputs(load_model(model))]
    # checked from the headers before inflating; the arrays are what the headers declared
    arrays = _read_npz(path, max_bytes, specs)
    return InputSet(feeds=arrays, source=f"npz:{path.name}")


def describe_inputs_npz(
    path: str | os.PathLike,
    specs: list[TensorSpec],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[dict]:
    """Check an ``.npz`` against the model's input ``specs`` without holding its arrays:
    every member's header checked first (as :func:`load_inputs_npz` does), then every member
    inflated in chunks and dropped, so that a damaged archive is refused too. Returns
    ``[{"name", "shape", "dtype"}]``. A web process checks uploads with this: its memory
    stays a few MB whatever the archive holds."""
    path = Path(path)
    declared = _read_npz(path, max_bytes, specs, keep=False)
    return [
        {"name": name, "shape": list(d.shape), "dtype": d.dtype.name}
        for name, d in declared.items()
    ]


def check_feeds_against(
    arrays: Mapping[str, np.ndarray], specs: list[TensorSpec], *, where: str = "inputs"
) -> None:
    """Raise :class:`InputDataError` listing every way ``arrays`` (or what .npz headers
    declare) do not fit the model's input ``specs``."""
    expected = {s.name: s for s in specs}
    problems = [f"no array for input '{s.name}'" for s in specs if s.name not in arrays]
    problems += [f"array '{name}' is not a model input" for name in arrays if name not in expected]
    symbols: dict[str, tuple[int, str]] = {}
    for name, array in arrays.items():
        spec = expected.get(name)
        if spec is None:
            continue
        if array.dtype.name != spec.dtype:
            problems.append(f"input '{name}' has dtype {array.dtype.name}, expected {spec.dtype}")
        if spec.shape is None:
            continue
        shape = list(array.shape)
        fits = len(shape) == len(spec.shape) and all(
            not isinstance(d, int) or d <= 0 or d == n
            for d, n in zip(spec.shape, shape, strict=False)
        )
        if not fits:
            problems.append(
                f"input '{name}' has shape {format_shape(shape)}, "
                f"expected {format_shape(spec.shape)}"
            )
            continue
        for d, n in zip(spec.shape, shape, strict=True):
            if isinstance(d, str) and d != "?":
                seen = symbols.setdefault(d, (n, name))
                if seen[0] != n:
                    problems.append(
                        f"dimension '{d}' is {seen[0]} in '{seen[1]}' but {n} in '{name}'"
                    )
    if problems:
        wanted = ", ".join(f"{s.name}: {format_shape(s.shape)} {s.dtype}" for s in specs)
        raise InputDataError(
            f"{where} does not fit the model: {'; '.join(problems)}",
            hint=f"The model's inputs are {wanted or 'none'}.",
        )


def generate_inputs(
    model: ModelSource,
    seed: int = 0,
    distribution: str = "normal",
    *,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    int_high: int = DEFAULT_INT_HIGH,
) -> InputSet:
    """Draw one input per model input from ``numpy.random.default_rng(seed)``.

    Symbolic or unknown dimensions take their size from ``shapes`` or default to 1.
    Raises :class:`InputDataError` for an unknown distribution or an input type that
    cannot be generated (strings, sequences).
    """
    if distribution not in DISTRIBUTIONS:
        raise InputDataError(
            f"unknown distribution '{distribution}'",
            hint=f"Use one of: {', '.join(DISTRIBUTIONS)}.",
        )
    model = load_model(model)
    shapes = dict(shapes or {})
    rng = np.random.default_rng(seed)
    bounds = index_bounds(model)
    feeds, ranges = {}, {}
    for value in model_inputs(model):
        spec = value_spec(value)
        if not value.type.HasField("tensor_type"):
            raise InputDataError(f"input '{spec.name}' is a {spec.dtype}, not a tensor")
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        except (KeyError, TypeError, ValueError) as e:
            raise InputDataError(f"input '{spec.name}' has no numeric dtype") from e
        shape = shapes.get(spec.name) or tuple(
            d if isinstance(d, int) and d > 0 else 1 for d in (spec.shape or [])
        )
        if dtype.kind in "OSU":
            raise InputDataError(f"input '{spec.name}' holds strings, which cannot be generated")
        if dtype == np.bool_:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(bool)
        elif dtype.kind in "iu":
            high = bounds.get(spec.name, int_high)
            feeds[spec.name] = rng.integers(0, high, shape).astype(dtype)
            ranges[spec.name] = [0, int(high)]
        elif distribution == "normal":
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[spec.name] = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    return InputSet(feeds, "generated", seed, distribution, ranges)


def index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """Input name -> the size of the axis of a weight that a Gather indexes with it: the
    exclusive upper bound of valid generated values (token ids below the vocabulary)."""
    graph = model.graph
    dims = {t.name: list(t.dims) for t in graph.initializer}
    bounds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type not in _GATHER_OPS or len(node.input) < 2 or node.input[0] not in dims:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        table = dims[node.input[0]]
        if table and -len(table) <= axis < len(table):
            size = table[axis]
            name = node.input[1]
            bounds[name] = min(bounds.get(name, size), size)
    return bounds


@dataclass(frozen=True)
class _Declared:
    """An archive member as its .npy header declares it: what the checks read of an array,
    before a byte of it is inflated."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=object)) * self.dtype.itemsize


def _read_npz(path: Path, max_bytes: int, specs: list[TensorSpec], *, keep: bool = True) -> dict:
    """The archive's arrays (with ``keep=False``: what their headers declare, each member
    inflated in chunks and dropped). Every member is checked by name and by the shape and
    dtype its header declares (against ``max_bytes`` and the model's input ``specs``) before
    any member is inflated, so a small archive declaring huge arrays (a decompression bomb)
    costs a few KB of reading, not the arrays."""
    if not path.is_file():
        raise InputDataError(f"input file not found: {path.name}")
    with path.open("rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x80"):
        raise InputDataError(
            f"{path.name} is a Python pickle; pickles are never loaded",
            hint="Save the inputs with numpy.savez(path, name=array).",
        )
    if magic == b"\x93NUMPY":
        raise InputDataError(
            f"{path.name} is a single .npy array, not an .npz archive of named inputs",
            hint="Save the inputs with numpy.savez(path, name=array).",
        )
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if sum(m.file_size for m in members) > max_bytes:
                raise InputDataError(
                    f"{path.name} unpacks to more than {max_bytes / 1e9:.1f} GB",
                    hint="Upload fewer or smaller inputs.",
                )
            declared = {}
            for member in members:
                name = _array_name(path, member)
                declared[name] = _declared(path, archive, member)
            total = sum(d.nbytes for d in declared.values())
            if total > max_bytes:
                raise InputDataError(
                    f"{path.name} declares {total / 1e9:,.1f} GB of arrays, more than the "
                    f"{max_bytes / 1e9:.1f} GB an input upload may hold",
                    hint="Upload fewer or smaller inputs.",
                )
            check_feeds_against(declared, specs, where=path.name)
            if not keep:
                for member in members:
                    with archive.open(member) as f:
                        while f.read(1 << 20):  # inflated and CRC-checked, not kept
                            pass
                return declared
            arrays = {}
            for member in members:
                name = _array_name(path, member)
                with archive.open(member) as f:
                    arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
    except ValueError as e:
        if any(marker in str(e) for marker in _UNSAFE):
            raise _pickled(path) from e
        raise _unreadable(path, e) from e
    except InputDataError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile and zlib raise IndexError, zlib.error,
        # struct.error ... on damaged archives (tests/engine/test_ingestion_fuzz.py found
        # them): whatever the parser of a stranger's file raises, the file is unreadable
        raise _unreadable(path, e) from e
    return arrays


def _array_name(path: Path, member: zipfile.ZipInfo) -> str:
    if member.is_dir() or not member.filename.endswith(".npy"):
        raise InputDataError(
            f"{path.name} holds '{member.filename[:80]}', which is not an .npy array",
            hint="Write the archive with numpy.savez(path, name=array): nothing else in it.",
        )
    return member.filename[: -len(".npy")]


def _declared(path: Path, archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> _Declared:
    """The shape and dtype ``member``'s header declares, read without inflating the array;
    the member's size in the archive's directory must agree with them."""
    name = member.filename[: -len(".npy")]
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        readers = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }
        if version not in readers:
            raise ValueError(f".npy format version {version} (numpy.savez writes 1.0)")
        shape, _, dtype = readers[version](f, max_header_size=10_000)
        header_bytes = f.tell()
    if dtype.hasobject:
        raise _pickled(path)
    if dtype.kind not in "biufc":
        raise InputDataError(
            f"{path.name}: array '{name}' has dtype {dtype}, not a number or bool type",
            hint="Save plain numeric arrays.",
        )
    found = _Declared(tuple(int(d) for d in shape), dtype)
    if found.nbytes != member.file_size - header_bytes:
        raise InputDataError(
            f"{path.name}: array '{name}' declares shape {format_shape(list(found.shape))} "
            f"{dtype} ({found.nbytes:,} bytes) but the archive holds "
            f"{max(member.file_size - header_bytes, 0):,} bytes for it",
            hint="The archive is damaged or was not written by numpy; write it again with "
            "numpy.savez.",
        )
    return found


def _pickled(path: Path) -> InputDataError:
    return InputDataError(
        f"{path.name} holds a pickled Python object; pickles are never loaded",
        hint="Save plain numeric arrays: numpy.savez(path, name=array) "
        "with arrays of a numeric or bool dtype.",
    )


def _unreadable(path: Path, error: Exception) -> InputDataError:
    return InputDataError(
        f"{path.name} is not a readable .npz archive ({type(error).__name__}: {error})",
        hint="Write it with numpy.savez or numpy.savez_compressed and upload it again.",
    )
