"""Abuse limits and the token lifecycle: sign-in failures, sign-up, token requests, runs
and uploads are rate limited; active runs and stored bytes have quotas; API tokens expire,
can be listed and revoked, and die with a password change. Each refusal names the limit
and what to do, and leaves nothing behind."""

from __future__ import annotations

import re
from datetime import timedelta

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from engine.stages import RunOptions
from jobs.artifacts import save_artifact
from tests.conftest import SQUEEZENET
from workbench import limits, pipeline
from workbench.models import Artifact, OnnxModel, Run, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db


def sign_in(client, password: str):
    return client.post("/accounts/login/", {"username": "alice", "password": password})


def test_failed_sign_ins_are_limited_per_account_and_address(user):
    client = Client()
    for _ in range(5):
        response = sign_in(client, "wrong")
        assert response.status_code == 200  # the form again, with its error
    response = sign_in(client, "alice-pass-123")  # right, but too late
    assert response.status_code == 429
    assert "too many failed sign-ins for this account from this address" in response.text
    assert "the limit is 5 per 15 min" in response.text
    assert 0 < int(response["Retry-After"]) <= 2 * 900
    assert "_auth_user_id" not in client.session
    # another account from the same address is not locked by these five
    other = Client().post("/accounts/login/", {"username": "bob", "password": "x"})
    assert other.status_code == 200


def test_the_token_endpoint_shares_the_sign_in_limits(user):
    client = APIClient()
    response = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert len(body["token"]) == 40 and body["key_ends_with"] == body["token"][-4:]
    assert body["expired"] is False
    for _ in range(5):
        wrong = client.post(
            "/api/v1/auth/token/", {"username": "alice", "password": "no"}, format="json"
        )
        assert wrong.status_code == 400
        assert wrong.json()["error"]["message"] == "wrong username or password"
    locked = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "alice-pass-123"}, format="json"
    )
    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "throttled"
    assert "too many failed sign-ins" in locked.json()["error"]["message"]
    assert locked["Retry-After"]


def test_sign_up_can_be_closed_and_is_rate_limited(settings, django_user_model):
    settings.SIGNUP_OPEN = False
    response = Client().post(
        "/accounts/signup/",
        {"username": "eve", "password1": "a-Long-pass-123", "password2": "a-Long-pass-123"},
    )
    assert response.status_code == 403
    assert "Sign-up is turned off" in response.text
    assert not django_user_model.objects.filter(username="eve").exists()
    settings.SIGNUP_OPEN = True
    for i in range(5):
        response = Client().post(
            "/accounts/signup/",
            {"username": f"eve{i}", "password1": "a-Long-pass-123", "password2": "a-Long-pass-123"},
        )
        assert response.status_code == 302
    response = Client().post(
        "/accounts/signup/",
        {"username": "eve9", "password1": "a-Long-pass-123", "password2": "a-Long-pass-123"},
    )
    assert response.status_code == 429
    assert "too many accounts created from this address" in response.text
    assert not django_user_model.objects.filter(username="eve9").exists()


def test_runs_are_rate_limited_and_active_runs_have_a_quota(
    api, user, enqueued, settings, monkeypatch
):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    body = {"model": model.pk, "stages": ["analyze"]}
    settings.MAX_ACTIVE_RUNS = 2
    for _ in range(2):
        assert api.post("/api/v1/runs/", body, format="json").status_code == 201
    refused = api.post("/api/v1/runs/", body, format="json")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "too_many_active_runs"
    assert "you have 2 runs queued or running" in error["message"]
    assert "cancel some" in error["message"]
    assert Run.objects.filter(owner=user).count() == 2

    settings.MAX_ACTIVE_RUNS = 100
    monkeypatch.setenv("WORKBENCH_RATE_RUNS", "3/3600")
    assert api.post("/api/v1/runs/", body, format="json").status_code == 201
    refused = api.post("/api/v1/runs/", body, format="json")
    assert refused.status_code == 429
    assert "too many runs started: the limit is 3 per 60 min" in refused.json()["error"]["message"]
    assert Run.objects.filter(owner=user).count() == 3
    # the web form answers with the same message, as a page
    web = Client()
    web.force_login(user)
    host = Target.objects.get(name="host")
    page = web.post(f"/models/{model.pk}/runs/", {"stages": ["analyze"], "target": host.pk})
    assert page.status_code == 429
    assert "too many runs started" in page.text
    assert Run.objects.filter(owner=user).count() == 3


def test_stored_bytes_have_a_quota(api, user, settings, _media_root):
    settings.MAX_STORED_BYTES = 10_000  # squeezenet is 15.6 KB
    response = api.post(
        "/api/v1/models/",
        {"file": SimpleUploadedFile("sq.onnx", SQUEEZENET.read_bytes())},
        format="multipart",
    )
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "storage_quota"
    assert "over your quota of 0.00 GB" in error["message"]
    assert "Delete models, input sets or runs (their artifacts)" in error["message"]
    assert not OnnxModel.objects.exists()
    assert (
        not [p for p in (_media_root / "models").rglob("*") if p.is_file()]
        if (_media_root / "models").exists()
        else True
    )


