"""The account page (mail address, stored bytes against the quota, API token, password) and
signing out everywhere.

Signing out of the web ends that browser's session and nothing else: the web uses session
cookies, never an API token, so there is no token of the session's own to revoke, and the
account's token is for CI and scripts the user set up on purpose. "Sign out everywhere" is
the button for a lost laptop or a leaked token: it revokes the API token and ends every
session of the account, this one included.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.contrib.sessions.models import Session
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from rest_framework.authtoken.models import Token

from workbench import limits
from workbench.forms import EmailForm


def end_sessions(user) -> int:
    """End every web session of ``user``; returns how many.

    Django's session rows do not say whose they are (the user id is inside the encoded
    data), so every unexpired one is read: a scan, but of a table that holds one row per
    signed-in browser, for a button pressed rarely. A column of its own would need a
    session model of our own."""
    ended = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            ended.append(session.session_key)
    Session.objects.filter(session_key__in=ended).delete()
    return len(ended)


@login_required
def account(request):
    form = EmailForm(request.POST or None, instance=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Your mail address was saved.")
        return redirect("account")
    stored = limits.stored_bytes(request.user)
    context = {
        "form": form,
        "stored": stored,
        "quota_bytes": settings.MAX_STORED_BYTES,
        "token": Token.objects.filter(user=request.user).first(),
    }
    return render(request, "workbench/account.html", context)


@login_required
@require_POST
def sign_out_everywhere(request):
    user = request.user
    revoked = Token.objects.filter(user=user).delete()[0]
    ended = end_sessions(user)
    logout(request)
    messages.success(
        request,
        f"Signed out everywhere: {ended} web session{'s' if ended != 1 else ''} ended"
        + (", your API token revoked." if revoked else "."),
    )
    return redirect("login")
