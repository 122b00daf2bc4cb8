"""The three fp16 builds side by side: plain, keep-fp32, and power-of-two scaling.

GDPNPU (thesis ch. 5) answers fp16 overflow by scaling; today's ``fp16`` candidate
answers it by keeping sensitive ops in fp32 and clamping weights. This module builds the
scaled candidate (:func:`fp16_scaled_candidate`, registered as ``fp16-scaled``) and
compares all three with onnxruntime fp32 on the same inputs (:func:`compare_fp16_variants`),
counting the tensors each one overflows: every value is measured by onnxruntime on this
CPU, with each variant's intermediates exposed as extra graph outputs.

Why the intermediates: onnxruntime's CPU provider runs a chain of fp16 nodes that have no
fp16 kernel (MatMul, ReduceSum...) in fp32 and drops the Casts between them, so a graph
output can come out finite although the fp16 tensor before it, once materialised, is inf.
The comparison therefore judges the layers too, and counts overflow on the tensors as the
fp16 model stores them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import onnx

from engine.accuracy.candidates import OrtCandidate
from engine.accuracy.check import AccuracyConfig, check_accuracy
from engine.accuracy.fp16 import DEFAULT_KEEP_FP32, FP16_MAX, convert_to_fp16
from engine.accuracy.inputs import generate_inputs
from engine.accuracy.precision_scaling import ScalingPlan, plan_scaling
from engine.graph.topology import sorted_model

VARIANTS = ("fp16-plain", "fp16-keep-fp32", "fp16-scaled")


class ScaledCandidate(OrtCandidate):
    """The scaled fp16 model; exposed intermediates are divided by the factor they carry,
    so layer-wise comparison with the fp32 reference still lines up."""

    def __init__(self, model: onnx.ModelProto, plan: ScalingPlan, **options):
        super().__init__(model, **options)
        self.plan = plan

    def run(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str] = ()) -> dict:
        values = super().run(feeds, tensors)
        for name in tensors:
            scale = self.plan.scales.get(name)
            if scale and isinstance(values.get(name), np.ndarray):
                values[name] = values[name].astype(np.float32) / np.float32(scale)
        return values

    def run_stored(self, feeds: Mapping[str, np.ndarray], tensors: Collection[str]) -> dict:
        """The values as the fp16 model stores them (scaled), for the overflow count."""
        return super().run(feeds, tensors)


def calibration_values(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict:
    """Every tensor of ``model`` in onnxruntime fp32 on ``feeds`` (inputs included)."""
    reference = OrtCandidate(model, name="calibration", optimization="basic")
    return {**feeds, **reference.run(feeds, reference.tensor_names())}


def fp16_scaled_candidate(
    model: onnx.ModelProto,
    *,
    calibration: Mapping[str, np.ndarray] | None = None,
    calibration_source: str | None = None,
    **options,
) -> ScaledCandidate:
    """Scale (:func:`plan_scaling`) from ``calibration`` inputs, then convert to fp16 with
    no op kept in fp32 but the inserted multiplies; run by onnxruntime.

    Without ``calibration`` the inputs are generated (seed 0, normal).
    """
    model, _ = sorted_model(model)
    if calibration is None:
        generated = generate_inputs(model)
        calibration, calibration_source = generated.feeds, "generated inputs (seed 0, normal)"
    plan = plan_scaling(
        model,
        calibration_values(model, calibration),
        calibration=calibration_source or "given inputs",
    )
    conversion = convert_to_fp16(plan.model, keep_op_types=(), keep_nodes=plan.fp32_nodes)
    details = {"scaling": plan.to_dict(), **conversion.to_dict()}
    return ScaledCandidate(
        conversion.model, plan, name="fp16-scaled", kind="fp16", details=details, **options
    )


def plain_fp16_candidate(model: onnx.ModelProto, **options) -> OrtCandidate:
    """fp16 with nothing kept in fp32 (weights beyond 65504 still clamped)."""
    conversion = convert_to_fp16(model, keep_op_types=())
    return OrtCandidate(
        conversion.model, name="fp16-plain", kind="fp16", details=conversion.to_dict(), **options
    )


def keep_fp32_candidate(model: onnx.ModelProto, **options) -> OrtCandidate:
    """Today's ``fp16``: precision-sensitive ops kept in fp32."""
    conversion = convert_to_fp16(model, keep_op_types=DEFAULT_KEEP_FP32)
    return OrtCandidate(
        conversion.model,
        name="fp16-keep-fp32",
        kind="fp16",
        details=conversion.to_dict(),
        **options,
    )


