"""Pages as one self-contained HTML file: the stylesheet and the scripts (plotly.js
included) inlined, figures embedded as JSON, so the file opens offline from file://."""

from __future__ import annotations

import re

from django.contrib.staticfiles import finders
from django.http import HttpResponse
from django.template.loader import render_to_string
from django.templatetags.static import static

_SCRIPT = re.compile(r'<script src="([^"]+)"></script>')
_STYLE = re.compile(r'<link rel="stylesheet" href="([^"]+)">')


def standalone_html(request, template: str, context: dict, name: str) -> HttpResponse:
    """``template`` rendered with every static script and stylesheet inlined, as a download
    named ``name``.html."""
    html = render_to_string(template, {**context, "standalone": True}, request=request)
    html = _STYLE.sub(lambda m: f"<style>{_static_text(m.group(1))}</style>", html)
    html = _SCRIPT.sub(
        lambda m: (
            "<script>" + _static_text(m.group(1)).replace("</script", "<\\/script") + "</script>"
        ),
        html,
    )
    response = HttpResponse(html, content_type="text/html; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}.html"'
    return response


def _static_text(url: str) -> str:
    prefix = static("")
    if not url.startswith(prefix):
        raise ValueError(f"not a static file: {url}")
    path = finders.find(url[len(prefix) :])
    if path is None:
        raise ValueError(f"static file missing: {url}")
    with open(path, encoding="utf-8") as f:
        return f.read()
