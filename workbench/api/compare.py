"""Comparisons and headline figures over the API."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from workbench.api.errors import error_response
from workbench.api.schema import errors
from workbench.compare import (
    CompareRejected,
    compare_for,
    figures_csv,
    figures_of,
    model_history,
    ops_csv,
    parse_run_ids,
    pin_baseline,
)
from workbench.models import OnnxModel, Run
from workbench.snapshots import light_stages


class FigureSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="`<stage>.<name>`, as gates write it")
    label = serializers.CharField()
    value = serializers.JSONField(help_text="a number, a word or a yes/no; null: unknown")
    unit = serializers.CharField(help_text="`ms`, `bytes`, `x`, `dB` or empty")
    better = serializers.ChoiceField(["lower", "higher"], allow_null=True)
    basis = serializers.CharField(help_text="measured (where, how), predicted (by what), counted")
    measured = serializers.BooleanField()
    noise_pct = serializers.FloatField(
        allow_null=True, help_text="run-to-run spread (IQR / median, %) of a measured figure"
    )


class RunFiguresSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    status = serializers.CharField()
    figures = FigureSerializer(many=True)


class DeltaSerializer(serializers.Serializer):
    direction = serializers.ChoiceField(
        [
            "better",
            "worse",
            "within noise",
            "same",
            "changed",
            "unknown",
            "missing",
            "not comparable (measured vs predicted)",
        ]
    )
    pct = serializers.FloatField(allow_null=True)
    ratio = serializers.FloatField(allow_null=True)


class FigureRowSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    unit = serializers.CharField()
    better = serializers.CharField(allow_null=True)
    values = serializers.ListField(child=serializers.JSONField(allow_null=True))
    deltas = DeltaSerializer(many=True, help_text="each run after the first, against the first")


class ComparisonSerializer(serializers.Serializer):
    runs = serializers.ListField(child=serializers.DictField())
    reference = serializers.IntegerField()
    figures = FigureRowSerializer(many=True)
    ops = serializers.DictField(help_text="per-op latency rows aligned to the reference run")
    kernels = serializers.DictField(help_text="per-kernel times of the TVM builds")
    memory = serializers.ListField(child=serializers.DictField(allow_null=True), allow_null=True)
    schedules = serializers.DictField(help_text="each run's best partition plan, per unit")
    noise_rule = serializers.CharField()


class HistorySerializer(serializers.Serializer):
    model = serializers.IntegerField()
    baseline = serializers.IntegerField(allow_null=True)
    runs = serializers.ListField(child=serializers.DictField())


class BaselineSerializer(serializers.Serializer):
    run = serializers.IntegerField(allow_null=True, min_value=1)


class BaselineResultSerializer(serializers.Serializer):
    model = serializers.IntegerField()
    baseline = serializers.IntegerField(allow_null=True)


class CompareView(APIView):
    """``GET /api/v1/compare/?runs=12,15[&table=figures|ops]``: two or more of your runs
    side by side (the first is the reference of every delta); ``table`` gives that table
    as CSV instead of the JSON document."""

    @extend_schema(
        summary="Compare runs",
        parameters=[
            OpenApiParameter("runs", str, required=True, description="run ids, e.g. `12,15`"),
            OpenApiParameter("table", str, enum=["figures", "ops"], description="CSV table"),
        ],
        responses={
            (200, "application/json"): ComparisonSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="with `table`"),
            **errors(400, 404),
        },
    )
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

    @extend_schema(summary="A run's headline figures", responses={200: RunFiguresSerializer})
    def get(self, request, pk: int):
        run = get_object_or_404(
            Run.objects.select_related("model", "target").prefetch_related(light_stages()),
            pk=pk,
            owner=request.user,
        )
        return Response({"run": run.pk, "status": run.status, "figures": figures_of(run)})


class ModelHistoryView(APIView):
    """``GET /api/v1/models/{id}/history/``: the headline figures of the model's latest
    runs, oldest first, and its pinned baseline run."""

    @extend_schema(summary="A model's history", responses={200: HistorySerializer})
    def get(self, request, pk: int):
        model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
        return Response(model_history(model))


class ModelBaselineView(APIView):
    """``PUT /api/v1/models/{id}/baseline/`` with ``{"run": id}`` pins a run of the model as
    its baseline (``{"run": null}`` unpins); gates written ``N*baseline`` use it when the
    CLI is given ``--baseline pinned``."""

    @extend_schema(
        summary="Pin a model's baseline run",
        request=BaselineSerializer,
        responses={200: BaselineResultSerializer},
    )
    def put(self, request, pk: int):
        model = get_object_or_404(OnnxModel, pk=pk, owner=request.user)
        data = request.data
        run = data.get("run") if isinstance(data, dict) else None
        valid_id = type(run) is int and 0 < run < 2**63
        if not isinstance(data, dict) or "run" not in data or not (run is None or valid_id):
            return error_response(
                "invalid_request", 'send {"run": <a run id of this model>} or {"run": null}', 400
            )
        try:
            pin_baseline(model, run)
        except CompareRejected as e:
            return error_response("invalid_request", e.message, e.status)
        return Response({"model": model.pk, "baseline": model.baseline_run_id})
