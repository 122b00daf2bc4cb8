"""Requests through the ASGI application the server runs (``workbench.asgi``), whose handler
runs a request's middleware and view in one hop to a pool thread instead of six through
asgiref. The security middleware still runs on every request (CSRF for a signed-in browser,
the CSP), the answers are Django's, and the request signals (which return the database
connection) run on the thread that ran the view."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.core import signals
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db(transaction=True)  # the pool threads see the rows


@pytest.fixture(autouse=True)
def _connections_closed_after_each_request(monkeypatch):
    """As under the server (a pool, ``CONN_MAX_AGE`` 0): the pool threads keep no connection
    open past their request (one kept would hold the test database at its teardown)."""
    from django.db import connections

    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)


def asgi_request(method: str, path: str, headers: dict[str, str] | None = None, body=b""):
    from workbench.asgi import application

    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }

    async def run():
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        done = asyncio.Event()
        sent = []

        async def receive():
            if messages:
                return messages.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await application(scope, receive, send)
        done.set()
        return sent

    sent = asyncio.run(run())
    start = sent[0]
    headers_out = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    content = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers_out, content


def test_an_api_answer_is_the_one_the_test_client_gets(user, model):
    key = Token.objects.create(user=user).key
    expected = APIClient(HTTP_AUTHORIZATION=f"Token {key}").get("/api/v1/models/?limit=20")
    status, headers, content = asgi_request(
        "GET", "/api/v1/models/?limit=20", {"Authorization": f"Token {key}"}
    )
    assert (status, content) == (200, expected.content)
    assert headers["content-type"] == "application/json"


def test_a_signed_in_browser_still_needs_the_csrf_token(user, model, enqueued):
    browser = Client()
    browser.force_login(user)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    status, _, content = asgi_request(
        "POST",
        "/api/v1/runs/",
        {"Cookie": cookie, "Content-Type": "application/json"},
        f'{{"model": {model.pk}}}'.encode(),
    )
    assert status == 403 and b"CSRF" in content
    assert enqueued == []


def test_pages_carry_the_content_security_policy():
    status, headers, _ = asgi_request("GET", "/accounts/login/")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"


def test_the_request_signals_run_on_the_thread_that_ran_the_view(user):
    key = Token.objects.create(user=user).key
    threads: dict[str, int] = {}

    def started(**kwargs):
        threads["started"] = threading.get_ident()

    def finished(**kwargs):
        threads["finished"] = threading.get_ident()

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        asgi_request("GET", "/api/v1/runs/?limit=5", {"Authorization": f"Token {key}"})
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert threads["started"] == threads["finished"] != threading.get_ident()
