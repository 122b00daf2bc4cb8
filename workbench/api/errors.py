"""One error shape for the whole API: {"error": {"code", "message", "detail"?}}."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def error_response(code: str, message: str, http_status: int, detail=None) -> Response:
    body = {"error": {"code": code, "message": message}}
    if detail is not None:
        body["error"]["detail"] = detail
    return Response(body, status=http_status)


def exception_handler(exc, context):
    from workbench.limits import LimitExceeded, limit_status

    if isinstance(exc, LimitExceeded):
        response = error_response(exc.code, exc.message, limit_status(exc))
        if exc.retry_after_s:
            response["Retry-After"] = str(exc.retry_after_s)
        return response
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "detail" in data and len(data) == 1:
        code = getattr(data["detail"], "code", "error")
        message = str(data["detail"])
        detail = None
    else:
        code = "invalid_request" if response.status_code == status.HTTP_400_BAD_REQUEST else "error"
        message = "the request is invalid; see detail for each field"
        detail = data
    if response.status_code == status.HTTP_404_NOT_FOUND:
        code, message = "not_found", "no such object (or it belongs to someone else)"
    response.data = {"error": {"code": str(code), "message": message}}
    if detail is not None:
        response.data["error"]["detail"] = detail
    return response
