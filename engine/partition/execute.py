"""Run the sub-models of a plan in order with onnxruntime and check them against the whole
model: the partitioned model must compute the same outputs, within float tolerance.

On the worker every sub-model runs on its CPU, whatever unit the plan gave it: this checks
that the split is correct (boundary tensors, copied constants, order), not its speed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from engine.partition.export import SubModelSet

DEFAULT_RTOL = 1e-4
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True)
class OutputComparison:
    name: str
    max_abs: float
    max_rel: float
    match: bool

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "max_abs": self.max_abs,
            "max_rel": self.max_rel,
            "match": self.match,
        }


@dataclass(frozen=True)
class ExecutionCheck:
    """Outputs and boundary tensors of the chained sub-models against the whole model's."""

    outputs: tuple[OutputComparison, ...]
    boundaries: tuple[OutputComparison, ...]
    submodels: int
    whole_s: float
    partitioned_s: float

    @property
    def match(self) -> bool:
        return all(o.match for o in (*self.outputs, *self.boundaries))

    def to_dict(self) -> dict:
        worst = max(self.boundaries, key=lambda b: b.max_rel, default=None)
        return {
            "outputs_match": self.match,
            "outputs": [o.to_dict() for o in self.outputs],
            "boundary_tensors": len(self.boundaries),
            "boundaries_match": all(b.match for b in self.boundaries),
            "worst_boundary": None if worst is None else worst.to_dict(),
            "submodels": self.submodels,
            "whole_s": round(self.whole_s, 4),
            "partitioned_s": round(self.partitioned_s, 4),
        }


def run_submodels(subs: SubModelSet, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the sub-models in order, passing boundary tensors; return every tensor computed
    (boundary tensors and the model's outputs) by name."""
    values = dict(feeds)
    for sub in subs.submodels:
        session = _session(sub.model)
        results = session.run(list(sub.outputs), {name: values[name] for name in sub.inputs})
        values.update(zip(sub.outputs, results, strict=True))
    return values


def check_partitioned(
    model: onnx.ModelProto,
    subs: SubModelSet,
    feeds: dict[str, np.ndarray] | None = None,
    *,
    seed: int = 0,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
) -> ExecutionCheck:
    """Compare the chained sub-models with ``model`` on ``feeds`` (default: random inputs
    from the input specs with ``seed``): the model's outputs and every boundary tensor,
    which the whole model is made to output too (so a split that only gets a constant
    output right still fails). ``atol`` scales with each tensor's magnitude."""
    feeds = feeds if feeds is not None else random_inputs(model, subs.inputs, seed)
    boundaries = [t for sub in subs.submodels for t in sub.outputs if t not in subs.outputs]
    watched = list(subs.outputs) + list(dict.fromkeys(boundaries))
    started = time.perf_counter()
    whole = dict(
        zip(watched, _session(_with_outputs(model, subs, watched)).run(watched, feeds), strict=True)
    )
    middle = time.perf_counter()
    parts = run_submodels(subs, feeds)
    done = time.perf_counter()
    comparisons = tuple(_compare(name, whole[name], parts[name], rtol, atol) for name in watched)
    n = len(subs.outputs)
    return ExecutionCheck(
        comparisons[:n], comparisons[n:], len(subs.submodels), middle - started, done - middle
    )


def _compare(name: str, ref, got, rtol: float, atol: float) -> OutputComparison:
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        return OutputComparison(name, float("inf"), float("inf"), False)
    diff = np.abs(ref - got)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = max_abs / scale if scale else max_abs
    match = bool(np.allclose(got, ref, rtol=rtol, atol=atol * max(1.0, scale), equal_nan=True))
    return OutputComparison(name, max_abs, max_rel, match)


def _with_outputs(model: onnx.ModelProto, subs: SubModelSet, names: list[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also outputs the boundary tensors ``names``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    declared = {v.name for v in copy.graph.output}
    types = {v.name: v for sub in subs.submodels for v in sub.model.graph.output}
    copy.graph.output.extend(types[n] for n in names if n not in declared)
    return copy


def random_inputs(model: onnx.ModelProto, names, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs drawn from a standard normal (integers from 0..9); unknown dimensions are 1."""
    rng = np.random.default_rng(seed)
    specs = {v.name: v for v in model.graph.input}
    feeds = {}
    for name in names:
        tensor_type = specs[name].type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            feeds[name] = rng.integers(0, 10, shape).astype(dtype)
    return feeds


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
