"""What the OpenAPI schema says beyond what drf-spectacular reads from the views: the one
error body, and the errors each kind of operation can answer."""

from __future__ import annotations

import re

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

ERROR_COMPONENT = "Error"  # drf-spectacular names ErrorSerializer's component so

ERRORS = {
    400: "The request is invalid: `detail` names each bad field, parameter or value.",
    401: "No credentials, or an unknown or expired token.",
    403: "Not allowed: the storage quota is used up (delete models to free it), or a "
    "browser session sent no CSRF token.",
    "csrf": "Signed in with a browser session but sent no CSRF token (token clients never "
    "see this).",
    404: "No such object, or it belongs to another account.",
    409: "The object is in a state that does not allow this.",
    413: "The upload is larger than the server's limit.",
    429: "A rate limit or the active-run quota was reached; `Retry-After` says when to try again.",
}


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(
        help_text="Stable and machine-readable: `invalid_request`, `not_found`, "
        "`not_authenticated`, `throttled`, `file_too_large`, ..."
    )
    message = serializers.CharField(help_text="What went wrong and what to do, for a person.")
    detail = serializers.JSONField(
        required=False,
        help_text="More to say, when there is: for an invalid request, each field, "
        "parameter or value that is wrong, with its problem.",
    )


class ErrorSerializer(serializers.Serializer):
    """The body of every 4xx answer."""

    error = ErrorDetailSerializer()


def errors(*codes: int) -> dict:
    """``responses`` entries for these error statuses, each with the error body."""
    return {code: OpenApiResponse(ErrorSerializer, description=ERRORS[code]) for code in codes}


def add_implied_errors(result, generator, request, public):
    """Postprocessing hook: the errors every operation of a kind can answer, so no view
    has to list them. 401 where a token is needed, 404 where the path names an object,
    400 where there is a query string or a body to get wrong, 403 where a browser session
    must send its CSRF token; and a 429's ``Retry-After``."""
    body = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_COMPONENT}"}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            security = operation.get("security", [{}])
            implied = {}
            if {} not in security:
                implied[401] = ERRORS[401]
            if re.search(r"\{\w+\}", path):
                implied[404] = ERRORS[404]
            if "requestBody" in operation or any(
                p["in"] == "query" for p in operation.get("parameters", [])
            ):
                implied[400] = ERRORS[400]
            if method in ("post", "put", "patch", "delete") and {"cookieAuth": []} in security:
                implied[403] = ERRORS["csrf"]
            responses = operation.setdefault("responses", {})
            for code, description in sorted(implied.items()):
                responses.setdefault(str(code), {"content": body, "description": description})
            if "429" in responses:
                responses["429"]["headers"] = {
                    "Retry-After": {
                        "schema": {"type": "integer"},
                        "description": "Seconds to wait before trying again.",
                    }
                }
    return result
