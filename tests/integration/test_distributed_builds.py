"""Tuning candidates built on another worker: two real Celery workers on RabbitMQ, the
Redis result store and PostgreSQL; the worker running a tuning compile builds some
candidates itself and sends the rest to the other worker's build processes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from engine.stages import RunOptions
from tests.conftest import wait_until
from workbench import pipeline, queues
from workbench.models import Run, Target
from workbench.uploads import store_model_file
from workbench.workers import live_workers

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def conv_model(path):
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.write_bytes(model.SerializeToString())
    return path


def test_a_tuning_compile_builds_candidates_on_the_other_worker(
    start_worker, settings, user, tmp_path
):
    assert settings.CELERY_RESULT_BACKEND, "needs the Redis result store (REDIS_URL)"
    first, second = start_worker.many({}, {})
    wait_until(
        lambda: sum(queues.builds_queue() in w.queues for w in live_workers()) >= 2,
        timeout_s=60,
        what="both workers to consume the builds queue",
    )
    model = store_model_file(conv_model(tmp_path / "conv.onnx"), owner=user, name="conv.onnx")
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        # one round of eight candidates: every round is shared between the two workers
        options=RunOptions.from_dict(["compile"], {"compile": {"tune_trials": 8}}),
    )
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status in ("succeeded", "failed"),
        timeout_s=900,
        what="the tuning compile to end",
    )
    stage = run.stages.get(stage="compile")
    assert stage.status == "succeeded", (
        f"{stage.message}\n{stage.log_excerpt}\n{first.log()[-2500:]}\n{second.log()[-2500:]}"
    )
    tuning = stage.result["tuning"]
    built = tuning["builds_by_worker"]
    others = {k: n for k, n in built.items() if k != "this worker"}
    assert built.get("this worker", 0) > 0 and sum(others.values()) > 0, built
    (other,) = others
    assert other != stage.worker  # the other worker built them
    assert tuning["trials"] > 0
    del second
