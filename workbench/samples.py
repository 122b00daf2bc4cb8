"""Sample models: the onnx package's bundled "light" model zoo (real topologies whose
weights are ConstantOfShape fills), given to every new account and analyzed right away."""

from __future__ import annotations

import logging
from pathlib import Path

import onnx
from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def sample_paths() -> list[Path]:
    return sorted(LIGHT_DIR.glob("light_*.onnx"))


def give_samples(user) -> int:
    from engine.stages import RunOptions
    from workbench import pipeline
    from workbench.models import OnnxModel
    from workbench.presets import ensure_presets
    from workbench.uploads import store_model_file

    target = ensure_presets()[0]
    count = 0
    for path in sample_paths():
        name = path.stem.removeprefix("light_") + ".onnx"
        model = store_model_file(path, owner=user, name=name, is_sample=True)
        if model.analysis is None:
            # the same bytes were analyzed for another account: the analysis is the same
            done = (
                OnnxModel.objects.filter(sha256=model.sha256, analysis__isnull=False)
                .exclude(pk=model.pk)
                .first()
            )
            if done is not None:
                model.analysis = done.analysis
                model.save(update_fields=["analysis"])
        if model.analysis is None and not model.runs.exists():
            pipeline.create_run(
                owner=user,
                model=model,
                target=target,
                options=RunOptions.from_dict(["analyze"]),
                limited=False,
            )
        count += 1
    return count


def on_user_created(sender, instance, created, **kwargs) -> None:
    if created and settings.SAMPLE_MODELS:
        transaction.on_commit(lambda: give_samples(instance))
