"""API token authentication with expiry (``WORKBENCH_TOKEN_DAYS``) and a short-lived cache;
the rest of the token lifecycle is in ``workbench.tokens``. Kept apart from views: DRF
imports this module while it sets itself up.

The cache: looking a token up in the database was a fifth of an API request's CPU time
(``bench/api_profile.py``), for a row that almost never changes. A token found there is
kept in the shared cache (Redis) for ``API_TOKEN_CACHE_SECONDS``. Revoking must not wait
for that to run out, so deleting a token row, or making its user inactive
(``workbench.tokens`` connects the signals), overwrites its entry with a tombstone, and a
lookup only *adds* an entry: a request that read the row just before it was revoked cannot
put it back over the tombstone. Other changes (a user's mail address) just drop the entry."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

REVOKED = "revoked"


def expires_at(token):
    return token.created + timedelta(days=settings.API_TOKEN_DAYS)


def _cache_key(key: str) -> str:
    # a digest: the cache does not hold usable keys
    return "workbench-token:" + hashlib.sha256(key.encode()).hexdigest()


def forget(key: str, *, revoked: bool) -> None:
    """The token ``key`` changed: the next request reads the database. ``revoked``: it must
    not work again, so a tombstone stands in its entry until any stale copy would expire."""
    if not settings.API_TOKEN_CACHE_SECONDS:
        return
    if revoked:
        cache.set(_cache_key(key), REVOKED, settings.API_TOKEN_CACHE_SECONDS)
    else:
        cache.delete(_cache_key(key))


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing a token past its expiry with what to do."""

    def authenticate_credentials(self, key):
        user, token = self._lookup(key)
        if expires_at(token) <= timezone.now():
            raise AuthenticationFailed(
                f"the API token expired on {expires_at(token):%Y-%m-%d}; make a new one on "
                "the token page (/accounts/token/) or with POST /api/v1/auth/token/"
            )
        return user, token

    def _lookup(self, key):
        seconds = settings.API_TOKEN_CACHE_SECONDS
        if not seconds:
            return super().authenticate_credentials(key)
        cache_key = _cache_key(key)
        cached = cache.get(cache_key)
        if cached == REVOKED:
            raise AuthenticationFailed("Invalid token.")
        if cached is not None:
            return cached.user, cached  # the user was pickled with it
        user, token = super().authenticate_credentials(key)
        cache.add(cache_key, token, seconds)
        return user, token
