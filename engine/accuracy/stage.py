"""The accuracy stage's entry point: the user's model in onnxruntime fp32 as the reference,
a candidate built from the prepared model (or another file) on the same inputs.

Inputs are the uploaded .npz when there is one, else generated at the prepared model's
bound input shapes. The candidates: ``fp16`` (the user's model converted), ``simplified``
(the prepared model itself: folding must not change results), ``partitioned`` (the
prepared model split by this run's best partition plan), ``tvm`` (its TVM build), ``ort``
(onnxruntime against itself: checks the comparison) and ``other`` (another ONNX file).
"""

from __future__ import annotations

from pathlib import Path

from engine.accuracy.candidates import OrtCandidate, make_candidate
from engine.accuracy.check import AccuracyConfig, AccuracyReport, check_accuracy
from engine.accuracy.errors import CandidateError
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
    candidate = _candidate(prepared, reference, options, inputs)
    config = AccuracyConfig(
        inputs=inputs.files.get("inputs"),
        seed=options.seed,
        distribution=options.distribution,
        input_shapes=prepared.input_shapes,
        layers=options.layers,
        thresholds=Thresholds.from_dict({**Thresholds().to_dict(), **options.thresholds}),
    )
    return check_accuracy(reference, candidate, config, progress=progress)


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
        placement = plan["results"][best]["placement"]
        return make_candidate("partitioned", prepared.model, placement=placement)
    if name == "other":
        other = inputs.files.get("other_model")
        if not other:
            raise CandidateError("candidate 'other' needs the other model's file")
        return OrtCandidate(load_model(other), name=Path(other).name, kind="onnx-file")
    if name in ("tvm",):
        return make_candidate(name, prepared.model)
    return make_candidate(name, reference)
