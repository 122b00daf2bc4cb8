"""A real Celery worker on RabbitMQ, PostgreSQL for state and the Redis channel layer:
runs go through every layer and their progress arrives over a websocket."""

from __future__ import annotations

import asyncio
import signal

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from engine.stages import RunOptions
from tests.conftest import wait_until
from tests.integration.runs import start_run
from workbench import pipeline
from workbench.asgi import application
from workbench.models import Run, StageResult, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# The longest profile window the options allow: a stage that outlasts every wait below, so
# a cancel that does not stop it, or a redelivered stage run again, keeps the worker busy.
LONG_WINDOW_S = 120.0


def stage_status(run: Run, stage: str) -> str:
    return StageResult.objects.get(run=run, stage=stage).status


def ws_client(run_id: int, user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application, f"/ws/runs/{run_id}/", headers=[(b"origin", b"http://localhost")]
    )
    communicator.scope["user"] = user
    return communicator


async def _watch(user, run_id: int, timeout_s: float) -> list[dict]:
    communicator = ws_client(run_id, user)
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    events = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            events.append(await communicator.receive_json_from(timeout=deadline - loop.time()))
            if events[-1]["run"]["status"] in ("succeeded", "failed", "cancelled"):
                return events
    finally:
        await communicator.disconnect()


def test_pipeline_runs_on_a_real_worker_and_streams_progress(start_worker, user, model):
    start_worker()
    # progress is the point here: the TVM kernels (a TVM build) have a worker test of
    # their own (tests/browser/test_upload_flow.py)
    run = start_run(user, model, ["analyze", "profile"], window_s=1.5, tvm_kernels=False)
    events = async_to_sync(_watch)(user, run.pk, 120)

    assert events[0]["type"] == "snapshot"
    assert events[-1]["run"]["status"] == "succeeded", events[-1]
    progress_events = [e for e in events if e["type"] == "progress"]
    assert progress_events, "no progress event arrived over the websocket"
    # Live, not just the final state: the profile stage reported partial progress.
    partial = [
        s["progress"]
        for e in progress_events
        for s in e["run"]["stages"]
        if s["stage"] == "profile" and s["status"] == "running" and 0 < s["progress"] < 1
    ]
    assert partial, "no intermediate progress of the profile stage was streamed"
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.model.analysis["params"] == 1_235_496
    profile = run.stages.get(stage="profile").result
    assert profile["runs"] >= 10 and profile["latency_ms"] == profile["latency"]["median"] > 0


def test_every_stage_on_host_runs_on_a_real_worker(start_worker, user, real_model):
    """A run with every stage ticked on the default target: each stage that applies
    completes on the worker, partition says why it does not apply, the run succeeds."""
    start_worker()
    model = store_model_file(real_model("resnet_ts"), owner=user, name="resnet.onnx")
    options = {
        "profile": {"window_s": 0.5, "tvm_kernels": False},
        "memory": {"compare_tvm": False},
        "compile": {"threads": 1},
    }
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(ALL, options),
    )
    wait_until(
        lambda: not Run.objects.get(pk=run.pk).is_active,
        timeout_s=600,
        interval_s=1,
        what="the run with every stage to end",
    )
    run.refresh_from_db()
    stages = {s.stage: s for s in run.stages.all()}
    assert run.status == "succeeded", {n: (s.status, s.error_message) for n, s in stages.items()}
    assert {n: s.status for n, s in stages.items()} == {
        "analyze": "succeeded",
        "profile": "succeeded",
        "partition": "not_applicable",
        "memory": "succeeded",
        "compile": "succeeded",
        "accuracy": "succeeded",
    }
    assert "has one compute unit" in stages["partition"].message
    assert stages["analyze"].result["not_costed"] == []
    assert stages["compile"].result["outputs_match"] is True
    assert stages["accuracy"].result["verdict"] == "pass"
    assert run.artifacts.filter(stage="compile").exists()


ALL = ["analyze", "profile", "partition", "memory", "compile", "accuracy"]


def test_websocket_refuses_another_users_run(start_worker, user, other_user, model):
    run = start_run(user, model, ["analyze"])

    async def connect():
        communicator = ws_client(run.pk, other_user)
        connected, code = await communicator.connect(timeout=10)
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(connect)() == (False, 4404)


