"""Faults against the real services, each bounded in time: a task message delivered twice,
RabbitMQ restarted with runs queued and with a worker connected, PostgreSQL refusing the
worker for 10 s in the middle of a stage, a stage past its time or memory limit. After each: no run
stuck, none lost, none run twice. (A worker killed mid-stage: test_worker.py.)"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
from django.db import connection

from tests.conftest import wait_until
from tests.integration.runs import start_run
from workbench import pipeline
from workbench.models import Run, StageResult

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DONE = ("succeeded", "failed", "cancelled")


def finished(run: Run, timeout_s: float, *, reap: bool = False) -> Run:
    """The run once it ended. ``reap``: also fail stages whose worker went silent, as a page
    view or beat would (only where the test makes a worker silent: a stage's native step can
    hold the GIL past the tests' 5 s staleness on a slow machine)."""

    def done():
        if reap:
            pipeline.reap_stale_stages()
        return Run.objects.get(pk=run.pk).status in DONE

    wait_until(done, timeout_s=timeout_s, interval_s=0.5, what=f"run {run.pk} to finish")
    return Run.objects.get(pk=run.pk)


def test_a_task_delivered_twice_runs_once(start_worker, user, model):
    start_worker()
    run = start_run(user, model, ["analyze"])
    stage = StageResult.objects.get(run=run)
    pipeline.enqueue_stage(stage)  # the same message again, as a broker redelivery would
    pipeline.enqueue_stage(stage)
    assert finished(run, 90).status == "succeeded"
    time.sleep(3)  # the duplicates are consumed by now; they must change nothing
    stage.refresh_from_db()
    assert stage.status == "succeeded" and stage.attempts == 1
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def _rabbitmqctl(*args: str) -> None:
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        pytest.fail("rabbitmqctl is not installed (bin/services-up starts RabbitMQ with it)")
    subprocess.run([tool, *args], check=True, capture_output=True, timeout=120)


def restart_rabbitmq() -> None:
    _rabbitmqctl("stop_app")
    _rabbitmqctl("start_app")
    _rabbitmqctl("await_startup")


def test_runs_survive_a_rabbitmq_restart(start_worker, user, model):
    queued = [start_run(user, model, ["analyze"]) for _ in range(3)]  # no worker yet
    started = time.monotonic()
    restart_rabbitmq()
    worker = start_worker()
    for run in queued:
        assert finished(run, 120).status == "succeeded"
    # and with the worker connected while the broker goes away and comes back
    restart_rabbitmq()
    after = start_run(user, model, ["analyze"])
    assert finished(after, 120).status == "succeeded", worker.log()[-2000:]
    for run in [*queued, after]:
        assert StageResult.objects.get(run=run).attempts == 1
    assert time.monotonic() - started < 300


def _block_database(blocked: bool) -> None:
    """Refuse (or allow again) connections to the test database, and drop every connection
    but this test's own: the worker sees the database gone, as in an outage."""
    import psycopg

    db = connection.settings_dict
    mine = connection.cursor().connection.info.backend_pid
    admin = psycopg.connect(
        dbname="postgres",
        user=db["USER"],
        password=db["PASSWORD"] or None,
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
    )
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            allow = "false" if blocked else "true"
            cursor.execute(f'ALTER DATABASE "{db["NAME"]}" WITH ALLOW_CONNECTIONS {allow}')
            if blocked:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> %s",
                    [db["NAME"], mine],
                )
    finally:
        admin.close()


def test_a_database_outage_mid_stage_leaves_no_run_stuck(live_settings, start_worker, user, model):
    worker = start_worker()
    run = start_run(user, model, ["profile"], window_s=8.0)
    wait_until(
        lambda: StageResult.objects.get(run=run, stage="profile").status == "running",
        timeout_s=60,
        what="the profile stage to start",
    )
    _block_database(True)
    try:
        time.sleep(10)
    finally:
        _block_database(False)
    ended = finished(run, 120, reap=True)
    # either the stage got through (its retries outlasted the outage) or it says why not
    assert ended.status in ("succeeded", "failed"), ended.status
    if ended.status == "failed":
        assert ended.error_message, "a failed run says why"
    stage = StageResult.objects.get(run=run, stage="profile")
    assert stage.status in ("succeeded", "failed")
    # the worker is still serving: a new run completes
    after = start_run(user, model, ["analyze"])
    assert finished(after, 120).status == "succeeded", worker.log()[-3000:]


def test_a_stage_past_its_time_limit_is_stopped_and_says_so(
    live_settings, start_worker, user, model
):
    # the worker enqueues the profile stage after analyze: the limit is its setting
    start_worker(WORKBENCH_TIME_LIMIT_PROFILE="3")
    run = start_run(user, model, ["profile"], window_s=60.0)
    ended = finished(run, 120)
    assert ended.status == "failed", ended.error_message
    stage = StageResult.objects.get(run=run, stage="profile")
    assert stage.error_code == "time_limit", ended.error_message
    assert "ran past its 3 s limit" in stage.error_message


def test_a_stage_past_its_memory_limit_is_stopped_and_says_so(
    live_settings, start_worker, user, model
):
    # 1 MB: any stage's process is over it at the first heartbeat
    worker = start_worker(WORKBENCH_STAGE_MEMORY_BYTES=str(1 << 20))
    run = start_run(user, model, ["profile"], window_s=60.0)
    ended = finished(run, 120)
    assert ended.status == "failed", worker.log()[-2000:]
    stopped = StageResult.objects.filter(run=run, error_code="memory_limit")
    assert stopped.exists(), list(StageResult.objects.filter(run=run).values("stage", "status"))
    assert "over the worker's limit of 0.00 GB" in stopped.first().error_message
