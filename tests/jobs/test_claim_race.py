"""A worker's claim racing the reaper on two real database connections.

The case CI met: PostgreSQL went away mid-stage, the stage's heartbeat went stale, and as the
database came back the task's retry claimed the stage while the reaper was failing it. The
claim waited on the reaper's row lock and then went ahead on what it had read before the
lock: the run ended failed with its stage running again."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from engine.stages import RunOptions
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import Run, StageResult, Target
from workbench.uploads import store_model_file

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stale_stage(user, enqueued, settings):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(["analyze"], None),
    )
    stage = run.stages.get(stage="analyze")
    assert pipeline.claim_stage(stage.pk, worker="celery@gone") is not None
    StageResult.objects.filter(pk=stage.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=settings.RUN_STALE_SECONDS + 5)
    )
    return stage


def _in_thread(fn, out: dict, key: str):
    def body():
        try:
            out[key] = fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            out[key] = e
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _hold_lock_then(change, locked: threading.Event, release: threading.Event):
    """``change`` in a transaction that stays open until ``release``: the row stays locked."""

    def body():
        with transaction.atomic():
            change()
            locked.set()
            assert release.wait(30)
        return True

    return body


def _waiting_on_a_lock(timeout_s: float = 10.0) -> bool:
    """Some backend of this database is blocked on a lock (the claim, behind the reaper)."""
    deadline = timezone.now() + timedelta(seconds=timeout_s)
    with connection.cursor() as cursor:
        while timezone.now() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return True
            threading.Event().wait(0.05)
    return False


@pytest.mark.parametrize("rival", ["reaper", "cancel"])
def test_a_claim_never_revives_a_stage_failed_or_cancelled_while_it_waited(stale_stage, rival):
    locked, release, out = threading.Event(), threading.Event(), {}
    run = Run.objects.get(pk=stale_stage.run_id)
    if rival == "reaper":
        change = _hold_lock_then(lambda: pipeline.reap_stale_stages(), locked, release)
    else:
        change = _hold_lock_then(lambda: pipeline.cancel_run(run), locked, release)
    rival_thread = _in_thread(change, out, "rival")
    assert locked.wait(30), out
    claim = _in_thread(
        lambda: pipeline.claim_stage(stale_stage.pk, worker="celery@retry"), out, "claim"
    )
    try:
        assert _waiting_on_a_lock(), "the claim should wait on the rival's row lock"
    finally:
        release.set()
        rival_thread.join(30)
        claim.join(30)
    assert out["rival"] is True, out
    assert out["claim"] is None, out  # not claimed
    stage = StageResult.objects.get(pk=stale_stage.pk)
    ended = Run.objects.get(pk=run.pk)
    expected = "failed" if rival == "reaper" else "cancelled"
    assert (stage.status, ended.status) == (expected, expected)
    assert stage.worker == "celery@gone" and stage.attempts == 1
