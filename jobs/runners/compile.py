"""Fuse + compile stage: TVM build with fallback to onnxruntime, kernels explained,
optional MetaSchedule tuning through the tuning records every worker shares on the
database (a second compile of known workloads applies them instead of tuning)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from engine.errors import ProgressFn
from engine.fusion import CompileConfig, compile_model
from jobs.artifacts import save_artifact
from workbench.models import Artifact, StageResult
from workbench.tuning_records import DatabaseStore


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    all_options = run.config.get("options", {})
    options = all_options.get("compile", {})
    shapes = {
        k: tuple(v) for k, v in all_options.get("analyze", {}).get("input_shapes", {}).items()
    }
    with tempfile.TemporaryDirectory() as tmp:
        config = CompileConfig(
            out_dir=tmp,
            threads=int(options.get("threads", 0)),
            input_shapes=shapes,
            tune_trials=int(options.get("tune_trials", 0)),
            tune_minutes=float(options.get("tune_minutes", 0.0)),
            tuning_store=DatabaseStore(),
        )
        result = compile_model(run.model.file.path, config, progress=progress).to_dict()
        artifact = save_artifact(stage, Artifact.Kind.COMPILED_LIBRARY, Path(result["artifact"]))
    result["artifact"] = artifact.name
    return result
