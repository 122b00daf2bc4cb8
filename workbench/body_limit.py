"""Refuse a request body larger than the upload limit before anything buffers it.

Outermost ASGI middleware on HTTP. A body is refused with 413 when its ``Content-Length``
says it is too large, before a byte of it is read; a body without a length (chunked) is
counted as it streams and cut off with 413 where it crosses the cap. Under the cap the
server (uvicorn) streams the body to Django, which spools it to disk past
``FILE_UPLOAD_MAX_MEMORY_SIZE``; so no request, however large or whoever sends it, makes the
web process hold more than a few MB of it (daphne, the server before, read the whole body
into memory before Django saw it: 740 MB for a 50 MB POST to a 404 page).
"""

from __future__ import annotations

import json

MULTIPART_ALLOWANCE = 1 << 20
"""Room for the multipart framing and form fields around a file of the largest size."""


def body_cap() -> int:
    from django.conf import settings

    return settings.MAX_UPLOAD_BYTES + MULTIPART_ALLOWANCE


def _declared_length(scope: dict) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


async def _refuse(send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """See the module docstring. ``cap`` defaults to the upload limit plus multipart room."""

    def __init__(self, app, cap: int | None = None) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from workbench.uploads import too_large_message

        cap = self.cap if self.cap is not None else body_cap()
        declared = _declared_length(scope)
        if declared is not None and declared < 0:
            return await _refuse(
                send, 400, "bad_content_length", "the Content-Length header is not a number"
            )
        if declared is not None and declared > cap:
            return await _refuse(send, 413, "file_too_large", too_large_message(declared))
        seen = 0
        refused = False

        async def counted_receive():
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    # Django stops reading at the disconnect and sends nothing.
                    refused = True
                    await _refuse(send, 413, "file_too_large", too_large_message(seen))
                    return {"type": "http.disconnect"}
            return message

        return await self.app(scope, counted_receive, send)
