from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from workbench import pipeline
from workbench.api.errors import error_response
from workbench.api.serializers import (
    ArtifactSerializer,
    InputDataSerializer,
    OnnxModelSerializer,
    RunCreateSerializer,
    RunSerializer,
    StageResultSerializer,
    TargetSerializer,
)
from workbench.downloads import artifact_response
from workbench.models import Artifact, OnnxModel, Run, Target
from workbench.targets import (
    TargetRejected,
    delete_user_target,
    latest_versions,
    parse_profile,
    save_user_target,
    visible_targets,
)
from workbench.uploads import (
    UploadRejected,
    check_not_too_large,
    store_input_upload,
    store_model_upload,
)


class ModelViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = OnnxModelSerializer
    parser_classes = [MultiPartParser, FormParser]

    def get_queryset(self):
        return OnnxModel.objects.filter(owner=self.request.user)

    def create(self, request):
        """Upload: multipart with `file` (the .onnx) and optional `name`."""
        try:
            uploaded = request.FILES.get("file")
            check_not_too_large(request._request)
            model, created = store_model_upload(
                uploaded, owner=request.user, name=request.data.get("name", "")
            )
        except UploadRejected as e:
            return error_response(e.code, e.message, e.status)
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(self.get_serializer(model).data, status=code)

    @action(detail=True, methods=["get", "post"])
    def inputs(self, request, pk=None):
        """GET: the model's uploaded input sets; POST (multipart `file`): add an .npz."""
        model = self.get_object()
        if request.method == "GET":
            return Response(InputDataSerializer(model.input_sets.all(), many=True).data)
        try:
            uploaded = request.FILES.get("file")
            check_not_too_large(request._request)
            data = store_input_upload(uploaded, model=model, name=request.data.get("name", ""))
        except UploadRejected as e:
            return error_response(e.code, e.message, e.status)
        return Response(InputDataSerializer(data).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["get"])
    def analysis(self, request, pk=None):
        model = self.get_object()
        if model.analysis is None:
            return error_response(
                "not_analyzed",
                "this model has no analysis yet: start a run with the analyze stage",
                404,
            )
        return Response(model.analysis)


class TargetViewSet(viewsets.ReadOnlyModelViewSet):
    """Built-in and own targets. POST a profile to create (or add a version of) an own
    target; PUT to add a version; DELETE removes every version no run uses."""

    serializer_class = TargetSerializer

    def get_queryset(self):
        targets = visible_targets(self.request.user)
        if self.request.query_params.get("all_versions"):
            return targets
        return latest_versions(targets).order_by("owner_id", "name")

    def create(self, request):
        return self._save(request.data, status.HTTP_201_CREATED)

    def update(self, request, pk=None):
        target = get_object_or_404(Target, pk=pk, owner=request.user)
        try:
            document = dict(parse_profile(request.data, parsed=True))
        except TargetRejected as e:
            return error_response("invalid_target", e.message, 400)
        if document.get("name", target.name) != target.name:
            return error_response(
                "invalid_target", "a new version keeps the name; POST a new target instead", 400
            )
        return self._save({**document, "name": target.name}, status.HTTP_200_OK)

    def destroy(self, request, pk=None):
        target = get_object_or_404(Target, pk=pk, owner=request.user)
        try:
            delete_user_target(target)
        except TargetRejected as e:
            return error_response("target_in_use", e.message, 409)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _save(self, document, http_status):
        try:
            target = save_user_target(self.request.user, parse_profile(document, parsed=True))
        except TargetRejected as e:
            return error_response("invalid_target", e.message, 400, detail=e.problems or None)
        return Response(self.get_serializer(target).data, status=http_status)


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = RunSerializer

    def get_queryset(self):
        return (
            Run.objects.filter(owner=self.request.user)
            .select_related("target")
            .prefetch_related("stages")
        )

    def retrieve(self, request, pk=None):
        run = self.get_object()
        if run.is_active:
            pipeline.reap_stale_stages(run_ids=[run.pk])
            run = self.get_queryset().get(pk=run.pk)
        return Response(self.get_serializer(run).data)

    def create(self, request):
        """Start a run: {"model": id, "target": "host", "stages": ["analyze"], ...}."""
        serializer = RunCreateSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        run = pipeline.create_run(
            owner=request.user,
            model=data["model"],
            target=data["target"],
            options=data["run_options"],
        )
        run = self.get_queryset().get(pk=run.pk)
        return Response(self.get_serializer(run).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = self.get_object()
        cancelled = pipeline.cancel_run(run)
        run = self.get_queryset().get(pk=run.pk)
        body = self.get_serializer(run).data
        return Response(body, status=status.HTTP_200_OK if cancelled else status.HTTP_409_CONFLICT)

    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        """A new attempt (201): stages that succeeded are kept, the others run again; 409
        when the run is not failed or cancelled."""
        run = self.get_object()
        try:
            new = pipeline.retry_run(run)
        except pipeline.RetryRefused as e:
            return error_response("not_retryable", e.message, status.HTTP_409_CONFLICT)
        new = self.get_queryset().get(pk=new.pk)
        return Response(self.get_serializer(new).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["get"])
    def artifacts(self, request, pk=None):
        run = self.get_object()
        return Response(ArtifactSerializer(run.artifacts.all(), many=True).data)

    @action(detail=True, methods=["get"], url_path=r"stages/(?P<stage>[a-z_]+)")
    def stage(self, request, pk=None, stage=None):
        run = self.get_object()
        result = get_object_or_404(run.stages, stage=stage)
        return Response(StageResultSerializer(result).data)


class ArtifactViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = ArtifactSerializer

    def get_queryset(self):
        return Artifact.objects.filter(run__owner=self.request.user)

    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        return artifact_response(self.get_object())
