"""ASGI entry point: HTTP through Django, websockets through Channels."""

import gc
import os

import django
from django.conf import settings  # noqa: E402 - lazy: nothing is read yet

from workbench.asgi_handler import PooledASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "workbench.settings")
if not settings.configured:
    # The web server: no persistent database connections here (workbench/env.py). A process
    # that set Django up before importing this module (a test) keeps its own.
    os.environ["WORKBENCH_ASGI"] = "1"
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does
django_http = PooledASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import get_resolver  # noqa: E402

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

# The views (and DRF, the serializers, the schema tools) are imported with the URL patterns:
# 0.8 s, which the first requests of a new process waited for, all of them at once at 50
# clients (the load bench's slowest requests were its first). Done here, before serving.
get_resolver().url_patterns  # noqa: B018 - the property imports them

# A full garbage collection walks every object the imports made (about 100,000) while every
# request of the process waits: 60-110 ms each, a few times per thousand API requests
# (timed with gc.callbacks on bench/api_profile.py's requests). Frozen, they are not walked:
# the longest full collection measured 35 ms.
gc.collect()
gc.freeze()
