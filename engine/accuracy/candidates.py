"""What an accuracy check compares against the reference: the ``Candidate`` protocol.

A candidate computes the model: it takes the feeds and returns the graph outputs by
name, plus whichever intermediate tensors it was asked for and can expose. Builds that
keep the original tensor names (fp16, a simplified or otherwise optimized ONNX, a
partitioned execution at its cut tensors) expose intermediates and get layer-wise
localisation; a compiled build that fuses everything may expose none.

Candidates are made by name through a registry. Built in: ``ort`` (onnxruntime on the
original model: checks the comparison itself), ``fp16`` (a real fp16 conversion run by
onnxruntime), ``fp16-scaled`` (fp16 with GDPNPU power-of-two scaling, from
``fp16_variants``), ``simplified`` (the analyze stage's simplified model), ``reference``
(``onnx.reference``), and any ``.onnx`` path; :class:`OrtCandidate` wraps any other
``ModelProto``. The compile and partition stages plug in with :func:`register_candidate`,
or lazily by providing the factory named in ``PLUGINS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import onnx

from engine.accuracy.errors import CandidateError
from engine.accuracy.fp16 import convert_to_fp16
from engine.errors import EngineError, error_line
from engine.graph.loader import load_model


@runtime_checkable
class Candidate(Protocol):
    """Something that takes feeds and returns named outputs (and maybe intermediates)."""

    name: str

    def tensor_names(self) -> Collection[str]:
        """Intermediate tensors :meth:`run` can return on request (may be empty)."""
        ...

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        """Return the graph outputs by name plus the requested ``tensors`` it exposes.

        Raises :class:`CandidateError` when the build cannot run.
        """
        ...

    def describe(self) -> dict:
        """What the report shows about the candidate: at least ``name`` and ``kind``."""
        ...


# A candidate may also have ``prepare(feeds)``: build for these inputs' shapes before
# ``run`` (a compiler specializing to static shapes); ``run`` must not depend on it.


CandidateFactory = Callable[..., Candidate]
"""``factory(model: onnx.ModelProto, **options) -> Candidate``."""

_REGISTRY: dict[str, CandidateFactory] = {}

PLUGINS = {
    "tvm": "engine.fusion.candidate:tvm_candidate",
    "partitioned": "engine.partition.candidate:partitioned_candidate",
    "fp16-scaled": "engine.accuracy.fp16_variants:fp16_scaled_candidate",
}
"""Candidates whose factory lives in another stage's package, imported on first use."""

_OPTIMIZATION = {"none": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "all": "ORT_ENABLE_ALL"}

# Element types onnxruntime's Python binding cannot take from or give to numpy, by the
# type that holds each of their values exactly.
_NARROW = {
    onnx.TensorProto.FLOAT: (
        "BFLOAT16", "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ",
        "FLOAT8E8M0", "FLOAT4E2M1", "FLOAT6E2M3", "FLOAT6E3M2",
    ),
    onnx.TensorProto.INT8: ("INT4", "INT2"),
    onnx.TensorProto.UINT8: ("UINT4", "UINT2"),
}  # fmt: skip
_CARRIER = {
    getattr(onnx.TensorProto, name): wide
    for wide, names in _NARROW.items()
    for name in names
    if hasattr(onnx.TensorProto, name)
}