def test_cancel_stops_a_running_stage(start_worker, user, model):
    start_worker()
    run = start_run(user, model, ["profile"], window_s=LONG_WINDOW_S)
    wait_until(
        lambda: stage_status(run, "profile") == "running",
        timeout_s=60,
        what="the profile stage to start",
    )
    assert pipeline.cancel_run(Run.objects.get(pk=run.pk))
    # The worker has one process: a new run can only finish if the cancelled stage let go.
    follow_up = start_run(user, model, ["analyze"])
    wait_until(
        lambda: Run.objects.get(pk=follow_up.pk).status == "succeeded",
        timeout_s=60,
        what="the next run to finish after the cancel",
    )
    cancelled = Run.objects.get(pk=run.pk)
    assert cancelled.status == "cancelled"
    assert stage_status(cancelled, "profile") == "cancelled"


def test_a_killed_worker_never_leaves_a_run_running(live_settings, start_worker, user, model):
    worker = start_worker()
    run = start_run(user, model, ["profile"], window_s=LONG_WINDOW_S)
    wait_until(
        lambda: stage_status(run, "profile") == "running",
        timeout_s=60,
        what="the profile stage to start",
    )
    worker.kill(signal.SIGKILL)
    worker.proc.wait(timeout=10)

    # Anyone reading the run (page, API, beat) reaps it once the heartbeat is stale.
    def failed():
        pipeline.reap_stale_stages()
        return Run.objects.get(pk=run.pk).status == "failed"

    wait_until(
        failed,
        timeout_s=live_settings.RUN_STALE_SECONDS + 15,
        interval_s=0.5,
        what="the run to be marked failed",
    )
    run.refresh_from_db()
    assert run.error_code == "worker_lost"
    # A new worker picking up the redelivered message must not resurrect the stage.
    start_worker()
    follow_up = start_run(user, model, ["analyze"])
    wait_until(
        lambda: Run.objects.get(pk=follow_up.pk).status == "succeeded",
        timeout_s=60,
        what="a fresh worker to process new runs",
    )
    assert Run.objects.get(pk=run.pk).status == "failed"


def test_a_worker_registers_its_machine_and_measures_runs_sent_to_it(
    live_settings, start_worker, user, model
):
    import socket

    start_worker()
    name = f"cpu@{socket.gethostname()}"
    target = wait_until(
        lambda: Target.objects.filter(name=name).order_by("-version").first(),
        timeout_s=30,
        what="the worker to register its machine",
    )
    assert target.kind == "measured"
    assert target.queue.startswith(live_settings.CELERY_TASK_DEFAULT_QUEUE)
    assert target.profile["machine"]["logical_cores"] >= 1
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=target,
        options=RunOptions.from_dict(
            ["profile"], {"profile": {"window_s": 0.5, "tvm_kernels": False}}
        ),
    )
    wait_until(
        lambda: Run.objects.get(pk=run.pk).status == "succeeded",
        timeout_s=60,
        what="the run on the registered machine",
    )
    profile = run.stages.get(stage="profile").result
    assert profile["environment"]["machine"]["hostname"] == socket.gethostname()


def slow_model(path, matmuls: int = 300, n: int = 2048):
    """One inference takes about a minute on two cores: a stage stuck in native code."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(n, dtype=np.float32), "W")
    nodes, prev = [], "x"
    for i in range(matmuls):
        nodes.append(helper.make_node("MatMul", [prev, "W"], [f"y{i}"]))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes,
        "slow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def test_cancel_stops_a_stage_stuck_in_native_code(live_settings, start_worker, user, tmp_path):
    start_worker()
    model = store_model_file(slow_model(tmp_path / "slow.onnx"), owner=user, name="slow.onnx")
    run = start_run(user, model, ["profile"], window_s=1)
    wait_until(
        lambda: "warm-up" in StageResult.objects.get(run=run, stage="profile").message,
        timeout_s=60,
        what="the first (minute-long) inference to start",
    )
    assert pipeline.cancel_run(Run.objects.get(pk=run.pk))
    # The inference cannot report back for a minute; the heartbeat ends the pool process
    # after the grace period and the worker takes the next run well before that.
    follow_up = start_run(user, model, ["analyze"])
    wait_until(
        lambda: Run.objects.get(pk=follow_up.pk).status == "succeeded",
        timeout_s=30,
        what="the worker to drop the stuck stage and run the next one",
    )
    assert Run.objects.get(pk=run.pk).status == "cancelled"
