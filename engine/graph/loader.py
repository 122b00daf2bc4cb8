"""Loading and validating ONNX files: the cheap checks the web upload runs.

External data is refused outright: a tensor's ``location`` is a path chosen by whoever
made the file, and the engine never opens it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from engine.errors import InvalidModelError, ModelLimitError, UnsupportedModelError
from engine.graph.tensors import TensorSpec, value_spec

ModelSource = str | os.PathLike | bytes | onnx.ModelProto
"""What the loaders accept: a path, the file's bytes, or a parsed model."""

DEFAULT_DOMAIN = "ai.onnx"
ONNXRUNTIME_DOMAINS = {"com.microsoft": 1, "com.microsoft.nchwc": 1}
"""Operator domains onnxruntime adds (contrib and NCHWc ops), newest version of each."""
_SAVE_HINT = "Save the model with its weights inside the .onnx file (save_as_external_data=False)."


@dataclass(frozen=True)
class ModelHeader:
    """What an upload shows before any analysis: format, producer and interface."""

    ir_version: int
    opsets: dict[str, int]
    producer: str
    graph_name: str
    node_count: int
    inputs: list[TensorSpec] = field(default_factory=list)
    outputs: list[TensorSpec] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "ir_version": self.ir_version,
            "opsets": dict(self.opsets),
            "producer": self.producer,
            "graph_name": self.graph_name,
            "node_count": self.node_count,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": [s.to_dict() for s in self.outputs],
        }


def check_node_limit(model: onnx.ModelProto, max_nodes: int) -> None:
    if len(model.graph.node) > max_nodes:
        raise ModelLimitError(
            f"the model has {len(model.graph.node)} nodes, more than the limit of {max_nodes}",
            hint="Simplify the model, or ask an administrator to raise the limit.",
        )


def load_model(source: ModelSource, *, max_bytes: int | None = None) -> onnx.ModelProto:
    """Parse ``source`` and refuse what the engine cannot safely use.

    A ``ModelProto`` is returned as is (not copied). Raises :class:`InvalidModelError`
    for unreadable, empty or non-ONNX input, a model without nodes, or tensors stored as
    external data; :class:`ModelLimitError` when larger than ``max_bytes``;
    :class:`UnsupportedModelError` for an operator domain neither onnx nor onnxruntime
    knows, or an opset newer than they know.
    """
    if isinstance(source, onnx.ModelProto):
        model = source
        if max_bytes is not None:  # ByteSize serializes: 2.3-2.7 s for VGG-19's 550 MB
            _check_size(model.ByteSize(), max_bytes)
    else:
        data = source if isinstance(source, bytes) else _read(Path(source), max_bytes)
        _check_size(len(data), max_bytes)
        model = _parse(data)
    _check_structure(model)
    _refuse_external_data(model)
    _check_opsets(model)
    return model


def check_model(model: onnx.ModelProto) -> None:
    """Run ``onnx.checker.check_model`` (no full check) and map its failure to ours."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "No Op registered for" in first:
            raise UnsupportedModelError(
                f"unsupported operator: {first}",
                hint="Export the model with standard ONNX operators and a released opset.",
            ) from e
        raise InvalidModelError(f"the ONNX checker rejected the model: {first}") from e


def model_header(model: onnx.ModelProto) -> ModelHeader:
    """Return the :class:`ModelHeader` of a loaded model (no validation)."""
    graph = model.graph
    producer = f"{model.producer_name} {model.producer_version}".strip()
    return ModelHeader(
        ir_version=model.ir_version,
        opsets=opsets(model),
        producer=producer,
        graph_name=graph.name,
        node_count=len(graph.node),
        inputs=[value_spec(v) for v in model_inputs(model)],
        outputs=[value_spec(v) for v in graph.output],
    )


def opsets(model: onnx.ModelProto) -> dict[str, int]:
    """Opset version per domain, the default domain shown as ``"ai.onnx"``."""
    return {(o.domain or DEFAULT_DOMAIN): o.version for o in model.opset_import}


def model_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The inputs a caller feeds: graph inputs that are neither initializers nor produced.

    Older exporters list weights as graph inputs (IR < 4), and the bundled light models
    list weights that ConstantOfShape nodes produce; neither is fed by the caller.
    """
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    fed = [v for v in graph.input if v.name not in initializers]
    if not fed:
        return fed
    # A slice of each node's outputs is one call; iterating them is one per name.
    produced = set(chain.from_iterable(node.output[:] for node in graph.node))
    return [v for v in fed if v.name not in produced]


