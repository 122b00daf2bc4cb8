"""Tuning in a real Celery worker's pool process: MetaSchedule's builder and runner
processes start from it, and the records it writes to PostgreSQL serve the next run."""

from __future__ import annotations

import pytest
from test_compile_tuning import TRIALS, kernel_rows, write_dense_model

from engine.stages import RunOptions
from tests.conftest import wait_until
from workbench import pipeline
from workbench.models import TERMINAL, Run, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def compile_on_worker(owner, path) -> dict:
    run = pipeline.create_run(
        owner=owner,
        model=store_model_file(path, owner=owner, name=path.name),
        target=Target.objects.get(name="host"),
        # the TVM build is what tuning is about: onnxruntime runs this one small MatMul
        # faster, and the measured backend choice would ship it instead
        options=RunOptions.from_dict(
            ["compile"],
            {"compile": {"threads": 1, "tune_trials": TRIALS, "choose_backends": False}},
        ),
    )
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status in TERMINAL,
        timeout_s=300,
        interval_s=0.5,
        what="the compile run",
    )
    stage = run.stages.get(stage="compile")
    assert stage.status == "succeeded", stage.error_message
    return stage.result


def test_a_worker_tunes_into_the_database_and_the_next_run_reuses_it(
    start_worker, user, other_user, tmp_path
):
    dense_file = write_dense_model(tmp_path / "dense.onnx")
    start_worker()
    first = compile_on_worker(user, dense_file)
    assert first["tuning"]["trials"] == TRIALS and first["tuning"]["tasks_tuned"] == 1
    assert kernel_rows().get().budget_trials == TRIALS

    second = compile_on_worker(other_user, dense_file)
    assert (second["tuning"]["trials"], second["tuning"]["records_found"]) == (0, 1)
    assert second["tuning"]["records_used"] == first["tuning"]["improved"]
    assert kernel_rows().get().hits == 1
