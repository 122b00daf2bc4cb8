"""Sign-in, sign-up, password-reset and API-token views with their abuse limits
(``workbench.limits``): failed sign-ins are counted per account name and address and per
address, and a limit reached is refused before the password is even checked; reset mails
are counted per address and per mail address, whether or not an account has it."""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import authenticate, login
from django.contrib.auth.views import LoginView, PasswordResetView
from django.shortcuts import redirect, render
from rest_framework import status

from workbench import limits
from workbench.api.errors import error_response
from workbench.forms import SignUpForm


def _failure_keys(request, username: str) -> list[tuple[str, str]]:
    address = limits.client_address(request)
    return [
        ("login_failures", f"{address}:{username.strip().lower()[:150]}"),
        ("login_failures_ip", address),
    ]


def check_sign_in_allowed(request, username: str) -> None:
    for scope, ident in _failure_keys(request, username):
        limits.check(scope, ident)


def record_failed_sign_in(request, username: str) -> None:
    for scope, ident in _failure_keys(request, username):
        limits.record(scope, ident)


def refused_form(view, error: limits.LimitExceeded):
    """The form page again, 429, saying which limit and when to try again."""
    form = view.get_form()
    form.errors.clear()
    form.add_error(None, error.message)
    response = view.render_to_response(view.get_context_data(form=form), status=429)
    response["Retry-After"] = str(error.retry_after_s)
    return response


class LimitedLoginView(LoginView):
    """Django's sign-in page; after too many failures it answers 429 with the wait."""

    def post(self, request, *args, **kwargs):
        username = request.POST.get("username", "")
        try:
            check_sign_in_allowed(request, username)
        except limits.LimitExceeded as e:
            return refused_form(self, e)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        record_failed_sign_in(self.request, self.request.POST.get("username", ""))
        return super().form_invalid(form)


class LimitedPasswordResetView(PasswordResetView):
    """Django's reset page: the same answer whether or not an account has the address (it
    mails only if one does), every request counted, whatever the address."""

    def post(self, request, *args, **kwargs):
        # keyed by a digest: the cache need not hold people's mail addresses
        email = request.POST.get("email", "").strip().lower()[:254]
        try:
            limits.hit("password_reset", limits.client_address(request))
            digest = hashlib.sha256(email.encode("utf-8", "surrogatepass")).hexdigest()
            limits.hit("password_reset_email", digest)
        except limits.LimitExceeded as e:
            return refused_form(self, e)
        return super().post(request, *args, **kwargs)


def signup(request):
    if not settings.SIGNUP_OPEN:
        return render(request, "workbench/signup.html", {"closed": True}, status=403)
    form = SignUpForm(request.POST or None)
    if request.method == "POST":
        limits.hit("signup", limits.client_address(request))
        if form.is_valid():
            user = form.save()
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            return redirect("model-list")
    return render(request, "workbench/signup.html", {"form": form})


def obtain_token(request):
    """``{"username", "password"}`` -> ``{"token", "expires_at", ...}``: the account's API
    token (made if it has none), under the same sign-in limits as the web page."""
    from workbench.tokens import issue_token

    limits.hit("token", limits.client_address(request))
    data = request.data if isinstance(request.data, dict) else {}
    username, password = data.get("username"), data.get("password")
    if not isinstance(username, str) or not isinstance(password, str):
        return error_response(
            "invalid_request", "send a JSON object with a username and a password", 400
        )
    check_sign_in_allowed(request, username)
    user = authenticate(request, username=username, password=password)
    if user is None:
        record_failed_sign_in(request, username)
        return error_response(
            "invalid_credentials", "wrong username or password", status.HTTP_400_BAD_REQUEST
        )
    return issue_token(user)
