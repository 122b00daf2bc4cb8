"""The fuse + compile stage through the pipeline, and the TVM build as accuracy candidate."""

from __future__ import annotations

import pytest

from engine.stages import RunOptions
from jobs.tasks import run_stage
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_heartbeat")]


def run_all(user, stages, options, enqueued, capture):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    with capture(execute=True):
        run = pipeline.create_run(
            owner=user,
            model=model,
            target=Target.objects.get(name="host"),
            options=RunOptions.from_dict(stages, options),
        )
    for i in range(len(run.config["stages"])):
        with capture(execute=True):
            outcome = run_stage.apply(args=[enqueued[i].pk]).get()
        assert outcome == "succeeded", run.stages.get(pk=enqueued[i].pk).error_message
    run.refresh_from_db()
    return run


def test_compile_stage_builds_explains_and_ships(
    user, enqueued, django_capture_on_commit_callbacks, client
):
    # The TVM build as it ships and is explained: no measured backend choice (it may ship
    # onnxruntime alone; tests/engine/test_fusion_backend_choice.py is about that).
    options = {"compile": {"threads": 1, "choose_backends": False}}
    run = run_all(user, ["compile"], options, enqueued, django_capture_on_commit_callbacks)
    result = run.stages.get(stage="compile").result
    assert result["outputs_match"] is True
    assert result["kernel_count"] > 0 and result["tvm_nodes"] > 0
    # The option reached the engine: no segment was timed against onnxruntime.
    on_tvm = {s["backend"] for s in result["segments"]} == {"tvm"}
    assert result["backend"] == ("tvm" if on_tvm else "mixed")
    assert result["backend_choice"] == []
    assert result["latency_ms"] > 0 and result["onnxruntime_latency_ms"] > 0
    assert result["fusion"]["kernel_count"] <= result["fusion"]["kernel_count_fuseops"]
    artifact = run.artifacts.get(stage="compile")
    assert artifact.name.endswith(".tar.gz") and artifact.size_bytes > 0
    client.force_login(user)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="compile-kernels"' in page and "fig-kernel-times-data" in page
    # the graph opens coloured by kernel: its levels fetched as they open, or inline
    assert 'data-initial="kernel"' in page or '"initial_metric": "kernel"' in page


def test_tvm_build_is_an_accuracy_candidate(user, enqueued, django_capture_on_commit_callbacks):
    run = run_all(
        user,
        ["accuracy"],
        {"accuracy": {"candidate": "tvm"}},
        enqueued,
        django_capture_on_commit_callbacks,
    )
    report = run.stages.get(stage="accuracy").result
    assert report["candidate"]["kind"] == "tvm"
    assert report["verdict"] == "pass", report["reason"]
