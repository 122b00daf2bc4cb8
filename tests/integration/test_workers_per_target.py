"""Workers per target on the real services (issue 21): PostgreSQL, RabbitMQ, the web
server and several Celery workers, each declaring the targets it serves.

Modeled targets keep the stages cheap (analyze), so the whole story runs in well under a
minute: runs go to the worker serving their target, a run nobody serves says so and
starts when a worker for it starts, and a stopped worker's target is drained by another."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from amqp.exceptions import PreconditionFailed
from rest_framework.authtoken.models import Token

from engine.stages import RunOptions
from tests.conftest import start_web_server, wait_until
from workbench import pipeline
from workbench.celery import app
from workbench.models import Run, Status, Target, Worker
from workbench.targets import save_user_target

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

WAITING = "waiting for a worker that serves {}"


@pytest.fixture
def modeled(user, live_settings):
    """``modeled(name)``: the user's modeled target of that name; its queue is deleted
    from the shared broker after the test."""
    made = []

    def make(name: str) -> Target:
        profile = dict(Target.objects.get(name="phone-snapdragon835").profile)
        profile.update(name=name, kind="modeled", version=1)
        made.append(target := save_user_target(user, profile))
        return target

    yield make
    own = f"{live_settings.CELERY_TASK_DEFAULT_QUEUE}.measure.{socket.gethostname()}"
    with app.connection_for_write() as conn:
        for queue in [pipeline.queue_for(t) for t in made] + [own]:
            conn.default_channel.queue_delete(queue)


def analyze(user, model, target: Target) -> Run:
    return pipeline.create_run(
        owner=user, model=model, target=target, options=RunOptions.from_dict(["analyze"])
    )


def node_of(worker) -> str:
    """The Celery node name of a started worker, from the row its heartbeat wrote."""
    return wait_until(
        lambda: (
            Worker.objects.filter(pid=worker.proc.pid).values_list("hostname", flat=True).first()
        ),
        timeout_s=10,
        what="the worker's registry row",
    )


def finished(run: Run, timeout_s: float = 30) -> Run:
    def done():
        run.refresh_from_db()
        return run.status not in (Status.QUEUED, Status.RUNNING)

    wait_until(done, timeout_s=timeout_s, what=f"run {run.pk} to finish")
    assert run.status == Status.SUCCEEDED, run.error_message
    return run


def stage_message(run: Run) -> str:
    return run.stages.get().message


def api_get(url: str, path: str, token: str):
    request = urllib.request.Request(url + path, headers={"Authorization": f"Token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_runs_follow_their_targets_workers(
    start_worker, live_settings, user, model, modeled, client, tmp_path, django_user_model
):
    alpha, beta, gamma = modeled("alpha"), modeled("beta"), modeled("gamma")
    url, web = start_web_server(live_settings, tmp_path)
    token = Token.objects.create(user=user).key
    try:
        worker_a, worker_b = start_worker.many(
            {"WORKBENCH_WORKER_TARGETS": "alpha"}, {"WORKBENCH_WORKER_TARGETS": "beta"}
        )
        node_a, node_b = node_of(worker_a), node_of(worker_b)

        # each run goes to the worker serving its target
        on_alpha, on_beta = analyze(user, model, alpha), analyze(user, model, beta)
        assert finished(on_alpha).stages.get().worker == node_a
        assert finished(on_beta).stages.get().worker == node_b

        # nobody serves gamma: the run waits, and the API, run page and dashboard say why
        on_gamma = analyze(user, model, gamma)
        said = WAITING.format("gamma")
        body = api_get(url, f"/api/v1/runs/{on_gamma.pk}/", token)
        assert body["status"] == "queued"
        assert body["snapshot"]["stages"][0]["message"] == said
        client.force_login(user)
        assert said in client.get(f"/runs/{on_gamma.pk}/").content.decode()
        assert said in client.get("/").content.decode()

        # alpha gets a backlog and worker A is terminated (SIGTERM to the worker alone, as
        # `docker stop` does): it finishes the stage it holds and hands back the one it had
        # prefetched; the rest stay in alpha's queue and say they wait for a worker
        backlog = [analyze(user, model, alpha) for _ in range(3)]
        worker_a.proc.terminate()
        worker_a.proc.wait(timeout=30)
        assert Worker.objects.get(hostname=node_a).stopped_at is not None  # gone at once
        waiting = [r for r in backlog if r.stages.get().status == Status.QUEUED]
        assert waiting, "worker A drained alpha's queue before it was stopped"
        wait_until(
            lambda: all(stage_message(r) == WAITING.format("alpha") for r in waiting),
            timeout_s=10,
            what="alpha's queued runs to say they wait for a worker",
        )

        # a worker for gamma and alpha starts: the waiting run and alpha's queue are its
        worker_c = start_worker(WORKBENCH_WORKER_TARGETS="gamma,alpha")
        node_c = node_of(worker_c)
        for run in [on_gamma, *waiting]:
            stage = finished(run).stages.get()
            assert (stage.worker, stage.message) == (node_c, "done")
        for run in backlog:  # what A held, it finished before it left
            assert finished(run).stages.get().worker in (node_a, node_c)

        # operators see all three; the targets page counts who serves what
        staff = django_user_model.objects.create_user("ops", password="ops-pass-123", is_staff=True)
        staff_token = Token.objects.create(user=staff).key
        states = {w["hostname"]: w for w in api_get(url, "/api/v1/workers/", staff_token)}
        assert states[node_a]["state"] == "gone"
        assert states[node_b]["state"] == states[node_c]["state"] == "alive"
        assert states[node_c]["targets"] == ["gamma", "alpha"]
        assert f"{live_settings.CELERY_TASK_DEFAULT_QUEUE}.target.gamma" in states[node_c]["queues"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            api_get(url, "/api/v1/workers/", token)
        assert refused.value.code == 403
    finally:
        web.stop()


def test_a_worker_that_declares_nothing_picks_up_a_new_targets_queue(
    start_worker, user, model, modeled
):
    worker = start_worker()  # the embedded default: serves every target
    node = node_of(worker)
    fresh = modeled("made-after-the-worker-started")
    run = analyze(user, model, fresh)
    assert finished(run).stages.get().worker == node


def test_the_broker_keeps_a_stage_nobody_consumes_yet(user, model, modeled):
    target = modeled("unserved")
    run = analyze(user, model, target)
    assert stage_message(run) == WAITING.format("unserved")
    queue = pipeline.queue_for(target)
    with app.connection_for_write() as conn:
        _, messages, consumers = conn.default_channel.queue_declare(queue, passive=True)
        assert (messages, consumers) == (1, 0)
    # declared durable when published: a broker restart keeps it
    with app.connection_for_write() as conn, pytest.raises(PreconditionFailed):
        conn.default_channel.queue_declare(queue, durable=False)
