"""The compile stage tunes through the tuning records on the database, in a real Celery
worker's pool process: MetaSchedule's builder and runner processes start from it, and a
second compile of the same workloads, by anyone, applies the records instead of tuning."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.stages import RunOptions
from tests.conftest import wait_until
from workbench import pipeline
from workbench.models import TERMINAL, Run, Target, TuningRecord
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TRIALS = 8  # one round of MetaSchedule measurements


def write_dense_model(path):
    """x[32,64] @ w[64,64]: one kernel, one workload."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="dense")],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 64])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, path)
    return path


def kernel_rows():
    """The kernels' rows, without the rows of whole-model checks of tuned kernel sets."""
    return TuningRecord.objects.exclude(workload_key__startswith="model-")


def uses_tuned(result: dict) -> bool:
    """Tuned kernels beat their default schedules and the whole-model check kept them."""
    check = result["tuning"].get("end_to_end") or {}
    return bool(result["tuning"]["improved"]) and check.get("kept") == "tuned"


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
        interval_s=0.2,
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
    assert first["tuning"]["records_found"] == 0
    row = kernel_rows().get()
    assert row.target_key == first["tuning"]["target_key"] and row.budget_trials == TRIALS
    assert row.default_us > 0 and row.tuned_us > 0 and row.hits == 0
    assert row.entry["records"] and row.entry["workload"]

    # another user's run of the same workloads applies the shared records
    second = compile_on_worker(other_user, dense_file)
    tuning = second["tuning"]
    assert (tuning["trials"], tuning["tasks_tuned"], tuning["records_found"]) == (0, 0, 1)
    assert tuning["records_used"] == first["tuning"]["improved"]
    schedules = {k["schedule"] for k in second["kernels"]}
    assert ("tuned" in schedules) == uses_tuned(first)
    assert second["outputs_match"] is True
    row.refresh_from_db()
    assert row.hits == 1 and kernel_rows().count() == 1
    # A tuned kernel in the build was checked on the whole model, and the outcome stored.
    checks = TuningRecord.objects.filter(workload_key__startswith="model-")
    assert checks.count() == int(bool(first["tuning"]["improved"]))
