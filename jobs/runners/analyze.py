from __future__ import annotations

from django.conf import settings

from engine.errors import ProgressFn
from engine.graph import AnalysisConfig, analyze_model
from workbench.models import OnnxModel, StageResult


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    options = run.config.get("options", {}).get("analyze", {})
    shapes = {name: tuple(dims) for name, dims in options.get("input_shapes", {}).items()}
    config = AnalysisConfig(input_shapes=shapes, max_nodes=settings.MAX_MODEL_NODES)
    result = analyze_model(run.model.file.path, config, progress=progress).to_dict()
    OnnxModel.objects.filter(pk=run.model_id).update(analysis=result)
    return result
