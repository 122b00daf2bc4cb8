"""Run one stage of a run: load, call the engine's entry point, save. Nothing else.

The prepared model comes from the cache under ``WORKBENCH_VAR_DIR/prepared`` (at most
``WORKBENCH_PREPARED_CACHE_BYTES``, the least recently used going first; built by the
first stage that needs it, from the stored model as ``jobs.localcopy`` finds it on this
machine); the entry point is the stage's ``StageSpec.entry``; the report's artifacts are
copied into storage and its JSON becomes the stage's result.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from django.conf import settings

from engine.contract import StageInputs
from engine.errors import Cancelled, EngineError, ProgressFn
from engine.graph.prepare import Limits, prepare_model
from engine.stages import STAGES
from engine.targets.schema import validate_profile
from jobs.artifacts import check_quota, save_artifact
from jobs.builds import spread_builder
from jobs.localcopy import local_path
from workbench.graph_store import warm_graph
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
            local_path(run.model.file, run.model.sha256),
            options.prepare,
            limits=Limits(
                max_bytes=settings.MAX_UPLOAD_BYTES,
                max_nodes=settings.MAX_MODEL_NODES,
                max_tensor_elements=settings.MAX_TENSOR_ELEMENTS,
            ),
            cache_dir=Path(settings.VAR_DIR) / "prepared",
            cache_max_bytes=settings.PREPARED_CACHE_BYTES,
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
            tuning_builder=_builder(stage, stage_options),
            build_cache=_build_cache(stage),
        )
        report = spec.load()(
            prepared, target, stage_options, lambda f, m: progress(0.05 + 0.95 * f, m), inputs
        )
        produced = {kind: Path(path) for kind, path in getattr(report, "artifacts", {}).items()}
        check_quota(stage, list(produced.values()))
        saved = {kind: save_artifact(stage, kind, path).name for kind, path in produced.items()}
    result = report.to_dict()
    if "compiled_library" in saved:  # the compile card links the stored artifact
        result["artifact"] = saved["compiled_library"]
    if stage.stage == "analyze":
        OnnxModel.objects.filter(pk=run.model_id).update(analysis=result)
        warm_graph(run.model_id)
    return result


def _earlier_results(stage: StageResult, names: tuple[str, ...]) -> dict[str, dict]:
    rows = stage.run.stages.filter(stage__in=names, status=Status.SUCCEEDED)
    return {row.stage: row.result for row in rows if row.result is not None}


def _builder(stage: StageResult, options):
    """Tuning candidates built here and on the other live workers (``jobs.builds``)."""
    if stage.stage != "compile" or not (options.tune_trials or options.tune_minutes):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return spread_builder(options.threads or cores or 1, stage.worker)


def _files(stage: StageResult, options) -> dict[str, str]:
    """Files the stage reads besides the model, resolved from ids the run names (ids were
    checked against the run's owner when it was created; checked again here)."""
    run = stage.run
    files = {"source": local_path(run.model.file, run.model.sha256)}
    if stage.stage == "accuracy":
        if options.inputs is not None:
            inputs = InputData.objects.get(pk=options.inputs, owner=run.owner, model=run.model)
            files["inputs"] = local_path(inputs.file, inputs.sha256)
        if options.other_model is not None:
            other = OnnxModel.objects.get(pk=options.other_model, owner=run.owner)
            files["other_model"] = local_path(other.file, other.sha256)
    return {role: str(path) for role, path in files.items()}


def _build_cache(stage):
    """The worker's cache of built segments (VAR_DIR/builds) for a compile."""
    if stage.stage != "compile":
        return None
    from engine.fusion.build_cache import BuildCache

    return BuildCache(Path(settings.VAR_DIR) / "builds", settings.BUILD_CACHE_BYTES)