class OrtCandidate:
    """An ONNX model run by onnxruntime on the CPU; every node output can be exposed.

    Exposing a tensor adds it as a graph output on a copy of the model (one cached
    session per set of exposed tensors).
    """

    def __init__(
        self,
        model: onnx.ModelProto,
        *,
        name: str = "onnxruntime",
        kind: str = "onnxruntime",
        optimization: str = "all",
        threads: int = 0,
        details: Mapping[str, Any] | None = None,
    ):
        self.model = model
        self.name, self.kind = name, kind
        self.optimization, self.threads = optimization, threads
        self.details = dict(details or {})
        self.saturation: float | None = None  # the largest magnitude its format holds
        self._outputs = [o.name for o in model.graph.output]
        self._produced = [o for n in model.graph.node for o in n.output if o]
        self._sessions: dict[tuple[str, ...], Any] = {}
        self._narrow_inputs = _narrow(model.graph.input)
        self._narrow_outputs = _narrow(model.graph.output)

    def tensor_names(self) -> Collection[str]:
        return self._produced

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        known = set(self._produced) - set(self._outputs)
        extra = tuple(t for t in dict.fromkeys(tensors) if t in known)
        session = self._session(extra)
        wanted = {i.name for i in session.get_inputs()}
        feeds = {k: _carry(v, self._narrow_inputs.get(k)) for k, v in feeds.items() if k in wanted}
        try:
            values = session.run(None, feeds)
        except Exception as e:  # onnxruntime raises its own untyped errors
            raise CandidateError(
                f"{self.name}: onnxruntime failed to run: {error_line(e)}", stage="run"
            ) from e
        results = dict(zip([o.name for o in session.get_outputs()], values, strict=True))
        for name, elem in self._narrow_outputs.items():
            if isinstance(results.get(name), np.ndarray):
                results[name] = results[name].astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        return results

    def describe(self) -> dict:
        import onnxruntime as ort

        return {
            "name": self.name,
            "kind": self.kind,
            "runtime": f"onnxruntime {ort.__version__} CPU (optimization: {self.optimization})",
            **self.details,
        }

    def _session(self, extra: tuple[str, ...]):
        if extra not in self._sessions:
            import onnxruntime as ort

            model = self.model
            if extra or self._narrow_inputs or self._narrow_outputs:
                model = onnx.ModelProto()
                model.CopyFrom(self.model)
                model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in extra)
                _widen_interface(model.graph, self._narrow_inputs, self._narrow_outputs)
            options = ort.SessionOptions()
            options.log_severity_level = 4  # failures surface as CandidateError
            options.graph_optimization_level = getattr(
                ort.GraphOptimizationLevel, _OPTIMIZATION[self.optimization]
            )
            if self.threads:
                options.intra_op_num_threads = self.threads
            try:
                self._sessions[extra] = ort.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            except Exception as e:
                raise CandidateError(
                    f"{self.name}: onnxruntime cannot load the model: {error_line(e)}",
                    stage="import",
                ) from e
        return self._sessions[extra]


class ReferenceEvaluatorCandidate:
    """``onnx.reference.ReferenceEvaluator``: numpy, slow, written from the ONNX spec."""

    def __init__(self, model: onnx.ModelProto, *, name: str = "onnx.reference"):
        self.model, self.name = model, name
        self._outputs = [o.name for o in model.graph.output]
        self._produced = [o for n in model.graph.node for o in n.output if o]
        self._evaluator = None

    def tensor_names(self) -> Collection[str]:
        return self._produced

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        from onnx.reference import ReferenceEvaluator

        if self._evaluator is None:
            try:
                self._evaluator = ReferenceEvaluator(self.model)
            except Exception as e:  # unsupported op, bad attribute: whatever it raises
                raise CandidateError(f"{self.name}: {error_line(e)}", stage="import") from e
        try:
            wanted = set(self._evaluator.input_names)
            feeds = {k: v for k, v in feeds.items() if k in wanted}
            if not tensors:
                values = self._evaluator.run(None, feeds)
                return dict(zip(self._outputs, values, strict=True))
            results = self._evaluator.run(None, feeds, intermediate=True)
        except Exception as e:  # the evaluator raises whatever numpy or an op raises
            raise CandidateError(f"{self.name} failed: {error_line(e)}", stage="run") from e
        keep = set(tensors) | set(self._outputs)
        return {k: v for k, v in results.items() if k in keep}

    def describe(self) -> dict:
        return {"name": self.name, "kind": "onnx.reference", "runtime": f"onnx {onnx.__version__}"}


def ort_candidate(model: onnx.ModelProto, **options) -> OrtCandidate:
    """onnxruntime with all graph optimizations on the original model."""
    return OrtCandidate(model, name="ort", kind="onnxruntime", **options)


def fp16_candidate(model: onnx.ModelProto, **options) -> OrtCandidate:
    """The model converted to fp16 (:func:`convert_to_fp16`), run by onnxruntime.

    On the CPU onnxruntime computes ops without an fp16 kernel in fp32 between Casts it
    inserts itself, so the error measured is fp16 storage of weights and activations,
    plus fp16 arithmetic where a kernel exists.
    """
    keep = {k: options.pop(k) for k in ("keep_op_types", "keep_nodes") if k in options}
    conversion = convert_to_fp16(model, **keep)
    candidate = OrtCandidate(
        conversion.model, name="fp16", kind="fp16", details=conversion.to_dict(), **options
    )
    candidate.saturation = float(np.finfo(np.float16).max)
    return candidate


