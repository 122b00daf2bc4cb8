"""API tokens are kept in the shared cache for a minute (``workbench.authentication``), so
a request costs no token query; revoking one works on the very next request all the same."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from workbench.authentication import ExpiringTokenAuthentication

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cached(settings):
    settings.API_TOKEN_CACHE_SECONDS = 60


def client_for(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def token_queries(key: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        ExpiringTokenAuthentication().authenticate_credentials(key)
    return sum("authtoken_token" in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize("revoke", ["api", "token page", "password", "inactive", "replace"])
def test_a_cached_token_stops_working_at_once_when_revoked(user, revoke):
    key = Token.objects.create(user=user).key
    client = client_for(key)
    assert client.get("/api/v1/models/").status_code == 200
    assert token_queries(key) == 0  # from the cache now
    if revoke == "api":
        assert client.delete("/api/v1/auth/token/").status_code == 204
    elif revoke == "token page":
        client.force_login(user)
        client.post("/accounts/token/", {"action": "revoke"})
        client.logout()
    elif revoke == "password":
        user.set_password("a-New-pass-456")
        user.save()
    elif revoke == "inactive":
        user.is_active = False
        user.save()
    else:
        client.force_login(user)
        client.post("/accounts/token/", {"action": "replace"})
        client.logout()
    refused = client_for(key).get("/api/v1/models/")
    assert refused.status_code == 401, revoke


def test_a_cached_lookup_cannot_bring_a_revoked_token_back(user):
    """The race: a request reads the token row, the token is revoked, then the request
    stores what it read. The revocation's tombstone wins."""
    from django.core.cache import cache

    from workbench.authentication import _cache_key

    key = Token.objects.create(user=user).key
    read_before = Token.objects.select_related("user").get(key=key)
    Token.objects.filter(user=user).delete()
    cache.add(_cache_key(key), read_before, 60)  # what the slow request would do
    assert client_for(key).get("/api/v1/models/").status_code == 401


def test_changing_the_account_keeps_its_token_working(user):
    key = Token.objects.create(user=user).key
    assert client_for(key).get("/api/v1/models/").status_code == 200
    user.email = "alice@example.org"
    user.save()
    assert token_queries(key) == 1  # read again
    assert client_for(key).get("/api/v1/models/").status_code == 200


def test_without_the_cache_every_request_reads_the_token(user, settings):
    settings.API_TOKEN_CACHE_SECONDS = 0
    key = Token.objects.create(user=user).key
    assert client_for(key).get("/api/v1/models/").status_code == 200
    assert token_queries(key) == 1
