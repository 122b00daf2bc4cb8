"""API tokens: one per account, expiring ``WORKBENCH_TOKEN_DAYS`` after it was made,
revoked through the API, the token page or "sign out everywhere", and whenever the
account's password changes (or is reset). A revoked token is refused on the next request
even where lookups are cached (``workbench.authentication``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save, pre_save
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from workbench.api.schema import errors
from workbench.authentication import expires_at, forget


def describe(token: Token, current_key: str | None = None) -> dict:
    return {
        "key_ends_with": token.key[-4:],
        "created": token.created.isoformat(),
        "expires_at": expires_at(token).isoformat(),
        "expired": expires_at(token) <= timezone.now(),
        "current": token.key == current_key,
    }


class TokenInfoSerializer(serializers.Serializer):
    key_ends_with = serializers.CharField(help_text="the key's last 4 characters")
    created = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    expired = serializers.BooleanField()
    current = serializers.BooleanField(help_text="the token this request was made with")


class IssuedTokenSerializer(TokenInfoSerializer):
    token = serializers.CharField(help_text="send it as `Authorization: Token <key>`")


class SignInSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField()


def issue_token(user) -> Response:
    """The account's token (a new one when it has none or it expired)."""
    token = Token.objects.filter(user=user).first()
    if token is not None and expires_at(token) <= timezone.now():
        token.delete()
        token = None
    if token is None:
        token = Token.objects.create(user=user)
    return Response({"token": token.key, **describe(token, token.key)})


def replace_token(user) -> Token:
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)


class TokenView(APIView):
    """``/api/v1/auth/token/``. POST ``{"username", "password"}`` (no token needed): the
    account's token, under the sign-in limits (``workbench.auth_views.obtain_token``);
    GET: the account's tokens (never their keys); DELETE: revoke them (every CI pipeline
    using them is signed out)."""

    def initialize_request(self, request, *args, **kwargs):
        self._signing_in = request.method == "POST"
        return super().initialize_request(request, *args, **kwargs)

    def get_authenticators(self):
        return [] if getattr(self, "_signing_in", False) else super().get_authenticators()

    def get_permissions(self):
        return [] if getattr(self, "_signing_in", False) else [IsAuthenticated()]

    @extend_schema(
        summary="Your API tokens (never their keys)",
        responses={
            200: inline_serializer("TokenList", {"results": TokenInfoSerializer(many=True)})
        },
    )
    def get(self, request):
        current = getattr(request.auth, "key", None)
        tokens = Token.objects.filter(user=request.user)
        return Response({"results": [describe(t, current) for t in tokens]})

    @extend_schema(
        summary="Revoke your API tokens",
        description="Every client using them is signed out, this one included.",
        responses={204: None},
    )
    def delete(self, request):
        Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Sign in: get your API token",
        description="No token needed. Returns the account's token, made if it has none or "
        "it expired; failed attempts are limited per account and address (429).",
        auth=[],
        request=SignInSerializer,
        responses={200: IssuedTokenSerializer, **errors(429)},
    )
    def post(self, request):
        from workbench.auth_views import obtain_token

        return obtain_token(request)


def revoke_on_password_change(sender, instance, **kwargs) -> None:
    """A password change (own page, admin, ``changepassword``) revokes the API tokens: who
    had the old password may have made one."""
    if instance.pk is None:
        return
    old = sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    if old is not None and old != instance.password:
        Token.objects.filter(user_id=instance.pk).delete()


def forget_token(sender, instance, created: bool = False, **kwargs) -> None:
    """A token deleted (revoked, replaced, expired) is refused by the cache of
    ``workbench.authentication`` at once, not when its entry runs out; one changed is read
    again. (A new one has no entry.)"""
    if not created:
        forget(instance.key, revoked=kwargs["signal"] is post_delete)


def forget_users_tokens(
    sender, instance, created: bool = False, update_fields=None, **kwargs
) -> None:
    """A user changed is read again on the next API request, and a user made inactive is
    refused at once; a sign-in, which only writes ``last_login``, changes nothing a token
    needs."""
    if created or not settings.API_TOKEN_CACHE_SECONDS:
        return
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    for key in Token.objects.filter(user_id=instance.pk).values_list("key", flat=True):
        forget(key, revoked=not instance.is_active)


def connect() -> None:
    user_model = get_user_model()
    pre_save.connect(
        revoke_on_password_change,
        sender=user_model,
        dispatch_uid="workbench-revoke-tokens-on-password-change",
    )
    post_save.connect(forget_users_tokens, sender=user_model, dispatch_uid="workbench-forget-user")
    post_save.connect(forget_token, sender=Token, dispatch_uid="workbench-forget-saved-token")
    post_delete.connect(forget_token, sender=Token, dispatch_uid="workbench-forget-deleted-token")
