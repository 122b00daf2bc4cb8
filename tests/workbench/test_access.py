"""Every model and run belongs to a user; anyone else gets a 404, never the data."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from engine.stages import RunOptions
from tests.conftest import SQUEEZENET
from workbench import pipeline
from workbench.models import Run, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


@pytest.fixture
def owned(user, monkeypatch):
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", lambda stage: None)
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    target = Target.objects.get(name="host")
    run = pipeline.create_run(
        owner=user, model=model, target=target, options=RunOptions.from_dict(["analyze"])
    )
    return model, run


def test_other_users_ids_are_404_in_pages(client, other_user, owned):
    model, run = owned
    client.force_login(other_user)
    for url in (f"/models/{model.pk}/", f"/runs/{run.pk}/"):
        assert client.get(url).status_code == 404
    assert client.post(f"/runs/{run.pk}/cancel/").status_code == 404
    assert client.post(f"/models/{model.pk}/delete/").status_code == 404
    assert client.post(f"/models/{model.pk}/runs/", {"stages": ["analyze"]}).status_code == 404


def test_other_users_ids_are_404_in_the_api(other_user, owned):
    model, run = owned
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=other_user).key}")
    for url in (
        f"/api/v1/models/{model.pk}/",
        f"/api/v1/runs/{run.pk}/",
        f"/api/v1/runs/{run.pk}/stages/analyze/",
    ):
        response = api.get(url)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 404
    assert api.get("/api/v1/models/").json()["results"] == []
    created = api.post("/api/v1/runs/", {"model": model.pk}, format="json")
    assert created.status_code == 400
    assert "no model" in str(created.json()["error"]["detail"])
    assert Run.objects.count() == 1


def test_api_requires_a_token_or_session(owned):
    response = APIClient().get("/api/v1/models/")
    assert response.status_code in (401, 403)
    assert "credentials" in response.json()["error"]["message"].lower()


def test_pages_require_sign_in(client, owned):
    response = client.get("/models/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_owner_sees_run_and_can_cancel_it(user, owned):
    model, run = owned
    api = APIClient()
    api.force_authenticate(user)
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["status"] == "queued"
    assert [s["stage"] for s in body["snapshot"]["stages"]] == ["analyze"]
    cancelled = api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert api.post(f"/api/v1/runs/{run.pk}/cancel/").status_code == 409


def test_run_request_validation_is_explained(user, owned):
    model, _ = owned
    api = APIClient()
    api.force_authenticate(user)
    bad_stage = api.post(
        "/api/v1/runs/", {"model": model.pk, "stages": ["teleport"]}, format="json"
    )
    assert bad_stage.status_code == 400
    assert "teleport" in str(bad_stage.json()["error"]["detail"])
    bad_target = api.post("/api/v1/runs/", {"model": model.pk, "target": "mars"}, format="json")
    assert "no target 'mars'" in str(bad_target.json()["error"]["detail"])
    bad_shape = api.post(
        "/api/v1/runs/", {"model": model.pk, "input_shapes": "data=1xAx3"}, format="json"
    )
    assert bad_shape.status_code == 400
    ok = api.post(
        "/api/v1/runs/",
        {"model": model.pk, "stages": ["profile"], "input_shapes": {"data_0": [1, 3, 224, 224]}},
        format="json",
    )
    assert ok.status_code == 201
    # analyze always runs first: later stages read its results.
    assert ok.json()["config"]["stages"] == ["analyze", "profile"]


def test_targets_include_the_measured_host(user):
    api = APIClient()
    api.force_authenticate(user)
    targets = api.get("/api/v1/targets/").json()["results"]
    host = next(t for t in targets if t["name"] == "host")
    assert host["kind"] == "measured"
    assert host["units"] == ["cpu"]
    assert host["profile"]["machine"]["logical_cores"] >= 1
