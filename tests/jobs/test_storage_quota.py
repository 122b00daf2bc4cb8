"""A stage whose artifacts would take its owner over the storage quota fails with the
quota's message and stores nothing; the rest of the run goes on."""

from __future__ import annotations

import pytest

from engine.stages import RunOptions
from jobs.tasks import run_stage
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import Artifact, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_heartbeat")]


def test_a_stage_over_the_quota_fails_and_keeps_nothing(
    user, enqueued, settings, django_capture_on_commit_callbacks
):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    settings.MAX_STORED_BYTES = model.size_bytes + 10  # no room for the memory plan
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user,
            model=model,
            target=Target.objects.get(name="host"),
            options=RunOptions.from_dict(["memory"]),
        )
    outcomes = []
    for i in range(2):  # analyze, then memory
        with django_capture_on_commit_callbacks(execute=True):
            outcomes.append(run_stage.apply(args=[enqueued[i].pk]).get())
    assert outcomes == ["succeeded", "failed"]
    memory = run.stages.get(stage="memory")
    assert memory.error_code == "storage_quota"
    assert memory.error_message.startswith("the memory stage's artifacts (")
    assert f"over your quota of {settings.MAX_STORED_BYTES / 1e9:,.2f} GB" in memory.error_message
    assert "Delete models, input sets or runs" in memory.error_message
    assert not Artifact.objects.filter(run=run).exists()
    run.refresh_from_db()
    assert run.status == "failed"

    # with room for it, the same stage run again stores its plan
    settings.MAX_STORED_BYTES = 10 << 20
    with django_capture_on_commit_callbacks(execute=True):
        retry = pipeline.retry_run(run)
    with django_capture_on_commit_callbacks(execute=True):
        assert run_stage.apply(args=[enqueued[-1].pk]).get() == "succeeded"
    assert retry.artifacts.get(stage="memory").size_bytes > 10
