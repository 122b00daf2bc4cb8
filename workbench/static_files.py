"""Static files served by the app itself (the embedded profile needs no web server)."""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404


class StaticFiles(ASGIStaticFilesHandler):
    """Django's handler, with a path that tries to leave the static directories (``..%2f``)
    answered 404 like any missing file; Django's own handler let it escape as a 500."""

    def serve(self, request):
        try:
            return super().serve(request)
        except SuspiciousOperation:
            raise Http404("no such static file") from None