def reference_candidate(model: onnx.ModelProto, **_options) -> ReferenceEvaluatorCandidate:
    """``onnx.reference`` as the candidate: a second, independent implementation."""
    return ReferenceEvaluatorCandidate(model, name="reference")


def simplified_candidate(model: onnx.ModelProto, **options) -> OrtCandidate:
    """The model after the analyze stage's simplification (constant folding, shape-op
    elimination), run by onnxruntime; folded tensors simply have no counterpart."""
    try:
        from engine.graph.simplify import simplify_model
    except ImportError as e:
        raise CandidateError("candidate 'simplified' is not available in this installation") from e
    simplified = simplify_model(model)
    return OrtCandidate(
        simplified.model,
        name="simplified",
        kind="simplified",
        details={"simplification": simplified.report.to_dict()},
        **options,
    )


def register_candidate(name: str, factory: CandidateFactory) -> None:
    """Make ``factory`` available as candidate ``name`` (replacing an earlier one)."""
    _REGISTRY[name] = factory


def available_candidates() -> list[str]:
    """Names :func:`make_candidate` knows, besides ``.onnx`` paths."""
    return sorted(set(_REGISTRY) | set(PLUGINS))


def make_candidate(spec: str, model: onnx.ModelProto, **options) -> Candidate:
    """Build the candidate named ``spec`` for ``model``; a path ending in ``.onnx`` is
    another ONNX file presented as an optimized version of the same model.

    Raises :class:`CandidateError` for an unknown or not installed candidate.
    """
    if spec.endswith(".onnx"):
        path = Path(spec)
        try:
            other = load_model(path)
        except EngineError as e:
            raise CandidateError(f"candidate {path.name}: {e.message}", hint=e.hint) from e
        return OrtCandidate(other, name=path.name, kind="onnx-file", **options)
    factory = _REGISTRY.get(spec) or _plugin(spec)
    return factory(model, **options)


def _plugin(spec: str) -> CandidateFactory:
    if spec not in PLUGINS:
        raise CandidateError(
            f"unknown candidate '{spec}'",
            hint=f"Use one of {', '.join(available_candidates())} or a path to an .onnx file.",
        )
    module_name, _, attribute = PLUGINS[spec].partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise CandidateError(
            f"candidate '{spec}' is not available in this installation "
            f"({module_name}.{attribute} is missing)"
        ) from e
    register_candidate(spec, factory)
    return factory


def _narrow(values) -> dict[str, int]:
    """Interface tensors of an element type the binding cannot carry: name -> type."""
    found = {}
    for value in values:
        elem = value.type.tensor_type.elem_type if value.type.HasField("tensor_type") else 0
        if elem in _CARRIER:
            found[value.name] = elem
    return found


def _widen_interface(graph: onnx.GraphProto, inputs: dict, outputs: dict) -> None:
    """Carry narrow inputs and outputs in a wider type with exact Casts at the edges."""
    for value in graph.input:
        if value.name in inputs:
            inner = f"{value.name}__narrow"
            for node in graph.node:
                node.input[:] = [inner if i == value.name else i for i in node.input]
            graph.node.insert(
                0, onnx.helper.make_node("Cast", [value.name], [inner], to=inputs[value.name])
            )
            value.type.tensor_type.elem_type = _CARRIER[inputs[value.name]]
    for value in graph.output:
        if value.name in outputs:
            inner = f"{value.name}__narrow"
            for node in graph.node:
                node.output[:] = [inner if o == value.name else o for o in node.output]
                node.input[:] = [inner if i == value.name else i for i in node.input]
            graph.node.append(
                onnx.helper.make_node(
                    "Cast", [inner], [value.name], to=_CARRIER[outputs[value.name]]
                )
            )
            value.type.tensor_type.elem_type = _CARRIER[outputs[value.name]]


def _carry(array, elem: int | None):
    if elem is None:
        return array
    return np.asarray(array).astype(onnx.helper.tensor_dtype_to_np_dtype(_CARRIER[elem]))


register_candidate("ort", ort_candidate)
register_candidate("fp16", fp16_candidate)
register_candidate("reference", reference_candidate)
register_candidate("simplified", simplified_candidate)
