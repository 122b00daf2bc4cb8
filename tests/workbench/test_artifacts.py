"""Artifacts download with their sha256, only for their owner; the CLI verifies them."""

from __future__ import annotations

import hashlib

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from engine.stages import RunOptions
from jobs.artifacts import save_artifact
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def artifact(user, monkeypatch, tmp_path):
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", lambda stage: None)
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(["analyze"]),
    )
    produced = tmp_path / "plan.json"
    produced.write_text('{"arena_bytes": 76}')
    return save_artifact(run.stages.get(), "memory_plan", produced)


def test_owner_downloads_the_artifact_with_its_sha256(user, artifact):
    api = APIClient()
    api.force_authenticate(user)
    listed = api.get(f"/api/v1/runs/{artifact.run_id}/artifacts/").json()
    assert [a["name"] for a in listed] == ["plan.json"]
    response = api.get(f"/api/v1/artifacts/{artifact.pk}/download/")
    body = b"".join(response.streaming_content)
    assert body == b'{"arena_bytes": 76}'
    assert response["X-Content-SHA256"] == hashlib.sha256(body).hexdigest() == artifact.sha256


def test_other_users_cannot_download(other_user, artifact, client):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=other_user).key}")
    assert api.get(f"/api/v1/artifacts/{artifact.pk}/download/").status_code == 404
    assert api.get(f"/api/v1/runs/{artifact.run_id}/artifacts/").status_code == 404
    client.force_login(other_user)
    assert client.get(f"/artifacts/{artifact.pk}/download/").status_code == 404


def test_run_page_lists_artifacts_with_sha256(client, user, artifact):
    client.force_login(user)
    page = client.get(f"/runs/{artifact.run_id}/").content.decode()
    assert "plan.json" in page and artifact.sha256 in page
