"""Run one stage of a run: load, call the engine's entry point, save. Nothing else.

The prepared model comes from the cache under ``WORKBENCH_VAR_DIR/prepared`` (built by the
first stage that needs it); the entry point is the stage's ``StageSpec.entry``; the report's
artifacts are copied into storage and its JSON becomes the stage's result.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings

from engine.contract import StageInputs
from engine.errors import Cancelled, EngineError, ProgressFn
from engine.graph.prepare import Limits, prepare_model
from engine.stages import STAGES
from engine.targets.schema import validate_profile
from jobs.artifacts import save_artifact
from workbench.models import InputData, OnnxModel, StageResult, Status
from workbench.pipeline import run_options
from workbench.tuning_records import DatabaseStore


class PreparationFailed(Exception):
    """The model could not be prepared: no stage of the run can use it."""

    def __init__(self, error: EngineError):
        super().__init__(error.message)
        self.error = error


def run(stage: StageResult, progress: ProgressFn) -> dict:
    """The stage's result JSON (raises the engine's errors, and :class:`PreparationFailed`)."""
    run = stage.run
    spec = STAGES[stage.stage]
    options = run_options(run)
    try:
        prepared = prepare_model(
            run.model.file.path,
            options.prepare,
            limits=Limits(
                max_bytes=settings.MAX_UPLOAD_BYTES,
                max_nodes=settings.MAX_MODEL_NODES,
                max_tensor_elements=settings.MAX_TENSOR_ELEMENTS,
            ),
            cache_dir=Path(settings.VAR_DIR) / "prepared",
            progress=lambda f, m: progress(0.05 * f, m),
        )
    except Cancelled:
        raise
    except EngineError as e:
        raise PreparationFailed(e) from e
    target = validate_profile(run.target.profile)
    stage_options = options.options[stage.stage]
    with tempfile.TemporaryDirectory(prefix=f"workbench-{stage.stage}-") as workdir:
        inputs = StageInputs(
            results=_earlier_results(stage, spec.uses + spec.needs(stage_options)),
            files=_files(stage, stage_options),
            workdir=workdir,
            tuning_store=DatabaseStore() if stage.stage == "compile" else None,
        )
        report = spec.load()(
            prepared, target, stage_options, lambda f, m: progress(0.05 + 0.95 * f, m), inputs
        )
        saved = {
            kind: save_artifact(stage, kind, Path(path)).name
            for kind, path in getattr(report, "artifacts", {}).items()
        }
    result = report.to_dict()
    if "compiled_library" in saved:  # the compile card links the stored artifact
        result["artifact"] = saved["compiled_library"]
    if stage.stage == "analyze":
        OnnxModel.objects.filter(pk=run.model_id).update(analysis=result)
    return result


def _earlier_results(stage: StageResult, names: tuple[str, ...]) -> dict[str, dict]:
    rows = stage.run.stages.filter(stage__in=names, status=Status.SUCCEEDED)
    return {row.stage: row.result for row in rows if row.result is not None}


def _files(stage: StageResult, options) -> dict[str, str]:
    """Files the stage reads besides the model, resolved from ids the run names (ids were
    checked against the run's owner when it was created; checked again here)."""
    run = stage.run
    files = {"source": run.model.file.path}
    if stage.stage == "accuracy":
        if options.inputs is not None:
            files["inputs"] = InputData.objects.get(
                pk=options.inputs, owner=run.owner, model=run.model
            ).file.path
        if options.other_model is not None:
            files["other_model"] = OnnxModel.objects.get(
                pk=options.other_model, owner=run.owner
            ).file.path
    return files
