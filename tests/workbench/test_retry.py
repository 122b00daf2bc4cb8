"""Retrying a failed or cancelled run: a new run, the succeeded stages kept with their
results and artifacts, the rest queued again; the old run stays as it was."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import SQUEEZENET
from workbench.models import Artifact, Run, StageResult, Status, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed_run(user):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    run = Run.objects.create(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze", "compile", "accuracy"]},
        status=Status.FAILED,
        error_message="accuracy: boom",
    )
    StageResult.objects.create(
        run=run, stage="analyze", position=0, status=Status.SUCCEEDED, result={"macs": 1}
    )
    StageResult.objects.create(
        run=run, stage="compile", position=1, status=Status.SUCCEEDED, result={"speed": 2}
    )
    StageResult.objects.create(
        run=run, stage="accuracy", position=2, status=Status.FAILED, error_message="boom"
    )
    Artifact.objects.create(
        run=run,
        stage="compile",
        kind="compiled_library",
        file=f"artifacts/run-{run.pk}/compile/model.tar.gz",
        name="model.tar.gz",
        sha256="s",
        size_bytes=1,
    )
    return run


def test_the_api_retries_a_failed_run_keeping_what_succeeded(
    user, failed_run, enqueued, django_capture_on_commit_callbacks
):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"/api/v1/runs/{failed_run.pk}/retry/")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["retry_of"] == failed_run.pk and body["status"] == "queued"
    new = Run.objects.get(pk=body["id"])
    stages = {s.stage: s for s in new.stages.all()}
    assert stages["analyze"].status == "succeeded" and stages["analyze"].result == {"macs": 1}
    assert stages["compile"].message == f"kept from run {failed_run.pk}"
    assert stages["accuracy"].status == "queued"
    assert [s.stage for s in enqueued] == ["accuracy"]  # only what failed runs again
    assert new.artifacts.get().file == failed_run.artifacts.get().file
    failed_run.refresh_from_db()
    assert failed_run.status == "failed" and failed_run.stages.count() == 3  # history kept
    again = client.post(f"/api/v1/runs/{new.pk}/retry/")
    assert again.status_code == 409
    assert "only a failed or cancelled run can be retried" in again.json()["error"]["message"]


def test_the_run_page_offers_retry_and_links_the_attempts(
    user, failed_run, enqueued, django_capture_on_commit_callbacks
):
    failed_run.stages.update(result=None)  # the cards of real results are tested elsewhere
    web = Client()
    web.force_login(user)
    page = web.get(f"/runs/{failed_run.pk}/")
    assert 'id="retry-form"' in page.text
    with django_capture_on_commit_callbacks(execute=True):
        response = web.post(f"/runs/{failed_run.pk}/retry/")
    new = Run.objects.get(retry_of=failed_run)
    assert response["Location"] == f"/runs/{new.pk}/"
    page = web.get(f"/runs/{new.pk}/")
    assert f'Retry of <a href="/runs/{failed_run.pk}/">run #{failed_run.pk}</a>' in page.text
    assert 'id="retry-form"' not in page.text
    old = web.get(f"/runs/{failed_run.pk}/")
    assert f'Retried as <a href="/runs/{new.pk}/">run #{new.pk}</a>' in old.text


def test_another_users_run_cannot_be_retried(other_user, failed_run):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=other_user).key}")
    assert client.post(f"/api/v1/runs/{failed_run.pk}/retry/").status_code == 404
    assert Run.objects.count() == 1
