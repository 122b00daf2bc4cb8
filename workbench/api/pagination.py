"""The API's pagination: ``limit`` and ``offset``, strict. DRF's own falls back to the
default on a malformed value, and passed an unbounded ``limit`` on to the database (a
``limit`` of 10^23 overflowed PostgreSQL's bigint: a 500).

The page is read before the total: when it is the last page (shorter than ``limit``), the
total is ``offset`` plus its length and no COUNT query runs. Most lists a client polls fit
in one page, so most requests save a query (a quarter of the run list's, measured with
``bench/api_profile.py``)."""

from __future__ import annotations

from rest_framework import pagination
from rest_framework.exceptions import ValidationError

MAX_LIMIT = 1000
MAX_OFFSET = 2**62


class StrictLimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = self.get_offset(request)
        page = list(queryset[self.offset : self.offset + self.limit])
        if len(page) < self.limit and (page or self.offset == 0):
            self.count = self.offset + len(page)
        else:
            self.count = self.get_count(queryset)
        self.display_page_controls = self.count > self.limit and self.template is not None
        return page

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
