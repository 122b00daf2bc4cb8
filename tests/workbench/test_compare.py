"""Comparing runs and reading their headline figures: the API (JSON and CSV), the page,
the run list's Compare button and the self-contained HTML export."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.conftest import SQUEEZENET
from workbench.models import Run, StageResult, Status, Target
from workbench.uploads import store_model_file

pytestmark = pytest.mark.django_db

ENV = {
    "machine": {"cpu_model": "AMD EPYC", "usable_cores": 2, "physical_cores": 2},
    "intra_op_threads": 0,
}


def finished_run(owner, model, latency_ms: float, conv_us: float, arena: int) -> Run:
    run = Run.objects.create(
        owner=owner,
        model=model,
        target=Target.objects.get(name="host"),
        config={"stages": ["analyze", "profile", "memory"]},
        status=Status.SUCCEEDED,
    )
    results = {
        "analyze": {"params": 1_235_496, "macs": 349_151_936, "nodes": 66},
        "profile": {
            "measured": True,
            "unit": "cpu",
            "latency_ms": latency_ms,
            "latency_runs": 100,
            "latency": {"p90": latency_ms * 1.2, "spread_pct": 2.0},
            "environment": ENV,
            "ops": [
                {"name": "conv1", "op_type": "Conv", "latency_us": conv_us},
                {"name": "relu1", "op_type": "Relu", "latency_us": 12.0},
            ],
        },
        "memory": {
            "best": "greedy-by-size",
            "planners": {"greedy-by-size": arena},
            "ratios": {"greedy-by-size": 1.0},
            "lower_bound_bytes": arena,
            "live_bytes": [arena // 2, arena, arena // 4],
        },
    }
    for i, (stage, result) in enumerate(results.items()):
        StageResult.objects.create(
            run=run, stage=stage, position=i, status=Status.SUCCEEDED, result=result
        )
    return run


@pytest.fixture
def two_runs(user):
    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    return (
        finished_run(user, model, 8.0, 500.0, 6_000_000),
        finished_run(user, model, 6.0, 300.0, 5_000_000),
    )


def test_the_api_compares_runs_with_deltas(api, two_runs):
    a, b = two_runs
    response = api.get(f"/api/v1/compare/?runs={a.pk},{b.pk}")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert [r["id"] for r in body["runs"]] == [a.pk, b.pk] and body["reference"] == a.pk
    rows = {r["key"]: r for r in body["figures"]}
    (latency,) = rows["profile.latency_ms"]["deltas"]
    assert latency["direction"] == "better" and latency["pct"] == pytest.approx(-25.0)
    assert rows["profile.latency_ms"]["values"][0]["basis"].startswith("measured on AMD EPYC")
    assert rows["memory.arena_bytes"]["deltas"][0]["direction"] == "better"
    conv = next(r for r in body["ops"]["rows"] if r["name"] == "conv1")
    assert conv["latency_us"] == [500.0, 300.0] and conv["delta_pct"] == [-40.0]
    assert [c["run"] for c in body["memory"]] == [a.pk, b.pk]

    figures = api.get(f"/api/v1/runs/{b.pk}/figures/").json()
    keys = [f["key"] for f in figures["figures"]]
    assert "profile.latency_ms" in keys and "memory.arena_bytes" in keys


def test_tables_export_as_csv(api, two_runs):
    a, b = two_runs
    response = api.get(f"/api/v1/compare/?runs={a.pk},{b.pk}&table=figures")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    latency = next(r for r in rows if r["figure"] == "profile.latency_ms")
    assert float(latency[f"run {b.pk}"]) == 6.0 and latency[f"delta % run {b.pk}"] == "-25.00"
    ops = api.get(f"/api/v1/compare/?runs={a.pk},{b.pk}&table=ops").content.decode()
    assert ops.splitlines()[1].startswith("conv1,Conv,500.000,300.000,-40.00")
    assert api.get(f"/api/v1/compare/?runs={a.pk},{b.pk}&table=x").status_code == 400


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [
        ("", 400, "give two or more run ids"),
        ("?runs=1", 400, "give two or more run ids"),
        ("?runs=1,abc", 400, "'abc' is not a run id"),
        ("?runs=1,1", 400, "each run once"),
        ("?runs=" + ",".join(str(i) for i in range(1, 11)), 400, "at most 8"),
        ("?runs=1,99999999999999999999", 400, "is not a run id"),
        ("?runs=%C2%B2,1", 400, "is not a run id"),  # a digit to str.isdigit, not to int()
    ],
)
def test_bad_compare_requests_are_400(api, query, status, message):
    response = api.get(f"/api/v1/compare/{query}")
    assert response.status_code == status
    assert message in response.json()["error"]["message"]


def test_another_users_runs_are_404_and_anonymous_is_401(two_runs, other_user):
    a, b = two_runs
    mallory = APIClient()
    mallory.force_authenticate(other_user)
    response = mallory.get(f"/api/v1/compare/?runs={a.pk},{b.pk}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert mallory.get(f"/api/v1/runs/{a.pk}/figures/").status_code == 404
    huge = "9" * 30  # past any database integer: still a 404, not a 500
    assert mallory.get(f"/api/v1/runs/{huge}/figures/").status_code == 404
    assert mallory.get(f"/api/v1/models/{huge}/history/").status_code == 404
    assert (
        mallory.put(f"/api/v1/models/{huge}/baseline/", {"run": 1}, format="json").status_code
        == 404
    )
    anonymous = APIClient()
    assert anonymous.get(f"/api/v1/compare/?runs={a.pk},{b.pk}").status_code == 401
    assert anonymous.get(f"/api/v1/runs/{a.pk}/figures/").status_code == 401
    assert anonymous.get(f"/api/v1/models/{a.model_id}/history/").status_code == 401
    put = anonymous.put(f"/api/v1/models/{a.model_id}/baseline/", {"run": a.pk}, format="json")
    assert put.status_code == 401
    assert mallory.get(f"/api/v1/models/{a.model_id}/history/").status_code == 404
    put = mallory.put(f"/api/v1/models/{a.model_id}/baseline/", {"run": a.pk}, format="json")
    assert put.status_code == 404
    page = Client()
    page.force_login(other_user)
    assert page.get(f"/compare/?runs={a.pk},{b.pk}").status_code == 404


def test_the_run_list_ticks_runs_into_the_compare_page(user, two_runs):
    a, b = two_runs
    client = Client()
    client.force_login(user)
    listing = client.get("/runs/").content.decode()
    assert 'id="compare-form"' in listing and f'name="run" value="{a.pk}"' in listing
    ticked = client.get(f"/compare/?run={a.pk}&run={b.pk}")
    assert ticked.status_code == 302 and ticked["Location"] == f"/compare/?runs={a.pk},{b.pk}"
    page = client.get(ticked["Location"]).content.decode()
    assert 'id="compare-figures"' in page and "-25.0% better" in page
    assert 'data-figure="fig-compare-ops-data"' in page
    assert 'data-figure="fig-compare-memory-data"' in page
    assert "none of these runs partitioned the model" in page
    one = client.get(f"/compare/?runs={a.pk}", follow=True).content.decode()
    assert "cannot compare: give two or more run ids" in one


def test_the_html_export_is_one_self_contained_file(user, two_runs):
    a, b = two_runs
    client = Client()
    client.force_login(user)
    response = client.get(f"/compare/?runs={a.pk},{b.pk}&export=html")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="compare-{a.pk}-{b.pk}.html"'
    html = response.content.decode()
    # Nothing is fetched: no script or stylesheet by URL; plotly.js is inline.
    assert not re.search(r"<script[^>]+src=", html) and "<link" not in html
    assert "Plotly" in html and len(html) > 3_000_000
    assert 'id="csv-figures"' not in html  # server links are left out of the file


def test_history_and_a_pinned_baseline(api, user, two_runs, other_user):
    a, b = two_runs
    model = a.model
    history = api.get(f"/api/v1/models/{model.pk}/history/").json()
    assert [h["run"] for h in history["runs"]] == [a.pk, b.pk] and history["baseline"] is None
    assert history["runs"][1]["figures"]["profile.latency_ms"]["value"] == 6.0

    assert api.put(f"/api/v1/models/{model.pk}/baseline/", {"run": a.pk}, format="json").json() == {
        "model": model.pk,
        "baseline": a.pk,
    }
    assert api.get(f"/api/v1/models/{model.pk}/history/").json()["baseline"] == a.pk
    for bad in ({"run": "x"}, {"run": 2**70}, {}, [1], {"run": True}):
        refused = api.put(f"/api/v1/models/{model.pk}/baseline/", bad, format="json")
        assert refused.status_code == 400, bad
    other_model = store_model_file(SQUEEZENET, owner=other_user, name="theirs.onnx")
    theirs = finished_run(other_user, other_model, 1.0, 1.0, 1)
    refused = api.put(f"/api/v1/models/{model.pk}/baseline/", {"run": theirs.pk}, format="json")
    assert (
        refused.status_code == 400
        and "not a run of this model" in refused.json()["error"]["message"]
    )
    assert api.get(f"/api/v1/models/{other_model.pk}/history/").status_code == 404

    # The model page: history drawn with the baseline starred, the pin form, the badge.
    client = Client()
    client.force_login(user)
    page = client.get(f"/models/{model.pk}/").content.decode()
    assert 'data-figure="fig-history-data"' in page and "star" in page
    assert f'<option value="{a.pk}" selected>' in page and ">baseline</span>" in page
    response = client.post(f"/models/{model.pk}/baseline/", {"run": str(b.pk)}, follow=True)
    assert f"Run {b.pk} is this model&#x27;s baseline." in response.content.decode()
    model.refresh_from_db()
    assert model.baseline_run_id == b.pk
    bad = client.post(f"/models/{model.pk}/baseline/", {"run": "abc"}, follow=True)
    assert "Baseline not changed: &#x27;abc&#x27; is not a run id" in bad.content.decode()
    client.post(f"/models/{model.pk}/baseline/", {"run": ""})
    model.refresh_from_db()
    assert model.baseline_run_id is None
