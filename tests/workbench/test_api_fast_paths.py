"""The API's hot requests (list runs, poll a run, list models: what every CI job polls) skip
DRF's per-request field building and Django's per-request Redis connection. What a client
reads must not change: the answers are compared byte for byte with what DRF's generic
serializer writes, and a revoked token still stops at once."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from workbench.api.serializers import OnnxModelSerializer, RunSerializer
from workbench.models import OnnxModel, Run, StageResult, Status, Target

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(user, model):
    """Runs in every shape a field can take: null and set times, a retry, unicode text."""
    host = Target.objects.get(name="host")
    first = Run.objects.create(
        owner=user,
        model=model,
        target=host,
        config={"stages": ["analyze", "profile"], "options": {"profile": {"window_s": 0.5}}},
        status=Status.FAILED,
        progress=0.333333333,
        error_code="stage_failed",
        error_message='profile: ünïcode « » \u2028 "quotes"',
        started_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        finished_at=datetime(2026, 1, 2, 3, 5, 0, tzinfo=UTC),
    )
    StageResult.objects.create(
        run=first,
        stage="profile",
        position=1,
        status=Status.FAILED,
        progress=0.5,
        attempts=2,
        worker="w1@host",
        message="timing",
        started_at=datetime(2026, 1, 2, 3, 4, 6, tzinfo=UTC),
        finished_at=datetime(2026, 1, 2, 3, 5, 0, 1, tzinfo=UTC),
        error_code="boom",
        error_message="it broke",
        result={"big": list(range(10))},
    )
    StageResult.objects.create(
        run=first, stage="analyze", position=0, status=Status.SUCCEEDED, progress=1.0
    )
    retry = Run.objects.create(
        owner=user, model=model, target=host, config={}, retry_of=first, progress=0
    )
    model.baseline_run = first
    model.analysis = {"nodes": 3}
    model.save()
    return list(Run.objects.filter(pk__in=[first.pk, retry.pk]).order_by("pk"))  # as stored


def generic(serializer_class, instance) -> dict:
    """What DRF's ModelSerializer writes for ``instance``, field by field."""
    return serializers.ModelSerializer.to_representation(serializer_class(), instance)


def test_a_run_reads_as_drf_wrote_it(runs):
    for run in runs:
        fast = RunSerializer(run).data
        assert JSONRenderer().render(fast) == JSONRenderer().render(generic(RunSerializer, run))


def test_a_model_reads_as_drf_wrote_it(runs, model):
    listed = OnnxModel.objects.defer("analysis").get(pk=model.pk)
    listed.has_analysis = True  # the list's annotation
    for instance in (model, OnnxModel.objects.get(pk=model.pk), listed):
        fast = OnnxModelSerializer(instance).data
        slow = generic(OnnxModelSerializer, instance)
        assert JSONRenderer().render(fast) == JSONRenderer().render(slow)


def test_the_hot_api_answers_are_unchanged(api, runs, model):
    """The three requests the load bench makes, against their bodies built by DRF's generic
    serializer (the API's JSON is compact, UTF-8, ``Z`` for UTC)."""
    run_list = api.get("/api/v1/runs/?limit=20")
    assert run_list.status_code == 200
    expected = [generic(RunSerializer, r) for r in sorted(runs, key=lambda r: -r.pk)]
    body = {"count": 2, "next": None, "previous": None, "results": expected}
    assert run_list.content == JSONRenderer().render(body)
    # as before: the snapshot (shared with the websocket) writes +00:00, the run's own Z
    assert b'"finished_at":"2026-01-02T03:05:00+00:00"' in run_list.content

    one = api.get(f"/api/v1/runs/{runs[0].pk}/")
    assert one.content == JSONRenderer().render(generic(RunSerializer, runs[0]))
    assert json.loads(one.content)["snapshot"]["stages"][0]["stage"] == "analyze"

    models = api.get("/api/v1/models/?limit=20")
    listed = json.loads(models.content)["results"]
    assert listed == [json.loads(JSONRenderer().render(generic(OnnxModelSerializer, model)))]
    assert listed[0]["analyzed"] is True and listed[0]["baseline_run"] == runs[0].pk


def test_a_token_revoked_between_requests_is_refused_on_the_next(user, runs, settings):
    settings.API_TOKEN_CACHE_SECONDS = 60
    key = Token.objects.create(user=user).key
    client = APIClient(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get(f"/api/v1/runs/{runs[0].pk}/").status_code == 200
    assert client.get(f"/api/v1/runs/{runs[0].pk}/").status_code == 200  # from the cache
    Token.objects.filter(user=user).delete()
    assert client.get(f"/api/v1/runs/{runs[0].pk}/").status_code == 401


def test_the_cache_keeps_one_redis_client_per_process():
    """Django makes a cache backend per request context; they share one client (and so one
    pool of open connections) instead of connecting for every request."""
    from django.core.cache import caches

    if "RedisCache" not in type(caches["default"]).__name__:
        pytest.skip("no Redis configured (REDIS_URL)")

    async def client_in_a_new_context():
        from asgiref.sync import sync_to_async

        def client():
            backend = caches.create_connection("default")
            backend.get("workbench-test-probe")
            return backend._cache.get_client()

        return await sync_to_async(client, thread_sensitive=False)()

    first = asyncio.run(client_in_a_new_context())
    second = asyncio.run(client_in_a_new_context())
    assert first is second


def test_dates_are_written_in_utc_with_a_z(runs):
    run = Run.objects.get(pk=runs[0].pk)
    run.created_at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC) + timedelta(microseconds=1)
    assert RunSerializer(run).data["created_at"] == "2026-03-04T05:06:07.000001Z"


@pytest.mark.parametrize("page", ["limit=20", "limit=1", "limit=1&offset=1", "offset=5"])
def test_a_plain_list_reads_as_the_filtered_path_does(api, runs, model, other_user, page):
    """A list asked for with paging alone is read in precompiled SQL; asked for with an
    ordering (the same as the default) it goes through the ORM and the filters. Same runs,
    same order, same count, byte for byte but for the page links."""
    Run.objects.create(
        owner=other_user, model=model, target=runs[0].target, config={}
    )  # someone else's: in neither
    for path, ordering in (("runs", "-created_at,-id"), ("models", "-created_at,-id")):
        plain = api.get(f"/api/v1/{path}/?{page}")
        orm = api.get(f"/api/v1/{path}/?{page}&ordering={ordering}")
        assert plain.status_code == orm.status_code == 200
        plain_body, orm_body = json.loads(plain.content), json.loads(orm.content)
        assert plain_body["count"] == orm_body["count"] == (2 if path == "runs" else 1)
        assert [bool(plain_body[k]) for k in ("next", "previous")] == [
            bool(orm_body[k]) for k in ("next", "previous")
        ]
        assert JSONRenderer().render(plain_body["results"]) == JSONRenderer().render(
            orm_body["results"]
        )


def test_a_run_that_is_not_yours_or_not_there_is_a_404(api, runs, other_user, model):
    theirs = Run.objects.create(owner=other_user, model=model, target=runs[0].target, config={})
    for pk in (theirs.pk, 10**17, "x1", "1.5", "²"):
        response = api.get(f"/api/v1/runs/{pk}/")
        assert response.status_code == 404, pk
        assert json.loads(response.content)["error"]["code"] == "not_found"
