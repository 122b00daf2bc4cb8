"""API token authentication with expiry (``WORKBENCH_TOKEN_DAYS``); the rest of the token
lifecycle is in ``workbench.tokens``. Kept apart from views: DRF imports this module while
it sets itself up."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed


def expires_at(token):
    return token.created + timedelta(days=settings.API_TOKEN_DAYS)


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing a token past its expiry with what to do."""

    def authenticate_credentials(self, key):
        user, token = super().authenticate_credentials(key)
        if expires_at(token) <= timezone.now():
            raise AuthenticationFailed(
                f"the API token expired on {expires_at(token):%Y-%m-%d}; make a new one on "
                "the token page (/accounts/token/) or with POST /api/v1/auth/token/"
            )
        return user, token
