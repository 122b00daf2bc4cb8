"""Comparisons and headline figures over the API."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from workbench.api.errors import error_response
from workbench.compare import (
    CompareRejected,
    compare_for,
    figures_csv,
    figures_of,
    ops_csv,
    parse_run_ids,
)
from workbench.models import Run


class CompareView(APIView):
    """``GET /api/v1/compare/?runs=12,15[&table=figures|ops]``: two or more of your runs
    side by side (the first is the reference of every delta); ``table`` gives that table
    as CSV instead of the JSON document."""

    def get(self, request):
        try:
            ids = parse_run_ids(request.query_params.get("runs"))
            comparison = compare_for(request.user, ids)
        except CompareRejected as e:
            code = "not_found" if e.status == 404 else "invalid_request"
            return error_response(code, e.message, e.status)
        table = request.query_params.get("table")
        if table is None:
            return Response(comparison)
        writers = {"figures": figures_csv, "ops": ops_csv}
        if table not in writers:
            return error_response(
                "invalid_request", "table must be 'figures' or 'ops' (CSV), or left out (JSON)", 400
            )
        response = HttpResponse(writers[table](comparison), content_type="text/csv")
        name = "-".join(str(i) for i in ids)
        response["Content-Disposition"] = f'attachment; filename="compare-{name}-{table}.csv"'
        return response


class RunFiguresView(APIView):
    """``GET /api/v1/runs/{id}/figures/``: the run's headline figures (what gates test),
    each with its unit, which way is better and what it is: measured, predicted or
    counted."""

    def get(self, request, pk: int):
        run = get_object_or_404(
            Run.objects.select_related("model", "target").prefetch_related("stages"),
            pk=pk,
            owner=request.user,
        )
        return Response({"run": run.pk, "status": run.status, "figures": figures_of(run)})
