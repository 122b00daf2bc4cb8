"""How the web server runs: uvicorn, the same way in ``manage.py serve``, the tests and the
Docker image."""

UVICORN_OPTIONS = ("--ws", "websockets", "--http", "httptools", "--no-server-header")
"""uvicorn streams request bodies to the app, so a body is capped and spooled as it arrives
(daphne, the server before, read every body whole into memory first; see
``workbench.body_limit``); websockets through the ``websockets`` package."""
