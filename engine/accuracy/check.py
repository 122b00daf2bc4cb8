"""The accuracy stage: does a candidate build still compute what the original model does?

The reference is onnxruntime in fp32 on the original model; ``onnx.reference`` checks
that reference on small models. Both sides get the same inputs (an uploaded ``.npz`` or
generated with a recorded seed). Each output is measured (max abs, mean/max relative,
cosine, SNR, top-1/top-5 for classifiers) and judged against thresholds; the shared
intermediate tensors locate the first layer where the candidate diverges. The verdict
fails when an output fails, and, with ``judge_layers``, when a layer fails although the
outputs agree: a saturating softmax or an argmax can hide a broken layer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from engine.accuracy.candidates import (
    Candidate,
    OrtCandidate,
    ReferenceEvaluatorCandidate,
    make_candidate,
)
from engine.accuracy.errors import CandidateError
from engine.accuracy.inputs import InputSet, generate_inputs, load_inputs_npz
from engine.accuracy.layers import (
    LayerComparison,
    compare_layers,
    first_divergent,
    model_layers,
    shared_layers,
)
from engine.accuracy.metrics import (
    TensorMetrics,
    Thresholds,
    compare_tensors,
    error_histogram,
    incomparable,
    json_number,
    judge,
)
from engine.errors import ProgressFn
from engine.graph.loader import ModelSource, load_model
from engine.graph.topology import sorted_model


@dataclass(frozen=True)
class AccuracyConfig:
    """Options of :func:`check_accuracy`.

    ``inputs`` is an ``.npz`` path; without it inputs are generated from ``seed`` and
    ``distribution`` (``input_shapes`` fixes symbolic dimensions). ``second_opinion``:
    ``"auto"`` runs ``onnx.reference`` on models of at most ``second_opinion_max_nodes``
    nodes, ``"always"`` or ``"never"``.
    """

    inputs: str | os.PathLike | None = None
    seed: int = 0
    distribution: str = "normal"
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    thresholds: Thresholds = field(default_factory=Thresholds)
    layers: bool = True
    judge_layers: bool = True
    second_opinion: str = "auto"
    second_opinion_max_nodes: int = 64
    threads: int = 0

    def __post_init__(self) -> None:
        if self.second_opinion not in ("auto", "always", "never"):
            raise ValueError(f"second_opinion must be auto, always or never: {self.second_opinion}")


@dataclass(frozen=True)
class OutputComparison:
    name: str
    metrics: TensorMetrics
    reasons: list[str]
    histogram: dict

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_dict(self) -> dict:
        m = self.metrics.to_dict()
        keys = ("max_abs", "mean_abs", "mean_rel", "max_rel", "cosine", "snr_db", "top1", "top5")
        return {
            "name": self.name,
            **{k: m[k] for k in keys},
            "elements": m["elements"],
            "nonfinite_mismatch": m["nonfinite_mismatch"],
            "passed": self.passed,
            "reasons": self.reasons,
            # why the pair could not be compared (its metrics are then the worst case)
            "error": m.get("error"),
        }


@dataclass
class AccuracyReport:
    """The verdict, per-output metrics, per-layer errors and how they were obtained."""

    verdict: str
    reason: str
    outputs: list[OutputComparison]
    layers: list[LayerComparison]
    first_divergent: LayerComparison | None
    inputs: InputSet
    thresholds: Thresholds
    candidate: dict
    reference: dict
    second_opinion: dict | None = None
    warnings: list[str] = field(default_factory=list)
    timing_s: dict[str, float] = field(default_factory=dict)
    fp16_variants: dict | None = None
    """Candidate ``fp16-scaled``: the three fp16 builds compared (``fp16_variants``)."""

    @property
    def first_divergent_node(self) -> str | None:
        return self.first_divergent.layer.node if self.first_divergent else None

    def to_dict(self) -> dict:
        first = self.first_divergent
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "outputs": [o.to_dict() for o in self.outputs],
            "first_divergent_node": self.first_divergent_node,
            "first_divergent": first.to_dict() | {"reasons": first.reasons} if first else None,
            "layers": [c.to_dict() for c in self.layers],
            "histograms": [{"output": o.name, **o.histogram} for o in self.outputs],
            "inputs": self.inputs.to_dict(),
            "thresholds": self.thresholds.to_dict(),
            "candidate": self.candidate,
            "reference": self.reference,
            "second_opinion": self.second_opinion,
            "warnings": self.warnings,
            "timing_s": {k: round(v, 4) for k, v in self.timing_s.items()},
            **({"fp16_variants": self.fp16_variants} if self.fp16_variants else {}),
        }


def check_accuracy(
    model: ModelSource,
    candidate: Candidate | str,
    config: AccuracyConfig = AccuracyConfig(),
    progress: ProgressFn | None = None,
) -> AccuracyReport:
    """Compare ``candidate`` (a :class:`Candidate` or a name for ``make_candidate``) with
    onnxruntime fp32 on ``model`` and return the verdict.

    Raises :class:`InvalidModelError` for a model that does not load,
    :class:`InputDataError` for inputs that do not fit, :class:`CandidateError` when the
    reference or the candidate cannot run.
    """
    report = progress or (lambda fraction, message: None)
    started = time.perf_counter()
    report(0.0, "loading the model")
    original, _ = sorted_model(load_model(model))
    inputs = _inputs(original, config)
    if isinstance(candidate, str):
        report(0.02, f"building candidate '{candidate}'")
        candidate = make_candidate(candidate, original, threads=config.threads)
    reference = OrtCandidate(
        original, name="reference", kind="reference", optimization="basic", threads=config.threads
    )
    outputs = [o.name for o in original.graph.output]
    layers = shared_layers(model_layers(original), candidate.tensor_names(), outputs)
    layers = layers if config.layers else []
    exposed = [layer.tensor for layer in layers]
    timing: dict[str, float] = {}

    report(0.1, "running the reference (onnxruntime fp32)")
    t0 = time.perf_counter()
    ref_values = reference.run(inputs.feeds, exposed)
    timing["reference"] = time.perf_counter() - t0
    report(0.4, f"running the candidate ({candidate.name})")
    t0 = time.perf_counter()
    cand_values = candidate.run(inputs.feeds, exposed)
    timing["candidate"] = time.perf_counter() - t0

    report(0.7, "comparing outputs")
    t0 = time.perf_counter()
    warnings: list[str] = []
    compared = _compare_outputs(outputs, ref_values, cand_values, config.thresholds, warnings)
    layer_results = compare_layers(
        layers,
        ref_values,
        cand_values,
        config.thresholds,
        lambda fraction, message: report(0.7 + 0.15 * fraction, message),
        saturation=getattr(candidate, "saturation", None),
    )
    if config.layers and all(layer.tensor in outputs for layer in layers):
        warnings.append(
            f"the candidate '{candidate.name}' exposes no intermediate tensor of the model; "
            "no layer-wise localisation"
        )
    timing["compare"] = time.perf_counter() - t0
    report(0.85, "second opinion (onnx.reference)")
    second = _second_opinion(original, inputs, ref_values, config, warnings)
    divergent = first_divergent(layer_results)
    verdict, reason = _verdict(compared, divergent, config.judge_layers)
    timing["total"] = time.perf_counter() - started
    report(1.0, f"verdict: {verdict}")
    return AccuracyReport(
        verdict=verdict,
        reason=reason,
        outputs=compared,
        layers=layer_results,
        first_divergent=divergent,
        inputs=inputs,
        thresholds=config.thresholds,
        candidate=candidate.describe(),
        reference=reference.describe(),
        second_opinion=second,
        warnings=warnings,
        timing_s=timing,
    )


def _inputs(model: onnx.ModelProto, config: AccuracyConfig) -> InputSet:
    if config.inputs is not None:
        return load_inputs_npz(config.inputs, model)
    return generate_inputs(
        model, config.seed, config.distribution, shapes=config.input_shapes or None
    )


def _compare_outputs(names, ref_values, cand_values, thresholds, warnings):
    compared = []
    for name in names:
        ref, cand = ref_values.get(name), cand_values.get(name)
        if not isinstance(ref, np.ndarray):
            warnings.append(f"output '{name}' is not a tensor ({type(ref).__name__}); skipped")
            continue
        if not isinstance(cand, np.ndarray):
            got = "nothing" if cand is None else type(cand).__name__
            metrics = incomparable(ref.size, f"the candidate returned {got} for output '{name}'")
            compared.append(OutputComparison(name, metrics, [metrics.error], _empty_histogram()))
            continue
        metrics = compare_tensors(ref, cand, rel_floor=thresholds.rel_floor)
        compared.append(
            OutputComparison(name, metrics, judge(metrics, thresholds), error_histogram(ref, cand))
        )
    return compared


def _verdict(outputs, divergent: LayerComparison | None, judge_layers: bool) -> tuple[str, str]:
    failing = [o for o in outputs if not o.passed]
    where = ""
    if divergent is not None:
        layer = divergent.layer
        where = (
            f"; first divergent layer: '{layer.node}' ({layer.op_type}, tensor "
            f"'{layer.tensor}': {', '.join(divergent.reasons)})"
        )
    if failing:
        detail = "; ".join(f"output '{o.name}': {', '.join(o.reasons)}" for o in failing)
        return "fail", detail + where
    if judge_layers and divergent is not None:
        return "fail", "the outputs agree but a layer diverges (the outputs hide it)" + where
    if not outputs:
        return "pass", "no tensor output to compare"
    worst = min(outputs, key=lambda o: o.metrics.snr_db)
    return "pass", (
        f"all {len(outputs)} outputs within the thresholds (lowest SNR "
        f"{worst.metrics.snr_db:.1f} dB on '{worst.name}', max abs error "
        f"{max(o.metrics.max_abs for o in outputs):.3g})"
    )


def _second_opinion(model, inputs, ref_values, config, warnings) -> dict | None:
    nodes = len(model.graph.node)
    if config.second_opinion == "never":
        return None
    if config.second_opinion == "auto" and nodes > config.second_opinion_max_nodes:
        return {
            "runtime": "onnx.reference",
            "skipped": f"{nodes} nodes, more than {config.second_opinion_max_nodes}",
        }
    try:
        values = ReferenceEvaluatorCandidate(model).run(inputs.feeds)
    except CandidateError as e:
        return {"runtime": "onnx.reference", "error": e.message}
    strict = Thresholds.strict()
    worst: TensorMetrics | None = None
    reasons = []
    for name, value in values.items():
        ref = ref_values.get(name)
        if not (isinstance(ref, np.ndarray) and isinstance(value, np.ndarray)):
            continue
        metrics = compare_tensors(value, ref, rel_floor=strict.rel_floor)
        reasons += [f"'{name}': {r}" for r in judge(metrics, strict)]
        if worst is None or metrics.snr_db < worst.snr_db:
            worst = metrics
    if reasons:
        warnings.append(
            "onnxruntime and onnx.reference disagree on the original model: " + "; ".join(reasons)
        )
    return {
        "runtime": "onnx.reference",
        "agrees": not reasons,
        "snr_db": json_number(worst.snr_db) if worst else None,
        "max_abs": json_number(worst.max_abs) if worst else None,
        "reasons": reasons,
    }


def _empty_histogram() -> dict:
    return {"edges": [], "counts": [], "zeros": 0}
