"""Starting runs in the integration tests, as the web page and the API start them."""

from __future__ import annotations

from engine.stages import RunOptions
from workbench import pipeline
from workbench.models import Run, Target


def start_run(user, model, stages, **profile) -> Run:
    """A run of ``stages`` on the host target; keyword arguments are profile options."""
    return pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(stages, {"profile": profile}),
    )