def test_artifacts_count_in_the_quota_and_the_account_page_shows_it(
    api, user, settings, tmp_path, monkeypatch
):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    monkeypatch.setattr("workbench.pipeline.enqueue_stage", lambda stage: None)
    run = pipeline.create_run(
        owner=user,
        model=model,
        target=Target.objects.get(name="host"),
        options=RunOptions.from_dict(["analyze"]),
    )
    produced = tmp_path / "lib.so"
    produced.write_bytes(b"\0" * 30_000)
    artifact = save_artifact(run.stages.get(), "compiled_library", produced)
    # a retried run's kept artifact is a second row on the same file: stored once
    Artifact.objects.create(
        run=run,
        stage="compile",
        kind=artifact.kind,
        file=artifact.file,
        name="kept.so",
        sha256=artifact.sha256,
        size_bytes=artifact.size_bytes,
    )
    stored = limits.stored_bytes(user)
    assert (stored.models, stored.input_sets, stored.artifacts) == (model.size_bytes, 0, 30_000)
    # room for the model twice over, but not with the artifact
    settings.MAX_STORED_BYTES = 2 * model.size_bytes + 1_000
    npz = tmp_path / "x.npz"
    np.savez(npz, **{model.inputs[0]["name"]: np.zeros((1,), np.float32)})
    response = api.post(
        f"/api/v1/models/{model.pk}/inputs/",
        {"file": SimpleUploadedFile("x.npz", npz.read_bytes())},
        format="multipart",
    )
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "storage_quota"

    web = Client()
    web.force_login(user)
    page = web.get("/accounts/").text
    rows = re.findall(r"<tr><t[dh][^>]*>([^<]+)</t[dh]><td>([^<]+)</td><td>([^<]+)</td></tr>", page)
    assert rows == [
        ("Models", f"{model.size_bytes / 1e3:.2f} kB", str(model.size_bytes)),
        ("Input sets", "0 B", "0"),
        ("Run artifacts", "30.00 kB", "30000"),
        (
            "Used of your quota",
            f"{(model.size_bytes + 30_000) / 1e3:.2f} kB of "
            f"{settings.MAX_STORED_BYTES / 1e3:.2f} kB",
            f"{model.size_bytes + 30_000} of {settings.MAX_STORED_BYTES}",
        ),
    ]


def test_tokens_expire_list_without_keys_and_revoke(user, settings):
    token = Token.objects.create(user=user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    listed = client.get("/api/v1/auth/token/")
    assert listed.status_code == 200
    [entry] = listed.json()["results"]
    assert entry["current"] is True and entry["key_ends_with"] == token.key[-4:]
    assert token.key not in listed.text

    settings.API_TOKEN_DAYS = 1
    token.created = timezone.now() - timedelta(days=2)
    token.save()  # a saved token is read again, not taken from the token cache
    expired = client.get("/api/v1/models/")
    assert expired.status_code == 401
    assert "the API token expired on" in expired.json()["error"]["message"]
    assert "/accounts/token/" in expired.json()["error"]["message"]

    settings.API_TOKEN_DAYS = 90
    assert client.get("/api/v1/models/").status_code == 200
    assert client.delete("/api/v1/auth/token/").status_code == 204
    assert client.get("/api/v1/models/").status_code == 401
    assert not Token.objects.filter(user=user).exists()


def test_a_password_change_revokes_the_api_token(user):
    Token.objects.create(user=user)
    web = Client()
    web.force_login(user)
    page = web.get("/accounts/password/")
    assert page.status_code == 200 and "revokes your API token" in page.text
    response = web.post(
        "/accounts/password/",
        {
            "old_password": "alice-pass-123",
            "new_password1": "a-New-pass-456",
            "new_password2": "a-New-pass-456",
        },
    )
    assert response.status_code == 302 and response["Location"] == "/accounts/password/done/"
    assert not Token.objects.filter(user=user).exists()
    # and from the token page: revoke
    web.post("/accounts/token/", {"action": "replace"})
    assert Token.objects.filter(user=user).count() == 1
    web.post("/accounts/token/", {"action": "revoke"})
    assert not Token.objects.filter(user=user).exists()


def test_a_rate_holds_across_its_window_boundary(monkeypatch):
    """Sliding window: five uses just before an hour boundary still count just after it (a
    fixed window would reset and let five more through), and decay over the next hour."""
    from workbench import limits

    monkeypatch.setenv("WORKBENCH_RATE_SIGNUP", "5/3600")
    boundary = 1_000 * 3600.0
    for _ in range(5):
        limits.check("signup", "1.2.3.4", now=boundary - 1)
        limits.record("signup", "1.2.3.4", now=boundary - 1)
    with pytest.raises(limits.LimitExceeded) as refused:
        limits.check("signup", "1.2.3.4", now=boundary + 1)
    # One use is free again once a fifth of the previous window's count has decayed.
    assert 719 <= refused.value.retry_after_s <= 721
    with pytest.raises(limits.LimitExceeded):
        limits.check("signup", "1.2.3.4", now=boundary + 700)
    limits.check("signup", "1.2.3.4", now=boundary + 730)
    limits.check("signup", "5.6.7.8", now=boundary + 1)  # another address is unaffected
    # Five uses early in a window: Retry-After is when the count lets one more through,
    # not sooner (asking then would be refused again).
    for _ in range(5):
        limits.record("signup", "2.2.2.2", now=boundary + 60)
    with pytest.raises(limits.LimitExceeded) as early:
        limits.check("signup", "2.2.2.2", now=boundary + 61)
    wait = early.value.retry_after_s
    with pytest.raises(limits.LimitExceeded):
        limits.check("signup", "2.2.2.2", now=boundary + 61 + wait - 2)
    limits.check("signup", "2.2.2.2", now=boundary + 61 + wait)
    # A rate of 0 refuses everything and says when to look again, not "now".
    monkeypatch.setenv("WORKBENCH_RATE_SIGNUP", "0/60")
    with pytest.raises(limits.LimitExceeded) as off:
        limits.check("signup", "9.9.9.9", now=boundary)
    assert off.value.retry_after_s >= 1
