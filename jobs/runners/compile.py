"""Fuse + compile stage: TVM build with fallback to onnxruntime, kernels explained,
optional MetaSchedule tuning through a tuning store shared by every run on this worker."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings

from engine.errors import ProgressFn
from engine.fusion import CompileConfig, compile_model
from jobs.artifacts import save_artifact
from workbench.models import Artifact, StageResult


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    all_options = run.config.get("options", {})
    options = all_options.get("compile", {})
    shapes = {
        k: tuple(v) for k, v in all_options.get("analyze", {}).get("input_shapes", {}).items()
    }
    store = Path(settings.MEDIA_ROOT) / "tuning"
    store.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        config = CompileConfig(
            out_dir=tmp,
            threads=int(options.get("threads", 0)),
            input_shapes=shapes,
            tune_minutes=float(options.get("tune_minutes", 0.0)),
            tuning_store=str(store),
        )
        result = compile_model(run.model.file.path, config, progress=progress).to_dict()
        artifact = save_artifact(stage, Artifact.Kind.COMPILED_LIBRARY, Path(result["artifact"]))
    result["artifact"] = artifact.name
    return result
