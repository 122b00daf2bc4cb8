"""Django's ASGI handler, with a request handled in one hop to a thread of a pool.

Every view and middleware here is synchronous. Django's own handler builds its chain for
async callers anyway and adapts it back and forth: per request it starts a thread, and hops
between it and the event loop six times (request signal, middleware, the async inner
handler, the CSRF check's ``process_view``, the view, the closing signal), each through
asgiref's ``sync_to_async`` (~60-100 us of CPU each, context copies included). At 50 API
clients that was a third of the web process's CPU per request (``bench/api_profile.py``,
``asgi`` path against ``test_client``).

Here the chain is built synchronous, as under WSGI, and a request runs in one call on a
thread of a fixed pool (``WORKBENCH_WEB_THREADS`` per process): the ``request_started``
signal, the middleware and the view, and, for a response held in memory, the closing
``request_finished`` signal, so the database connection the view used goes back to the pool
from the thread that used it, before the bytes are sent. A streamed response (a download)
is sent as Django sends it, stopped when the client goes away, and closed after.

As with a threaded WSGI server, a thread keeps its database connection object between
requests (``CONN_MAX_AGE``/the pool decide what it holds); everything a request sets in a
context variable (asgiref ``Local``, the URL prefix) lives in a copy of the request's
context and is gone with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import set_script_prefix


class PooledASGIHandler(ASGIHandler):
    def __init__(self) -> None:
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.executor = ThreadPoolExecutor(
            max_workers=settings.WEB_THREADS, thread_name_prefix="web-request"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP here, not {scope['type']}")
        # (no ThreadSensitiveContext: it is what started a thread per request)
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        try:
            context = contextvars.copy_context()
            response = await loop.run_in_executor(
                self.executor, context.run, self.respond, scope, body_file
            )
            if response.streaming:
                await self.stream(response, receive, send)
                await loop.run_in_executor(self.executor, context.run, response.close)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()

    def respond(self, scope, body_file):
        """In a pool thread: the request through the middleware and the view."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if response.streaming:
            # sent, then closed, later and maybe from another thread (a stream reads its
            # chunks in threads of its own): the connection this thread used goes back now
            close_old_connections()
        else:
            response.close()  # request_finished, on this thread
        return response

    async def stream(self, response, receive, send) -> None:
        """Send a streamed response until it ends or the client disconnects (as Django's
        handler does: a download the client dropped is not read to its end)."""
        tasks = [
            asyncio.create_task(self.listen_for_disconnect(receive)),
            asyncio.create_task(self.send_response(response, send)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RequestAborted):
                await task