def overflowed_tensors(stored: Mapping[str, np.ndarray], reference: Mapping) -> list[str]:
    """Tensors holding inf, NaN or +-65504 in fp16 where the fp32 reference is finite."""
    hit = []
    for name, value in stored.items():
        ref = reference.get(name)
        if not (isinstance(value, np.ndarray) and value.dtype.kind == "f"):
            continue
        if isinstance(ref, np.ndarray) and not np.all(np.isfinite(ref)):
            continue
        wide = value.astype(np.float32)
        if not np.all(np.isfinite(wide)) or float(np.abs(wide).max(initial=0)) >= FP16_MAX:
            hit.append(name)
    return hit


def stored_values(candidate: OrtCandidate, feeds, names: list[str]) -> dict:
    """Tensor ``names`` of the original model as the fp16 build stores them: scaled, and
    in fp16 where the conversion renamed a pinned output ``t`` to ``t__fp16``."""
    produced = set(candidate.tensor_names())
    where = {}
    for t in names:
        inner = candidate.plan.stored.get(t, t) if isinstance(candidate, ScaledCandidate) else t
        where[t] = f"{inner}__fp16" if f"{inner}__fp16" in produced else inner
    run = candidate.run_stored if isinstance(candidate, ScaledCandidate) else candidate.run
    values = run(feeds, list(where.values()))
    return {t: values.get(inner) for t, inner in where.items()}


def compare_fp16_variants(
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    config: AccuracyConfig,
    *,
    source: str,
    scaled: ScaledCandidate | None = None,
) -> dict:
    """Check the three fp16 variants against fp32 on ``feeds`` (described by ``source``);
    per variant the verdict, worst output metrics and overflowed tensors, and the
    overflows scaling avoided (overflowed in plain fp16, not with scaling)."""
    model, _ = sorted_model(model)
    reference = calibration_values(model, feeds)
    names = [o for n in model.graph.node for o in n.output if o in reference]
    scaled = scaled or fp16_scaled_candidate(model, calibration=feeds, calibration_source=source)
    builds = {
        "fp16-plain": plain_fp16_candidate(model),
        "fp16-keep-fp32": keep_fp32_candidate(model),
        "fp16-scaled": scaled,
    }
    quick = AccuracyConfig(
        input_shapes=config.input_shapes,
        thresholds=config.thresholds,
        layers=True,
        second_opinion="never",
        seed=config.seed,
        distribution=config.distribution,
        inputs=config.inputs,
    )
    rows, overflowed = {}, {}
    for name, candidate in builds.items():
        report = check_accuracy(model, candidate, quick)
        overflowed[name] = overflowed_tensors(stored_values(candidate, feeds, names), reference)
        rows[name] = _summary(report.to_dict(), overflowed[name])
    avoided = sorted(set(overflowed["fp16-plain"]) - set(overflowed["fp16-scaled"]))
    return {
        "measured": f"onnxruntime on this CPU, {source}",
        "variants": rows,
        "overflows_avoided": len(avoided),
        "overflows_avoided_tensors": avoided[:50],
        "scaling": scaled.plan.to_dict(),
    }


def _summary(report: dict, overflowed: list[str]) -> dict:
    outputs = report["outputs"]

    def worst(key, pick):
        values = [o[key] for o in outputs if o[key] is not None]
        return pick(values) if values else None

    return {
        "verdict": report["verdict"],
        "reason": report["reason"],
        "max_abs": worst("max_abs", max),
        "mean_rel": worst("mean_rel", max),
        "cosine": worst("cosine", min),
        "snr_db": worst("snr_db", min),
        "nonfinite_outputs": sum(1 for o in outputs if o["nonfinite_mismatch"]),
        "overflowed_tensors": len(overflowed),
    }
