"""The dashboard at /: the latest runs with their answers, what to do on failure, and a
live feed of every run of the user over one websocket."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from tests.conftest import SQUEEZENET
from tests.workbench.test_compare import finished_run
from workbench.asgi import application
from workbench.events import publish_run
from workbench.models import Run, StageResult, Status, Target
from workbench.uploads import store_model_file


@pytest.fixture
def runs(user):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    done = finished_run(user, model, 8.0, 500.0, 6_000_000)
    StageResult.objects.create(
        run=done,
        stage="compile",
        position=3,
        status=Status.SUCCEEDED,
        result={"latency_ms": 4.0, "onnxruntime_latency_ms": 5.0, "speed_vs_onnxruntime": 1.25},
    )
    failed = Run.objects.create(
        owner=user,
        model=model,
        target=done.target,
        config={"stages": ["profile"]},
        status=Status.FAILED,
        error_code="time_limit",
        error_message="profile: stopped after its time limit of 60 s",
    )
    StageResult.objects.create(
        run=failed, stage="profile", position=0, status=Status.FAILED, error_code="time_limit"
    )
    return done, failed


@pytest.mark.django_db
def test_the_dashboard_answers_first(user, other_user, runs):
    done, failed = runs
    assert Client().get("/")["Location"].startswith("/accounts/login/")
    client = Client()
    client.force_login(user)
    page = client.get("/").content.decode()
    assert 'id="dashboard-runs"' in page and 'id="upload-form"' in page
    row = page[page.index(f'data-run-id="{done.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "1.25x onnxruntime" in row and "verdict-good" in row
    assert "8.000 ms measured" in row and "6.00 MB, 1.00x the bound" in row
    # Hovering says what each answer is.
    assert 'title="measured on AMD EPYC, median of 100 runs, default threads (2, one' in row
    failed_row = page[page.index(f'data-run-id="{failed.pk}"') :]
    failed_row = failed_row[: failed_row.index("</tr>")]
    assert "stopped after its time limit" in failed_row
    assert "raise WORKBENCH_TIME_LIMIT_&lt;STAGE&gt;" in failed_row
    assert f'action="/runs/{failed.pk}/retry/"' in failed_row
    # One row alone, for the live page to swap in; not another user's.
    assert f'data-run-id="{done.pk}"' in client.get(f"/runs/{done.pk}/row/").content.decode()
    mallory = Client()
    mallory.force_login(other_user)
    assert mallory.get(f"/runs/{done.pk}/row/").status_code == 404
    assert f'data-run-id="{done.pk}"' not in mallory.get("/").content.decode()


async def _feed(user, other_user, run_id: int) -> list[dict]:
    mine = WebsocketCommunicator(
        application, "/ws/dashboard/", headers=[(b"origin", b"http://localhost")]
    )
    mine.scope["user"] = user
    theirs = WebsocketCommunicator(
        application, "/ws/dashboard/", headers=[(b"origin", b"http://localhost")]
    )
    theirs.scope["user"] = other_user
    assert (await mine.connect(timeout=10))[0] and (await theirs.connect(timeout=10))[0]
    try:
        first = await mine.receive_json_from(timeout=10)  # the active run's snapshot
        await sync_to_async(publish_run)(run_id)
        second = await mine.receive_json_from(timeout=10)
        assert await theirs.receive_nothing(timeout=1)
        return [first, second]
    finally:
        await mine.disconnect()
        await theirs.disconnect()


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_feed_carries_every_run_of_the_user_only(user, other_user):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    run = Run.objects.create(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze"]},
        status=Status.RUNNING,
    )
    events = async_to_sync(_feed)(user, other_user, run.pk)
    assert [e["type"] for e in events] == ["snapshot", "progress"]
    assert all(e["run"]["id"] == run.pk for e in events)
    anonymous = WebsocketCommunicator(
        application, "/ws/dashboard/", headers=[(b"origin", b"http://localhost")]
    )

    async def refused():
        connected, code = await anonymous.connect(timeout=10)
        await anonymous.disconnect()
        return connected, code

    assert async_to_sync(refused)() == (False, 4404)


@pytest.mark.django_db
def test_lists_read_the_stored_figures_not_the_results(user, runs):
    """A finished stage keeps its headline figures beside its result: the dashboard, the
    history and the figures endpoint never load a result (which can be megabytes)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from workbench.pipeline import stage_figures

    for stage in StageResult.objects.exclude(result=None):
        stage.figures = stage_figures(stage.stage, stage.result)
        stage.save(update_fields=["figures"])
    client = Client()
    client.force_login(user)
    done, _ = runs
    for url in ("/", f"/runs/{done.pk}/row/", f"/api/v1/runs/{done.pk}/figures/"):
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200
        assert len(queries) <= 12, url
        loaded = [q["sql"] for q in queries if '"workbench_stageresult"."result"' in q["sql"]]
        assert not loaded, url
    assert "1.25x onnxruntime" in client.get("/").content.decode()
