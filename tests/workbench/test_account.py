"""The account's lifecycle in the browser: a forgotten password reset by mail (the link
works once, revokes the API token, and the page never says whether an address has an
account), sign-out that leaves CI tokens alone, and sign-out everywhere that does not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.contrib.sessions.models import Session
from django.core import mail
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

RESET = "/accounts/password/reset/"


@pytest.fixture
def alice(user):
    user.email = "alice@example.com"
    user.save()
    return user


def reset_link(message) -> str:
    match = re.search(r"http://testserver(/accounts/password/reset/\S+/\S+/)", message.body)
    assert match, message.body
    return match.group(1)


def token_works(key: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/models/").status_code == 200


def test_a_forgotten_password_is_reset_by_mail_and_revokes_the_token(alice):
    key = Token.objects.create(user=alice).key
    assert token_works(key)
    elsewhere = Client()  # a browser left signed in somewhere
    elsewhere.force_login(alice)
    browser = Client()
    login_page = browser.get("/accounts/login/")
    assert f'href="{RESET}">Forgot your password?' in login_page.text

    asked = browser.post(RESET, {"email": "Alice@Example.com"})
    assert asked.status_code == 302 and asked["Location"] == "/accounts/password/reset/sent/"
    assert "Check your mail" in browser.get(asked["Location"]).text
    [message] = mail.outbox
    assert message.to == ["alice@example.com"]
    assert message.subject == "Reset your Model workbench password"
    assert 'account "alice"' in message.body

    link = reset_link(message)
    form = browser.get(link, follow=True)  # Django swaps the token for a session-held one
    assert form.status_code == 200 and "Choose a new password" in form.text
    set_password = form.redirect_chain[-1][0]
    done = browser.post(
        set_password, {"new_password1": "a-Fresh-pass-789", "new_password2": "a-Fresh-pass-789"}
    )
    assert done.status_code == 302 and done["Location"] == "/accounts/password/reset/done/"
    assert "Your new password is set" in browser.get(done["Location"]).text

    assert not Token.objects.filter(user=alice).exists()
    assert not token_works(key)
    assert elsewhere.get("/models/").status_code == 302  # signed out by the new password
    signed_in = Client().post(
        "/accounts/login/", {"username": "alice", "password": "a-Fresh-pass-789"}
    )
    assert signed_in.status_code == 302
    old = Client().post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert old.status_code == 200 and "_auth_user_id" not in old.wsgi_request.session
    # the link worked once
    again = Client().get(link, follow=True)
    assert "This link no longer works" in again.text


def test_an_unknown_address_gets_the_same_answer_and_no_mail(alice):
    known = Client().post(RESET, {"email": "alice@example.com"})
    unknown = Client().post(RESET, {"email": "nobody@example.com"})
    assert (unknown.status_code, unknown["Location"]) == (known.status_code, known["Location"])
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.com"]


def test_reset_requests_are_limited_per_address_and_per_mail_address(alice):
    client = Client()
    for i in range(5):
        assert client.post(RESET, {"email": f"someone{i}@example.com"}).status_code == 302
    refused = client.post(RESET, {"email": "alice@example.com"})
    assert refused.status_code == 429
    assert "too many password resets asked for from this address" in refused.text
    assert "the limit is 5 per 60 min" in refused.text
    assert int(refused["Retry-After"]) > 0
    assert mail.outbox == []

    # one mailbox asked for from many addresses: three mails, then no more
    for i in range(3):
        assert Client(REMOTE_ADDR=f"10.0.0.{i}").post(RESET, {"email": "alice@example.com"})
    flood = Client(REMOTE_ADDR="10.0.0.9").post(RESET, {"email": "ALICE@example.com"})
    assert flood.status_code == 429
    assert "too many password resets asked for this mail address" in flood.text
    assert len(mail.outbox) == 3


def test_sign_up_takes_a_mail_address_for_resets(django_user_model):
    response = Client().post(
        "/accounts/signup/",
        {
            "username": "erin",
            "email": "erin@example.com",
            "password1": "a-Long-pass-123",
            "password2": "a-Long-pass-123",
        },
    )
    assert response.status_code == 302
    assert django_user_model.objects.get(username="erin").email == "erin@example.com"


def test_signing_out_ends_the_session_but_not_the_ci_token(user):
    key = Token.objects.create(user=user).key
    browser = Client()
    browser.post("/accounts/login/", {"username": "alice", "password": "alice-pass-123"})
    assert browser.get("/models/").status_code == 200
    assert browser.post("/accounts/logout/").status_code == 302
    assert browser.get("/models/").status_code == 302  # to the sign-in page
    assert token_works(key)


def test_signing_out_everywhere_ends_every_session_and_revokes_the_token(user, other_user):
    key = Token.objects.create(user=user).key
    laptop, phone, someone_else = Client(), Client(), Client()
    laptop.force_login(user)
    phone.force_login(user)
    someone_else.force_login(other_user)
    page = laptop.get("/accounts/")
    assert "Sign out everywhere" in page.text
    done = laptop.post("/accounts/sign-out-everywhere/", follow=True)
    assert "Signed out everywhere: 2 web sessions ended, your API token revoked." in done.text
    assert laptop.get("/models/").status_code == 302
    assert phone.get("/models/").status_code == 302
    assert someone_else.get("/models/").status_code == 200
    assert not token_works(key)
    assert Session.objects.count() == 1  # someone else's
    assert laptop.get("/accounts/sign-out-everywhere/").status_code == 302  # signed out: login


def test_the_account_page_saves_the_mail_address(user):
    browser = Client()
    browser.force_login(user)
    saved = browser.post("/accounts/", {"email": "alice@example.org"})
    assert saved.status_code == 302
    user.refresh_from_db()
    assert user.email == "alice@example.org"
    bad = browser.post("/accounts/", {"email": "not an address"})
    assert bad.status_code == 200 and "Enter a valid email address." in bad.text


def mail_settings(tmp_path, **env: str) -> subprocess.CompletedProcess:
    code = (
        "from django.conf import settings as s; "
        "print(s.EMAIL_BACKEND, getattr(s, 'EMAIL_FILE_PATH', None), getattr(s, 'EMAIL_PORT'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "workbench.settings",
            "WORKBENCH_VAR_DIR": str(tmp_path),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_mail_is_written_to_files_unless_an_smtp_server_is_named(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith("WORKBENCH_EMAIL_")]:
        monkeypatch.delenv(name)
    embedded = mail_settings(tmp_path)
    assert embedded.stdout.split() == [
        "django.core.mail.backends.filebased.EmailBackend",
        str(tmp_path.resolve() / "mail"),
        "25",  # Django's default, unused by the file backend
    ]
    smtp = mail_settings(tmp_path, WORKBENCH_EMAIL_HOST="smtp.example.com")
    assert smtp.stdout.split() == ["django.core.mail.backends.smtp.EmailBackend", "None", "587"]
    both = mail_settings(tmp_path, WORKBENCH_EMAIL_HOST="smtp.example.com", WORKBENCH_EMAIL_SSL="1")
    assert both.returncode != 0
    assert "WORKBENCH_EMAIL_STARTTLS and WORKBENCH_EMAIL_SSL are both on" in both.stderr
    typo = mail_settings(
        tmp_path, WORKBENCH_EMAIL_HOST="smtp.example.com", WORKBENCH_EMAIL_PORT="x"
    )
    assert "WORKBENCH_EMAIL_PORT='x' is not an integer" in typo.stderr