def read_model_file(path: str | os.PathLike, max_bytes: int | None = None) -> bytes:
    """The bytes of a model file; a missing, empty or too large file is refused."""
    return _read(Path(path), max_bytes)


def _read(path: Path, max_bytes: int | None) -> bytes:
    try:
        size = path.stat().st_size
    except FileNotFoundError as e:
        raise InvalidModelError(f"model file not found: {path.name}") from e
    if not path.is_file():
        raise InvalidModelError(f"not a file: {path.name}")
    if size == 0:
        raise InvalidModelError("the model file is empty (0 bytes)", hint="Upload the file again.")
    _check_size(size, max_bytes)
    return path.read_bytes()


def _check_size(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise ModelLimitError(
            f"the model is {_mb(size)}, larger than the limit of {_mb(max_bytes)}",
            hint="Simplify or quantize the model, or ask an administrator to raise the limit.",
        )


def _mb(size: int) -> str:
    return f"{size / 1e6:.2f} MB"


def _parse(data: bytes) -> onnx.ModelProto:
    if not data:
        raise InvalidModelError("the model file is empty (0 bytes)", hint="Upload the file again.")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InvalidModelError(
            f"not an ONNX model: the file does not parse as an ONNX protobuf ({e})",
            hint="Upload a .onnx file as exported (e.g. torch.onnx.export), not a zip or text.",
        ) from e
    return model


def _check_structure(model: onnx.ModelProto) -> None:
    if not model.HasField("graph") or not model.graph.node:
        raise InvalidModelError(
            "not an ONNX model: no graph with at least one node "
            "(the file may be truncated or another format)"
        )
    if model.ir_version <= 0:
        raise InvalidModelError("not an ONNX model: missing IR version")


@functools.cache
def known_domains() -> dict[str, int]:
    """The newest opset version per operator domain that onnx and onnxruntime know."""
    newest: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        domain = schema.domain or DEFAULT_DOMAIN
        newest[domain] = max(newest.get(domain, 0), schema.since_version)
    newest[DEFAULT_DOMAIN] = onnx.defs.onnx_opset_version()
    newest[onnx.defs.ONNX_ML_DOMAIN] = onnx.defs.onnx_ml_opset_version()
    return newest | ONNXRUNTIME_DOMAINS


def _check_opsets(model: onnx.ModelProto) -> None:
    known = known_domains()
    for domain, version in opsets(model).items():
        if domain not in known:
            raise UnsupportedModelError(
                f"the model imports operator domain '{domain}' (version {version}), which "
                f"neither onnx nor onnxruntime knows (known: {', '.join(sorted(known))}); "
                "its operators can be neither checked nor analyzed",
                hint="Export without custom operators, or replace them with standard ONNX ops.",
            )
        if version > known[domain]:
            raise UnsupportedModelError(
                f"opset {version} of domain '{domain}' is newer than this installation "
                f"supports ({known[domain]})",
                hint=f"Export with opset {known[domain]} or lower.",
            )
    if model.ir_version > onnx.IR_VERSION:
        raise UnsupportedModelError(
            f"IR version {model.ir_version} is newer than this installation supports "
            f"({onnx.IR_VERSION})"
        )


def _refuse_external_data(model: onnx.ModelProto) -> None:
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.external_data:
            raise InvalidModelError(
                f"tensor '{tensor.name}' stores its data in an external file; "
                "external data is not supported in uploads",
                hint=_SAVE_HINT,
            )


def _all_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor held in a graph: initializers and attributes, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        attributes = node.attribute
        if not attributes:  # most nodes: skips creating an iterator
            continue
        for attr in attributes:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            for sub in attr.sparse_tensors:
                yield sub.values
                yield sub.indices
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub_graph in attr.graphs:
                yield from _all_tensors(sub_graph)
