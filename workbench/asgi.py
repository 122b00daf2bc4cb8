"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os

from django.conf import settings  # noqa: E402 - lazy: nothing is read yet
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
if not settings.configured:
    # The web server: no persistent database connections here (workbench/env.py). A process
    # that set Django up before importing this module (a test) keeps its own.
    os.environ["WORKBENCH_ASGI"] = "1"
django_http = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from workbench.body_limit import BodyLimitMiddleware  # noqa: E402
from workbench.routing import websocket_urlpatterns  # noqa: E402
from workbench.static_files import StaticFiles  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files (our JS/CSS and plotly.min.js) are served by the app itself so the
        # embedded profile needs no web server; put a CDN or nginx in front in production.
        "http": BodyLimitMiddleware(StaticFiles(django_http)),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
