"""Ordering and filtering of the API's lists, strict: an ordering field, a filter value or a
query parameter the list does not know is a 400 that says what it accepts. (DRF's own
ordering filter drops an unknown field silently: a typo returned the default order.)

A list view declares ``ordering_fields`` (the allow-list), ``ordering`` (the default) and
``filterset_class``, a :class:`ListFilter` whose fields are its query parameters. Both
apply to the ``list`` action only."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiFilterExtension
from drf_spectacular.plumbing import build_parameter_type
from drf_spectacular.utils import OpenApiParameter
from rest_framework import filters, serializers
from rest_framework.exceptions import ValidationError

ORDERING_PARAM = "ordering"
# the pagination's, and DRF's choice of renderer (the browsable API's links carry it)
OTHER_PARAMS = ("limit", "offset", "format")


class ListFilter(serializers.Serializer):
    """The query parameters a list is filtered by, all optional. Each maps to the lookup
    named in ``lookups`` unless ``filter`` is overridden."""

    lookups: dict[str, str] = {}

    def filter(self, queryset, values: dict):
        return queryset.filter(**{self.lookups[name]: value for name, value in values.items()})


def _is_list(view) -> bool:
    return getattr(view, "action", None) == "list"


class StrictOrderingFilter(filters.OrderingFilter):
    ordering_param = ORDERING_PARAM

    def get_ordering(self, request, queryset, view):
        raw = request.query_params.get(self.ordering_param)
        if not raw:
            return list(view.ordering)
        allowed = allowed_orderings(view)
        terms = [term.strip() for term in raw.split(",")]
        unknown = [term for term in terms if term not in allowed]
        if unknown:
            raise ValidationError(
                {
                    self.ordering_param: f"unknown ordering {','.join(unknown)[:200]!r}; order "
                    f"by {', '.join(view.ordering_fields)}, '-' first for descending, "
                    "several comma-separated"
                }
            )
        return terms

    def filter_queryset(self, request, queryset, view):
        if not _is_list(view):
            return queryset
        ordering = self.get_ordering(request, queryset, view)
        if not {"id", "-id"} & set(ordering):
            ordering.append("-id")  # ties broken the same way on every page
        return queryset.order_by(*ordering)

    def get_schema_operation_parameters(self, view):
        default = ",".join(view.ordering)
        return [
            {
                "name": self.ordering_param,
                "required": False,
                "in": "query",
                "description": "Sort by these fields, comma-separated; `-` before a field sorts "
                "it descending."
                + (
                    f" Default: `{default}`."
                    if set(view.ordering) <= allowed_orderings(view)
                    else ""
                ),
                "style": "form",
                "explode": False,
                "schema": {
                    "type": "array",
                    "items": {"type": "string", "enum": sorted(allowed_orderings(view))},
                },
            }
        ]


def allowed_orderings(view) -> set[str]:
    return {prefix + name for name in view.ordering_fields for prefix in ("", "-")}


class QueryFilter(filters.BaseFilterBackend):
    """Applies the view's ``filterset_class``, and refuses a query parameter that neither
    it, the ordering nor the pagination reads."""

    def filter_queryset(self, request, queryset, view):
        if not _is_list(view):
            return queryset
        filterset_class = getattr(view, "filterset_class", None) or ListFilter
        fields = set(filterset_class().fields)
        known = {ORDERING_PARAM, *OTHER_PARAMS, *fields}
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            reads = ", ".join(sorted(known - {"format"}))
            raise ValidationError(
                {
                    name[:80]: f"unknown query parameter; this list reads {reads}"
                    for name in unknown[:20]
                }
            )
        values = {k: v for k, v in request.query_params.items() if k in fields}
        filterset = filterset_class(data=values)
        filterset.is_valid(raise_exception=True)
        return filterset.filter(queryset, filterset.validated_data)


class QueryFilterExtension(OpenApiFilterExtension):
    """The schema of a ``filterset_class``: a query parameter per field, typed by
    drf-spectacular's own field mapping."""

    target_class = QueryFilter

    def get_schema_operation_parameters(self, auto_schema, *args, **kwargs):
        filterset_class = getattr(auto_schema.view, "filterset_class", None) or ListFilter
        # as drf-spectacular explodes a serializer given as parameters: validators included
        mapped = auto_schema._map_serializer(filterset_class(), "request")
        return [
            build_parameter_type(
                name=name,
                schema=schema,
                location=OpenApiParameter.QUERY,
                description=schema.pop("description", None),
            )
            for name, schema in mapped["properties"].items()
        ]
