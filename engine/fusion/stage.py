"""The compile stage's entry point: the TVM build of the prepared model, checked against
onnxruntime, with its artifact (kept when the caller gives a workdir)."""

from __future__ import annotations

import tempfile

from engine.contract import NO_INPUTS, StageInputs, StageReport
from engine.errors import ProgressFn
from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.on_device import compile_on_device
from engine.fusion.options import CompileOptions
from engine.fusion.substitution import PredictedBench
from engine.graph.prepared import PreparedModel
from engine.targets.schema import TargetProfile

REMOTE_SUBSTITUTION = (
    "not run: microbenchmarks of single ops on a remote device are not built yet, and this "
    "worker's CPU would time them for the wrong hardware"
)


class CompileReport(StageReport):
    """The compile result and the artifact kept (``compiled_library``)."""

    @property
    def speed_vs_onnxruntime(self) -> float | None:
        return self.details["speed_vs_onnxruntime"]


def run(
    prepared: PreparedModel,
    target: TargetProfile | None,
    options: CompileOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> CompileReport:
    """Compile ``prepared`` for this machine's CPU (the compile stage runs on the worker of
    the run's target), or for a remote target's device and measured there; the artifact
    goes to ``inputs.workdir``."""
    with tempfile.TemporaryDirectory(prefix="workbench-compile-") as scratch:
        config = CompileConfig(
            out_dir=inputs.workdir or scratch,
            threads=options.threads,
            input_shapes=prepared.input_shapes,
            rules=options.rules,
            tune_trials=options.tune_trials,
            tune_minutes=options.tune_minutes,
            choose_backends=options.choose_backends,
            conv_layout=options.conv_layout,
            substitute=options.substitute and (target is None or target.remote is None),
            substitution_bench=_substitution_bench(target, options),
            tuning_store=inputs.tuning_store,
            tuning_builder=inputs.tuning_builder,
            build_cache=inputs.build_cache,
        )
        if target is not None and target.remote is not None:
            result = compile_on_device(prepared, target.remote, config, progress)
            if options.substitute:
                result["substitution"] = {"enabled": False, "note": REMOTE_SUBSTITUTION}
        else:
            result = compile_model(
                prepared, config, progress=progress, upload=inputs.files.get("source")
            ).to_dict()
    artifacts = {"compiled_library": result["artifact"]} if inputs.workdir else {}
    if not inputs.workdir:
        result["artifact"] = None
    return CompileReport(result, artifacts)


def _substitution_bench(target: TargetProfile | None, options: CompileOptions):
    """A modeled target prices the substitutions with its cost model; any other one times
    them in onnxruntime where the model runs (None: this CPU)."""
    if options.substitute and target is not None and target.kind == "modeled":
        return PredictedBench(target, options.substitute_unit or None)
    return None
