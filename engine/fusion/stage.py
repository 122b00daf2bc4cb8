"""The compile stage's entry point: the TVM build of the prepared model, checked against
onnxruntime, with its artifact (kept when the caller gives a workdir)."""

from __future__ import annotations

import tempfile

from engine.contract import NO_INPUTS, StageInputs, StageReport
from engine.errors import ProgressFn
from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.options import CompileOptions
from engine.graph.prepared import PreparedModel
from engine.targets.schema import TargetProfile


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
    the run's target); the artifact goes to ``inputs.workdir``."""
    with tempfile.TemporaryDirectory(prefix="workbench-compile-") as scratch:
        config = CompileConfig(
            out_dir=inputs.workdir or scratch,
            threads=options.threads,
            input_shapes=prepared.input_shapes,
            rules=options.rules,
            tune_trials=options.tune_trials,
            tune_minutes=options.tune_minutes,
            choose_backends=options.choose_backends,
            tuning_store=inputs.tuning_store,
        )
        result = compile_model(prepared.model, config, progress=progress).to_dict()
    artifacts = {"compiled_library": result["artifact"]} if inputs.workdir else {}
    if not inputs.workdir:
        result["artifact"] = None
    return CompileReport(result, artifacts)
