"""How the web server runs: uvicorn, the same way in ``manage.py serve``, the tests, the load
benchmark and the Docker image."""

from __future__ import annotations

import sys

UVICORN_OPTIONS = (
    "--ws",
    "websockets",
    "--http",
    "httptools",
    "--no-server-header",
    "--timeout-graceful-shutdown",
    "5",
)
"""uvicorn streams request bodies to the app, so a body is capped and spooled as it arrives
(daphne, the server before, read every body whole into memory first; see
``workbench.body_limit``); websockets through the ``websockets`` package. On stop, open
connections get 5 s: after a websocket session uvicorn otherwise waited on its task for
as long as the process lived (a stopped ``bin/start`` hung until killed)."""


def uvicorn_command(host: str, port: int, *extra: str) -> list[str]:
    """The command line that serves the workbench on ``host:port`` (``extra``: more uvicorn
    options, e.g. ``--workers 2``)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--host",
        host,
        "--port",
        str(port),
        *UVICORN_OPTIONS,
        *extra,
        "workbench.asgi:application",
    ]
