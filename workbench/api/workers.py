"""The worker registry over the API, for operators (staff accounts only)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from workbench.api.schema import ErrorSerializer
from workbench.models import Worker
from workbench.workers import worker_list


class CurrentStageSerializer(serializers.Serializer):
    run = serializers.IntegerField()
    stage = serializers.CharField()
    progress = serializers.FloatField(help_text="0..1")


class WorkerSerializer(serializers.Serializer):
    hostname = serializers.CharField(help_text="the Celery node name, as stages name it")
    machine = serializers.CharField()
    pid = serializers.IntegerField()
    state = serializers.ChoiceField(
        Worker.State.choices,
        help_text="alive: heard within WORKBENCH_STALE_SECONDS; stale: not since; "
        "gone: shut down cleanly",
    )
    serves_all = serializers.BooleanField(
        help_text="declared no targets: serves every target but other machines' measured ones"
    )
    targets = serializers.ListField(child=serializers.CharField(), help_text="declared names")
    queues = serializers.ListField(child=serializers.CharField(), help_text="consumed now")
    concurrency = serializers.IntegerField(help_text="stages it runs at once")
    load_1m = serializers.FloatField(allow_null=True, help_text="load average over 1 minute")
    load_5m = serializers.FloatField(allow_null=True, help_text="load average over 5 minutes")
    load_15m = serializers.FloatField(allow_null=True, help_text="load average over 15 minutes")
    current = CurrentStageSerializer(many=True, help_text="the stages it is running")
    started_at = serializers.DateTimeField()
    heartbeat_at = serializers.DateTimeField()
    stopped_at = serializers.DateTimeField(allow_null=True)


class WorkerListView(APIView):
    permission_classes = [IsAdminUser]

    @extend_schema(
        summary="The workers: host, targets, load, current stage, last heartbeat, state",
        responses={
            200: WorkerSerializer(many=True),
            403: OpenApiResponse(ErrorSerializer, description="Not a staff account."),
        },
    )
    def get(self, request):
        return Response(WorkerSerializer(worker_list(), many=True).data)
