"""The API's pagination: ``limit`` and ``offset``, strict. DRF's own falls back to the
default on a malformed value, and passed an unbounded ``limit`` on to the database (a
``limit`` of 10^23 overflowed PostgreSQL's bigint: a 500)."""

from __future__ import annotations

from rest_framework import pagination
from rest_framework.exceptions import ValidationError

MAX_LIMIT = 1000
MAX_OFFSET = 2**62


class StrictLimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_limit(self, request):
        return self._read(request, self.limit_query_param, self.default_limit, 1, MAX_LIMIT)

    def get_offset(self, request):
        return self._read(request, self.offset_query_param, 0, 0, MAX_OFFSET)

    @staticmethod
    def _read(request, name: str, default: int, low: int, high: int) -> int:
        raw = request.query_params.get(name)
        if raw is None:
            return default
        try:
            value = int(raw) if raw.isascii() and len(raw) < 30 else None
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise ValidationError({name: f"must be a whole number from {low} to {high}"})
        return value

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": MAX_LIMIT},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
