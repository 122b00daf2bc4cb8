"""A remote target end to end: a TVM RPC tracker and a device server on loopback, the
target registered through the API, a real Celery worker runs profile and compile on the
device, and the pages name the device and show its tracker's queue."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient
from rpc_devices import loopback_tracker

from engine.stages import RunOptions
from tests.conftest import wait_until
from workbench import pipeline
from workbench.models import Run, Target

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_profile_and_compile_run_on_a_device_behind_a_tracker(start_worker, user, model, client):
    with loopback_tracker({"it-board": 1}) as loop:
        api = APIClient()
        api.force_authenticate(user)
        document = {
            "name": "lab-board",
            "kind": "remote",
            "units": [{"name": "cpu", "kind": "cpu"}],
            "remote": {"tracker": loop.address, "key": "it-board", "wait_s": 60},
        }
        created = api.post("/api/v1/targets/", document, format="json")
        assert created.status_code == 201, created.content
        bad = api.post(
            "/api/v1/targets/", {**document, "remote": {"tracker": "x", "key": "k"}}, format="json"
        )
        assert bad.status_code == 400 and "remote.tracker" in bad.content.decode()

        start_worker()
        run = pipeline.create_run(
            owner=user,
            model=model,
            target=Target.objects.get(pk=created.json()["id"]),
            # the TVM kernels on a device have their test (tests/engine/test_remote_devices.py)
            options=RunOptions.from_dict(
                ["analyze", "profile", "compile"],
                {"profile": {"window_s": 0.3, "tvm_kernels": False}},
            ),
        )
        wait_until(
            lambda: Run.objects.get(pk=run.pk).status in ("succeeded", "failed"),
            timeout_s=600,
            what="the run on the device to end",
        )
        run.refresh_from_db()
        stages = {s.stage: s for s in run.stages.all()}
        assert run.status == "succeeded", {k: (s.status, s.message) for k, s in stages.items()}
        profile, compiled = stages["profile"].result, stages["compile"].result
        assert profile["measured"] is True and profile["measured_on"]["key"] == "it-board"
        assert compiled["measured_on"]["address"].startswith("127.0.0.1:")
        assert compiled["outputs_match"] is True and compiled["latency_ms"] > 0
        assert run.artifacts.filter(kind="compiled_library").exists()

        client.force_login(user)
        page = client.get(f"/runs/{run.pk}/").content.decode()
        assert "it-board" in page  # the profile says where it was measured
        targets = client.get("/targets/").content.decode()
        assert f"Tracker {loop.address}" in targets and 'data-key="it-board"' in targets
        devices = api.get(f"/api/v1/targets/{created.json()['id']}/devices/").json()
        queue = devices["trackers"][0]["keys"][0]
        assert queue["key"] == "it-board" and queue["devices"] == 1
    # the tracker is gone: the page says so instead of failing
    from django.core.cache import cache

    cache.clear()
    targets = client.get("/targets/").content.decode()
    assert "cannot be reached" in targets
