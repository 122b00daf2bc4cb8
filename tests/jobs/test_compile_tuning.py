"""The compile stage tunes through the tuning records on the database: a second compile
of the same workloads, by anyone, applies them instead of tuning."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.stages import RunOptions
from jobs.tasks import run_stage
from workbench import pipeline
from workbench.models import Target, TuningRecord
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_heartbeat")]


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


@pytest.fixture
def dense_file(tmp_path):
    return write_dense_model(tmp_path / "dense.onnx")


def compile_as(owner, path, enqueued, capture) -> dict:
    model = store_model_file(path, owner=owner, name=path.name)
    with capture(execute=True):
        run = pipeline.create_run(
            owner=owner,
            model=model,
            target=Target.objects.get(name="host"),
            # the TVM build is what tuning is about: onnxruntime runs this one small MatMul
            # faster, and the measured backend choice would ship it instead
            options=RunOptions.from_dict(
                ["compile"],
                {"compile": {"threads": 1, "tune_trials": TRIALS, "choose_backends": False}},
            ),
        )
    for _ in run.config["stages"]:  # analyze, then compile
        stage = enqueued.pop(0)
        with capture(execute=True):
            outcome = run_stage.apply(args=[stage.pk]).get()
        stage.refresh_from_db()
        assert outcome == "succeeded", stage.error_message
    return run.stages.get(stage="compile").result


def test_a_second_compile_applies_the_shared_records_instead_of_tuning(
    user, other_user, dense_file, enqueued, django_capture_on_commit_callbacks
):
    first = compile_as(user, dense_file, enqueued, django_capture_on_commit_callbacks)
    assert first["tuning"]["trials"] == TRIALS and first["tuning"]["tasks_tuned"] == 1
    assert first["tuning"]["records_found"] == 0
    row = kernel_rows().get()
    assert row.target_key == first["tuning"]["target_key"] and row.budget_trials == TRIALS
    assert row.default_us > 0 and row.tuned_us > 0 and row.hits == 0
    assert row.entry["records"] and row.entry["workload"]

    second = compile_as(other_user, dense_file, enqueued, django_capture_on_commit_callbacks)
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


def kernel_rows():
    """The kernels' rows, without the rows of whole-model checks of tuned kernel sets."""
    return TuningRecord.objects.exclude(workload_key__startswith="model-")


def uses_tuned(result: dict) -> bool:
    """Tuned kernels beat their default schedules and the whole-model check kept them."""
    check = result["tuning"].get("end_to_end") or {}
    return bool(result["tuning"]["improved"]) and check.get("kept") == "tuned"
