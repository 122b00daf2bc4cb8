from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
from django.conf import settings

from engine.errors import ProgressFn
from engine.graph import AnalysisConfig, analyze_model
from jobs.artifacts import save_artifact
from workbench.models import Artifact, OnnxModel, StageResult


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    options = run.config.get("options", {}).get("analyze", {})
    shapes = {name: tuple(dims) for name, dims in options.get("input_shapes", {}).items()}
    config = AnalysisConfig(
        input_shapes=shapes,
        max_nodes=settings.MAX_MODEL_NODES,
        max_tensor_elements=settings.MAX_TENSOR_ELEMENTS,
        simplify=bool(options.get("simplify", False)),
    )
    analysis = analyze_model(run.model.file.path, config, progress=progress)
    if analysis.simplified_model is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "simplified.onnx"
            onnx.save(analysis.simplified_model, str(path))
            save_artifact(stage, Artifact.Kind.OPTIMIZED_ONNX, path)
    result = analysis.to_dict()
    OnnxModel.objects.filter(pk=run.model_id).update(analysis=result)
    return result
