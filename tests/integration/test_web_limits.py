"""The web server as deployed (uvicorn, the app's ASGI stack) under oversized and hostile
requests: bodies over the cap refused before they are read, a 500 MB upload streamed
through in bounded memory, static paths that try to leave the static directories, run
websockets opened by someone other than the run's owner."""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlparse

import pytest
from rest_framework.authtoken.models import Token

from tests.conftest import SQUEEZENET, start_web_server

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1 << 20


def status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} for {pid}")


def raw_request(url: str, head: str, body_chunks=(), timeout_s: float = 30.0) -> str:
    """Send ``head`` (request line and headers) and ``body_chunks`` on a socket; the
    response as text (what arrived before the server closed or the timeout)."""
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout_s) as s:
        s.sendall(head.encode())
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the body was all sent
        received = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                received += data
                if b"\r\n\r\n" in received and b"}}" in received:
                    break
        except (ConnectionResetError, TimeoutError):
            pass
    return received.decode(errors="replace")


def test_a_body_declared_over_the_cap_is_refused_before_a_byte_is_read(live_settings, tmp_path):
    url, server = start_web_server(live_settings, tmp_path, WORKBENCH_MAX_UPLOAD_BYTES=str(MB))
    try:
        started = time.monotonic()
        # no session, no CSRF token, a URL that does not exist: refused all the same
        response = raw_request(
            url,
            "POST /no-such-page/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {10**12}\r\n\r\n",
        )
        assert response.startswith("HTTP/1.1 413"), response[:300]
        assert "larger than the upload limit of 1.0 MB" in response
        assert "WORKBENCH_MAX_UPLOAD_BYTES" in response
        assert time.monotonic() - started < 5
        # a chunked body declares nothing: it is counted and cut off at the cap
        chunk = b"x" * (256 * 1024)
        chunks = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(64))
        response = raw_request(
            url,
            "POST /api/v1/models/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
            chunks,
        )
        assert response.startswith("HTTP/1.1 413"), response[:300]
        assert "larger than the upload limit of 1.0 MB" in response
        # the server is still there and still answers
        response = raw_request(url, "GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert response.startswith("HTTP/1.1 200"), response[:200]
    finally:
        server.stop()


def test_a_500_mb_upload_streams_through_the_web_process_in_bounded_memory(
    live_settings, tmp_path, user
):
    url, server = start_web_server(live_settings, tmp_path)
    token = Token.objects.create(user=user).key
    try:
        pid = server.proc.pid  # `python -m uvicorn`: the server is this process
        rss_before_kb = status_kb(pid, "VmRSS")
        size = 500 * MB
        boundary = "workbench-limit-test"
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            'filename="big.onnx"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        tail = f"\r\n--{boundary}--\r\n".encode()

        def body():
            yield head
            chunk = b"\0" * MB
            for _ in range(size // MB):
                yield chunk
            yield tail

        parsed = urlparse(url)
        connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
        connection.request(
            "POST",
            "/api/v1/models/",
            body=body(),
            headers={
                "Authorization": f"Token {token}",
                "Content-Type": f"multipart/form-data; boundary={boundary}",
                "Content-Length": str(len(head) + size + len(tail)),
            },
        )
        response = connection.getresponse()
        text = response.read().decode()
        connection.close()
        assert response.status == 400, text[:300]  # zeros are not an ONNX model ...
        assert "not an ONNX model" in text  # ... and it was read to the end to say so
        growth_mb = (status_kb(pid, "VmHWM") - rss_before_kb) / 1024
        print(f"web process: {rss_before_kb / 1024:.0f} MB before, grew {growth_mb:.1f} MB")
        assert growth_mb < 64, f"the web process grew by {growth_mb:.0f} MB"
    finally:
        server.stop()


def test_a_static_path_that_leaves_the_static_directories_is_not_found(web_server):
    for path in (
        "/static/..%2f..%2fworkbench%2fsettings.py",
        "/static/../../workbench/settings.py",
        "/static/%2e%2e/%2e%2e/manage.py",
    ):
        response = raw_request(web_server, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert response.startswith(("HTTP/1.1 404", "HTTP/1.1 400")), (path, response[:200])
        assert "SECRET_KEY" not in response and "django" not in response.lower()[:2000]


def test_a_run_websocket_admits_its_owner_only(web_server, user, other_user):
    """Progress streams to the run's owner; an anonymous client and another account are
    refused at the handshake and receive nothing."""
    from django.test import Client
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    from workbench.models import Run, Target
    from workbench.uploads import store_model_file

    model = store_model_file(SQUEEZENET, owner=user, name="sq.onnx")
    run = Run.objects.create(
        owner=user, model=model, target=Target.objects.get(name="host"), config={}
    )
    ws_url = web_server.replace("http://", "ws://") + f"/ws/runs/{run.pk}/"
    origin = web_server

    def session_cookie(account) -> str:
        client = Client()
        client.force_login(account)
        return f"sessionid={client.cookies['sessionid'].value}"

    for headers in ({}, {"Cookie": session_cookie(other_user)}):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url, origin=origin, additional_headers=headers, open_timeout=10)
        assert refused.value.response.status_code == 403
    with connect(
        ws_url,
        origin=origin,
        additional_headers={"Cookie": session_cookie(user)},
        open_timeout=10,
    ) as ws:
        first = json.loads(ws.recv(timeout=10))
    assert first["type"] == "snapshot" and first["run"]["id"] == run.pk
