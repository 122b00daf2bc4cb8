"""The accuracy stage's entry point: the user's model in onnxruntime fp32 as the reference,
a candidate built from the prepared model (or another file) on the same inputs.

Inputs are the uploaded .npz when there is one, else generated at the prepared model's
bound input shapes. The candidates: ``fp16`` (the user's model converted),
``fp16-scaled`` (converted with power-of-two scaling calibrated on those inputs, and
compared with plain and keep-fp32 fp16), ``simplified`` (the prepared model itself:
folding must not change results), ``partitioned`` (the prepared model split by this
run's best partition plan), ``tvm`` (its TVM build), ``ort`` (onnxruntime against
itself: checks the comparison) and ``other`` (another ONNX file).
"""

from __future__ import annotations

from pathlib import Path

from engine.accuracy.candidates import OrtCandidate, make_candidate
from engine.accuracy.check import AccuracyConfig, AccuracyReport, check_accuracy
from engine.accuracy.errors import CandidateError
from engine.accuracy.fp16_variants import compare_fp16_variants, fp16_scaled_candidate
from engine.accuracy.inputs import InputSet, generate_inputs, load_inputs_npz
from engine.accuracy.metrics import Thresholds
from engine.accuracy.options import AccuracyOptions
from engine.contract import NO_INPUTS, StageInputs
from engine.errors import ProgressFn
from engine.graph.loader import load_model
from engine.graph.prepared import PreparedModel
from engine.targets.schema import TargetProfile


def run(
    prepared: PreparedModel,
    target: TargetProfile | None,
    options: AccuracyOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> AccuracyReport:
    """Compare the candidate named in ``options`` with onnxruntime fp32."""
    source = inputs.files.get("source")
    reference = load_model(source) if source else prepared.model
    config = AccuracyConfig(
        inputs=inputs.files.get("inputs"),
        seed=options.seed,
        distribution=options.distribution,
        input_shapes=prepared.input_shapes,
        layers=options.layers,
        thresholds=Thresholds.from_dict({**Thresholds().to_dict(), **options.thresholds}),
    )
    if options.candidate == "fp16-scaled":  # calibrated on this run's inputs
        return _scaled(reference, config, progress)
    candidate = _candidate(prepared, reference, options, inputs)
    return check_accuracy(reference, candidate, config, progress=progress)


def _scaled(reference, config: AccuracyConfig, progress: ProgressFn) -> AccuracyReport:
    """Scale from the run's inputs, check, then compare the three fp16 variants."""
    calibration = _calibration(reference, config)
    source = _describe(calibration)
    candidate = fp16_scaled_candidate(
        reference, calibration=calibration.feeds, calibration_source=source
    )
    report = check_accuracy(
        reference, candidate, config, progress=lambda f, m: progress(0.8 * f, m)
    )
    progress(0.85, "comparing fp16 plain, keep-fp32 and scaled")
    report.fp16_variants = compare_fp16_variants(
        reference, calibration.feeds, config, source=source, scaled=candidate
    )
    progress(1.0, f"verdict: {report.verdict}")
    return report


def _calibration(model, config: AccuracyConfig) -> InputSet:
    if config.inputs is not None:
        return load_inputs_npz(config.inputs, model)
    return generate_inputs(
        model, config.seed, config.distribution, shapes=config.input_shapes or None
    )


def _describe(inputs: InputSet) -> str:
    if inputs.source == "generated":
        return f"generated inputs (seed {inputs.seed}, {inputs.distribution})"
    return f"inputs from {inputs.source}"


def _candidate(prepared: PreparedModel, reference, options: AccuracyOptions, inputs):
    name = options.candidate
    if name == "simplified":
        return OrtCandidate(
            prepared.model,
            name="simplified",
            kind="simplified",
            details={"preparation": prepared.report.to_dict()},
        )
    if name == "partitioned":
        plan = inputs.results.get("partition") or {}
        best = plan.get("best")
        if not best:
            raise CandidateError(
                "the partitioned candidate needs a partition plan from this run, and the "
                "partition stage found none",
                hint="See the partition stage's result; pick another candidate.",
            )
        placement = plan["results"][best].get("placement")
        if placement is None:
            raise CandidateError(
                f"the partitioned candidate runs each op on its unit, and this run's plan "
                f"({best}) plans on the graph instead: it places no op on a unit",
                hint="Partition with a placement algorithm (hope-ilp, heft, ...) for this "
                "candidate, or pick another candidate.",
            )
        return make_candidate("partitioned", prepared.model, placement=placement)
    if name == "other":
        other = inputs.files.get("other_model")
        if not other:
            raise CandidateError("candidate 'other' needs the other model's file")
        return OrtCandidate(load_model(other), name=Path(other).name, kind="onnx-file")
    if name in ("tvm",):
        return make_candidate(name, prepared.model)
    return make_candidate(name, reference)
