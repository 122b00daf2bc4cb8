"""Targets: presets for everyone, users' own modeled targets validated and versioned."""

from __future__ import annotations

import copy

import pytest
from rest_framework.test import APIClient

from workbench.models import Target

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(user):
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def phone(api):
    targets = api.get("/api/v1/targets/").json()["results"]
    return next(t for t in targets if t["name"].startswith("phone-"))


def test_presets_cover_the_issue_hardware(api):
    targets = {t["name"]: t for t in api.get("/api/v1/targets/").json()["results"]}
    assert targets["host"]["kind"] == "measured"
    kinds = {t["kind"] for t in targets.values()}
    assert kinds == {"measured", "modeled"}
    phone = next(t for n, t in targets.items() if n.startswith("phone-"))
    assert {"cpu_big", "cpu_little"} <= set(phone["units"])
    dsa = next(t for n, t in targets.items() if n.startswith("dsa-"))
    units = dsa["profile"]["units"]
    assert units[0]["local_buffer_bytes"] == 64 * 1024


def test_own_target_is_validated_versioned_and_private(api, phone, other_user):
    mine = copy.deepcopy(phone["profile"])
    mine.update(name="my-phone", version=1)
    created = api.post("/api/v1/targets/", mine, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["version"] == 1 and created.json()["builtin"] is False
    mine["units"][0]["mem_bw_gbps"] = 12.5
    updated = api.put(f"/api/v1/targets/{created.json()['id']}/", mine, format="json")
    assert updated.status_code == 200 and updated.json()["version"] == 2
    names = [t["name"] for t in api.get("/api/v1/targets/").json()["results"]]
    assert names.count("my-phone") == 1  # the list shows the newest version
    assert Target.objects.filter(name="my-phone").count() == 2
    other = APIClient()
    other.force_authenticate(other_user)
    assert other.get(f"/api/v1/targets/{created.json()['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda p: p["units"][0].update(mem_bw_gbps=-3), "units[0].mem_bw_gbps", "positive"),
        (
            lambda p: p["links"].append(
                {"from": "cpu_big", "to": "npu9", "latency_us": 1, "gbps": 1}
            ),
            "to",
            "npu9",
        ),
        (
            lambda p: p["units"][0].update(local_buffer_bytes=1 << 30, global_buffer_bytes=1 << 20),
            "local_buffer_bytes",
            "global",
        ),
    ],
    ids=["negative-bandwidth", "link-to-missing-unit", "local-larger-than-global"],
)
def test_invalid_profiles_name_the_field_and_reason(api, phone, change, field, reason):
    bad = copy.deepcopy(phone["profile"])
    bad["name"] = "broken"
    change(bad)
    response = api.post("/api/v1/targets/", bad, format="json")
    assert response.status_code == 400
    problems = response.json()["error"]["detail"]
    assert any(field in p["field"] and reason in p["reason"] for p in problems), problems
    assert not Target.objects.filter(name="broken").exists()


def test_builtin_targets_cannot_be_overwritten_or_deleted(api, phone):
    clash = copy.deepcopy(phone["profile"])
    response = api.post("/api/v1/targets/", clash, format="json")
    assert response.status_code == 400
    assert "built-in" in response.json()["error"]["message"]
    assert api.delete(f"/api/v1/targets/{phone['id']}/").status_code == 404


def test_browser_copy_edit_and_errors(client, user, phone):
    client.force_login(user)
    page = client.get(f"/targets/new/?from={phone['id']}").content.decode()
    assert f"{phone['name']}-copy" in page
    bad = client.post("/targets/new/", {"profile": '{"name": "x", "kind": "modeled", "units": 3}'})
    assert bad.status_code == 400
    assert "units" in bad.content.decode()
    not_json = client.post("/targets/new/", {"profile": "{nope"})
    assert "not valid JSON" in not_json.content.decode()
    detail = client.get(f"/targets/{phone['id']}/").content.decode()
    assert "Sources:" in detail and "unknown" in detail


def test_presets_get_a_new_version_only_when_they_change():
    from workbench.presets import ensure_presets, upsert_builtin_target

    first = {t.name: t.version for t in ensure_presets()}
    assert {t.name: t.version for t in ensure_presets()} == first  # a second migrate: same
    host = Target.objects.filter(name="host").order_by("-version").first()
    changed = {**host.profile, "description": "a new CPU"}
    assert upsert_builtin_target(changed).version == host.version + 1
    assert upsert_builtin_target(changed).version == host.version + 1  # and only once
