"""Routing and visibility: each target's queue, the queues a worker serves, the "waiting
for a worker" message, and the staff-only worker list (issue 21). Workers here are rows
as their heartbeat writes them; tests/integration/test_workers_per_target.py runs real ones."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from engine.stages import RunOptions
from jobs.presence import declared_targets
from workbench import pipeline, queues, workers
from workbench.models import Status, Target, Worker
from workbench.targets import save_user_target

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def shared(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = f"route-{uuid.uuid4().hex[:8]}"
    settings.RUN_STALE_SECONDS = 30.0
    return settings.CELERY_TASK_DEFAULT_QUEUE


def modeled(owner, name: str) -> Target:
    profile = dict(Target.objects.get(name="phone-snapdragon835").profile)
    profile.update(name=name, kind="modeled", version=1)
    return save_user_target(owner, profile)


def machine(hostname: str) -> Target:
    return Target.objects.create(
        name=f"cpu@{hostname}",
        kind=Target.Kind.MEASURED,
        profile={},
        queue=f"{queues.shared_queue()}.measure.{hostname}",
    )


def worker(name: str, *, targets=(), queues_=(), seen_s_ago: float = 0, gone=False) -> Worker:
    now = timezone.now()
    return Worker.objects.create(
        hostname=name,
        machine="box",
        pid=1,
        targets=list(targets),
        queues=list(queues_),
        started_at=now - timedelta(seconds=seen_s_ago),
        heartbeat_at=now - timedelta(seconds=seen_s_ago),
        stopped_at=now if gone else None,
    )


def test_each_kind_of_target_has_its_queue(user, shared):
    host = Target.objects.get(name="host")
    phone = modeled(user, "phone")
    box = machine("box")
    assert pipeline.queue_for(host) == shared  # whichever worker's own CPU
    assert pipeline.queue_for(phone) == f"{shared}.target.phone"
    assert pipeline.queue_for(box) == f"{shared}.measure.box"
    # a name with characters a queue name should not carry keeps apart from its lookalike
    odd, plain = queues.target_queue("my phone/1"), queues.target_queue("my_phone_1")
    assert odd != plain and odd.startswith(f"{shared}.target.my_phone_1-")


def test_a_worker_that_declares_nothing_serves_every_target_but_other_machines(user, shared):
    modeled(user, "phone")
    box = machine("box")
    served = queues.every_target_queue()
    assert shared in served
    assert f"{shared}.target.phone" in served
    assert f"{shared}.target.phone-snapdragon835" in served  # a modeled preset
    assert box.queue not in served


def test_a_worker_serves_what_it_declares_and_never_another_machine(user, shared):
    modeled(user, "phone")
    box = machine("box")
    assert queues.declared_queues(["phone"]) == {f"{shared}.target.phone"}
    assert queues.declared_queues(["host"]) == {shared}
    # a device registered later: its queue is consumed (and kept by the broker) already
    assert queues.declared_queues(["board-7"]) == {f"{shared}.target.board-7"}
    assert queues.declared_queues([box.name]) == set()


def test_the_targets_option_wins_over_the_environment(settings):
    settings.WORKER_TARGETS = ["from-env"]
    assert declared_targets(" a, b ,,") == ["a", "b"]
    assert declared_targets(None) == ["from-env"]


def test_a_target_no_live_worker_serves_waits_visibly(user, shared):
    phone = modeled(user, "phone")
    box = machine("box")
    said = "waiting for a worker that serves phone"
    assert workers.waiting_message(phone) == said
    worker("other@box", targets=["tablet"], queues_=[f"{shared}.target.tablet"])
    worker("dead@box", targets=["phone"], queues_=[f"{shared}.target.phone"], seen_s_ago=31)
    worker("left@box", targets=["phone"], queues_=[f"{shared}.target.phone"], gone=True)
    assert workers.waiting_message(phone) == said
    everything = worker("all@box")  # declares nothing: serves phone, not the box's CPU
    assert workers.waiting_message(phone) is None
    assert workers.waiting_message(box) == f"waiting for a worker that serves {box.name}"
    everything.delete()
    worker("phone@box", targets=["phone"], queues_=[f"{shared}.target.phone"])
    assert workers.waiting_message(phone) is None
    assert workers.serving_counts([phone, box]) == {phone.pk: 1, box.pk: 0}


def test_enqueue_routes_to_the_targets_queue_and_says_it_waits(
    user, model, shared, monkeypatch, django_capture_on_commit_callbacks
):
    sent = []

    class Sent:
        id = "task-1"

    def send_task(name, *, args, queue, **_options):
        sent.append(queue)
        return Sent()

    monkeypatch.setattr(pipeline.app, "send_task", send_task)
    phone = modeled(user, "phone")
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user, model=model, target=phone, options=RunOptions.from_dict(["analyze"])
        )
    stage = run.stages.get()
    assert sent == [f"{shared}.target.phone"]
    assert stage.task_id == "task-1"
    assert stage.message == "waiting for a worker that serves phone"

    # a worker serving it appears: the message is taken back at the next refresh
    worker("phone@box", targets=["phone"], queues_=[f"{shared}.target.phone"])
    assert workers.refresh_waiting() == 1
    stage.refresh_from_db()
    assert stage.message == "queued"
    # it dies without a word: after the stale interval, its stages wait again
    Worker.objects.update(heartbeat_at=timezone.now() - timedelta(seconds=31))
    assert workers.refresh_waiting() == 1
    stage.refresh_from_db()
    assert stage.message == "waiting for a worker that serves phone"
    # claiming clears it
    taken = pipeline.claim_stage(stage.pk, worker="phone@box")
    assert taken.message == "started"
    assert workers.refresh_waiting() == 0


def test_a_served_target_gets_no_waiting_message(user, model, shared, monkeypatch):
    monkeypatch.setattr(pipeline.app, "send_task", lambda *a, **k: type("R", (), {"id": "t"}))
    worker("all@box")
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=modeled(user, "phone"),
        options=RunOptions.from_dict(["analyze"]),
    )
    stage = run.stages.get()
    pipeline.enqueue_stage(stage)
    stage.refresh_from_db()
    assert stage.status == Status.QUEUED and stage.message == ""


def test_the_worker_list_is_for_staff_only(client, user, django_user_model):
    w = worker("phone@box", targets=["phone"], queues_=["q.target.phone"])
    Worker.objects.filter(pk=w.pk).update(load_avg=[0.5, 0.25, 0.125], concurrency=2)
    worker("old@box", seen_s_ago=31)
    worker("left@box", gone=True)

    assert client.get("/workers/").status_code == 302  # to the sign-in page
    client.force_login(user)
    assert client.get("/workers/").status_code == 403
    assert client.get("/api/v1/workers/").status_code == 403
    assert "Workers</a>" not in client.get("/targets/").content.decode()

    staff = django_user_model.objects.create_user("ops", password="ops-pass-123", is_staff=True)
    client.force_login(staff)
    page = client.get("/workers/")
    assert page.status_code == 200
    assert 'data-worker="phone@box" data-state="alive"' in page.content.decode()
    listed = client.get("/api/v1/workers/").json()
    assert [(w["hostname"], w["state"]) for w in listed] == [
        ("phone@box", "alive"),
        ("old@box", "stale"),
        ("left@box", "gone"),
    ]
    first = listed[0]
    assert first["targets"] == ["phone"] and not first["serves_all"]
    assert (first["load_1m"], first["load_5m"], first["load_15m"]) == (0.5, 0.25, 0.125)
    assert first["concurrency"] == 2 and first["current"] == []


def test_the_worker_list_names_the_stage_a_worker_runs(user, model, monkeypatch):
    monkeypatch.setattr(pipeline.app, "send_task", lambda *a, **k: type("R", (), {"id": "t"}))
    worker("busy@box")
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=modeled(user, "phone"),
        options=RunOptions.from_dict(["analyze"]),
    )
    pipeline.claim_stage(run.stages.get().pk, worker="busy@box")
    (busy,) = workers.worker_list()
    assert busy["current"] == [{"run": run.pk, "stage": "analyze", "progress": 0.0}]


def test_the_targets_page_counts_live_workers(client, user, shared):
    modeled(user, "phone")
    worker("phone@box", targets=["phone"], queues_=[f"{shared}.target.phone"])
    worker("dead@box", targets=["phone"], queues_=[f"{shared}.target.phone"], seen_s_ago=31)
    client.force_login(user)
    page = client.get("/targets/").content.decode()
    row = page[page.index(">phone</a>") :]
    assert '<td data-field="live-workers">1</td>' in row[: row.index("</tr>")]
    host = page[page.index(">host</a>") :]
    assert "none: its runs wait" in host[: host.index("</tr>")]


def test_a_broker_that_is_down_leaves_the_run_queued_and_it_is_sent_later(
    user, model, shared, monkeypatch, django_capture_on_commit_callbacks
):
    """Upload during a broker restart: no 500, the run stays queued and says why, and the
    reaper sends it once the broker answers again (seen in CI when a fault test restarted
    RabbitMQ under a browser upload)."""
    from kombu.exceptions import OperationalError

    def down(*_args, **_kwargs):
        raise OperationalError("[Errno 111] Connection refused")

    monkeypatch.setattr(pipeline.app, "send_task", down)
    with django_capture_on_commit_callbacks(execute=True):
        run = pipeline.create_run(
            owner=user, model=model, target=modeled(user, "phone"),
            options=RunOptions.from_dict(["analyze"]),
        )  # fmt: skip
    stage = run.stages.get()
    assert stage.status == "queued" and stage.task_id == ""
    assert stage.message == pipeline.BROKER_DOWN
    assert workers.refresh_waiting() == 0  # the broker's message is not overwritten

    monkeypatch.setattr(pipeline.app, "send_task", lambda *a, **k: type("R", (), {"id": "t2"}))
    pipeline.reap_stale_stages()
    stage.refresh_from_db()
    assert stage.task_id == "t2" and stage.message != pipeline.BROKER_DOWN
