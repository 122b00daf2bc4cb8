"""Security headers on every response: a Content-Security-Policy under which the pages run
(our scripts are files under /static/, no inline script or handler anywhere), so an
injected script has nowhere to run from."""

from __future__ import annotations

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        # plotly.js writes style rules and attributes as it draws
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self' {websocket}",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            host = request.get_host()
            response["Content-Security-Policy"] = CSP.format(websocket=f"ws://{host} wss://{host}")
        response.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response
