from __future__ import annotations

from django.db.models import BooleanField, ExpressionWrapper, F, Q
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.response import Response

from engine.stages import STAGE_ORDER
from workbench import pipeline
from workbench.api import hot_reads
from workbench.api.errors import error_response
from workbench.api.filters import ListFilter
from workbench.api.schema import errors
from workbench.api.serializers import (
    ArtifactSerializer,
    InputDataSerializer,
    ModelUploadSerializer,
    OnnxModelSerializer,
    RunCreateSerializer,
    RunSerializer,
    StageResultSerializer,
    TargetProfileSerializer,
    TargetSerializer,
    UploadedModelSerializer,
    UploadSerializer,
)
from workbench.devices import tracker_devices
from workbench.downloads import artifact_response
from workbench.limits import LimitExceeded
from workbench.models import Artifact, OnnxModel, Run, Status, Target
from workbench.snapshots import snapshot_stages
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

MULTIPART = "multipart/form-data"


def is_plain_list(request) -> bool:
    """A list asked for unfiltered in its default order, paging alone: what CI jobs poll,
    served by ``hot_reads`` (anything else goes through the ORM and the filters)."""
    return request.query_params.keys() <= {"limit", "offset"}


def upload_name(request) -> str:
    """The optional ``name`` form field, checked as any text field is (no NUL bytes)."""
    try:
        return UploadSerializer().fields["name"].run_validation(request.data.get("name", ""))
    except serializers.ValidationError as e:
        raise serializers.ValidationError({"name": e.detail}) from e


def id_field(help_text: str) -> serializers.IntegerField:
    """An optional id filter, bounded as the database's ids are."""
    return serializers.IntegerField(
        min_value=1, max_value=2**63 - 1, required=False, help_text=help_text
    )


class ModelFilter(ListFilter):
    name = serializers.CharField(
        max_length=200, required=False, help_text="name contains (any case)"
    )
    lookups = {"name": "name__icontains"}


@extend_schema_view(
    list=extend_schema(summary="Your models"),
    retrieve=extend_schema(summary="A model"),
    destroy=extend_schema(summary="Delete a model, its runs and their results"),
)
class ModelViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    queryset = OnnxModel.objects.none()  # the schema's model; get_queryset is per user
    serializer_class = OnnxModelSerializer
    parser_classes = [MultiPartParser, FormParser]
    filterset_class = ModelFilter
    ordering_fields = ["id", "name", "created_at", "size_bytes", "node_count"]
    ordering = ["-created_at", "-id"]

    def list(self, request, *args, **kwargs):
        if not is_plain_list(request):
            return super().list(request, *args, **kwargs)
        page = self.paginate_queryset(hot_reads.OwnModels(request.user.pk))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def get_queryset(self):
        models = OnnxModel.objects.filter(owner=self.request.user)
        if self.action == "list":
            # whether each has an analysis, without reading the analyses (megabytes of JSON
            # for a large model, decoded for every model listed)
            models = models.defer("analysis").annotate(
                has_analysis=ExpressionWrapper(Q(analysis__isnull=False), BooleanField())
            )
        return models

    @extend_schema(
        summary="Upload a model",
        description="Multipart: `file` (the .onnx), an optional `name` and `analyze` "
        "(default true: a new model is analyzed at once, as on the web page; "
        "`analysis_run` is that run). The same bytes uploaded again return the model you "
        "already have (200) instead of a copy.",
        request={MULTIPART: ModelUploadSerializer},
        responses={
            201: OpenApiResponse(UploadedModelSerializer, description="A new model."),
            200: OpenApiResponse(UploadedModelSerializer, description="You already had it."),
            **errors(403, 413, 429),
        },
    )
    def create(self, request):
        try:
            analyze = serializers.BooleanField().to_internal_value(
                request.data.get("analyze", True)
            )
        except serializers.ValidationError:
            return error_response(
                "invalid_request",
                "analyze must be true or false",
                400,
                {"analyze": str(request.data.get("analyze"))[:20]},
            )
        try:
            uploaded = request.FILES.get("file")
            check_not_too_large(request._request)
            model, created = store_model_upload(
                uploaded, owner=request.user, name=upload_name(request)
            )
        except UploadRejected as e:
            return error_response(e.code, e.message, e.status)
        body = dict(OnnxModelSerializer(model).data)
        body["analysis_run"] = body["analysis_not_started"] = None
        if created and analyze:
            # As the web page does: a new upload is analyzed at once. A limit reached
            # keeps the upload and says why no analysis started.
            try:
                body["analysis_run"] = pipeline.start_analysis(request.user, model).pk
            except LimitExceeded as e:
                body["analysis_not_started"] = e.message
        code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
        return Response(body, status=code)

    @extend_schema(
        methods=["GET"],
        summary="The model's input sets",
        responses={200: InputDataSerializer(many=True)},
    )
    @extend_schema(
        methods=["POST"],
        summary="Add an input set",
        description="Multipart: `file`, an .npz with one array per model input (names, "
        "shapes and dtypes are checked against the model's), and an optional `name`.",
        request={MULTIPART: UploadSerializer},
        responses={201: InputDataSerializer, **errors(403, 413, 429)},
    )
    @action(detail=True, methods=["get", "post"], pagination_class=None, filter_backends=[])
    def inputs(self, request, pk=None):
        model = self.get_object()
        if request.method == "GET":
            return Response(InputDataSerializer(model.input_sets.all(), many=True).data)
        try:
            uploaded = request.FILES.get("file")
            check_not_too_large(request._request)
            data = store_input_upload(uploaded, model=model, name=upload_name(request))
        except UploadRejected as e:
            return error_response(e.code, e.message, e.status)
        return Response(InputDataSerializer(data).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The model's analysis",
        description="The result of the latest successful analyze stage: ops, shapes, FLOPs, "
        "params, bytes. 404 (`not_analyzed`) until a run with the analyze stage succeeded.",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="The analysis.")},
    )
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


class TargetFilter(ListFilter):
    kind = serializers.ChoiceField(choices=Target.Kind.choices, required=False)
    name = serializers.CharField(max_length=100, required=False, help_text="exactly this name")
    all_versions = serializers.BooleanField(
        default=False, help_text="every version of each target, not only the newest"
    )

    lookups = {"kind": "kind", "name": "name"}

    def filter(self, queryset, values: dict):
        values = dict(values)
        if not values.pop("all_versions"):
            queryset = latest_versions(queryset)
        return super().filter(queryset, values)


TARGET_BODY = {"application/json": TargetProfileSerializer}


@extend_schema_view(
    list=extend_schema(summary="Built-in targets and yours"),
    retrieve=extend_schema(summary="A target (any version)"),
)
class TargetViewSet(viewsets.ReadOnlyModelViewSet):
    """Built-in and own targets. POST a profile to create (or add a version of) an own
    target; PUT to add a version; DELETE removes every version no run uses."""

    queryset = Target.objects.none()  # the schema's model; get_queryset is per user
    serializer_class = TargetSerializer
    filterset_class = TargetFilter
    ordering_fields = ["id", "name", "kind", "version", "created_at"]
    ordering = ["owner_id", "name"]

    def get_queryset(self):
        return visible_targets(self.request.user)

    @extend_schema(
        summary="Create a target, or a new version of yours",
        request=TARGET_BODY,
        responses={201: TargetSerializer},
    )
    def create(self, request):
        return self._save(request.data, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Add a version to your target",
        description="The profile keeps the target's name; runs keep the version they used.",
        request=TARGET_BODY,
        responses={200: TargetSerializer},
    )
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

    @extend_schema(
        summary="Delete your target (every version)",
        description="409 while a run uses one of its versions.",
        responses={204: None, **errors(409)},
    )
    def destroy(self, request, pk=None):
        target = get_object_or_404(Target, pk=pk, owner=request.user)
        try:
            delete_user_target(target)
        except TargetRejected as e:
            return error_response("target_in_use", e.message, 409)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="The devices behind a remote target",
        description="What the target's RPC tracker reports now: per device key, the devices "
        "registered, how many are free and how many requests wait. Empty for other kinds; "
        "a tracker that does not answer gives its error.",
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def devices(self, request, pk=None):
        target = get_object_or_404(visible_targets(request.user), pk=pk)
        return Response({"target": target.name, "trackers": tracker_devices([target])})

    def _save(self, document, http_status):
        try:
            target = save_user_target(self.request.user, parse_profile(document, parsed=True))
        except TargetRejected as e:
            return error_response("invalid_target", e.message, 400, detail=e.problems or None)
        return Response(self.get_serializer(target).data, status=http_status)


RUN_STATUSES = [s for s in Status if s not in (Status.SKIPPED, Status.NOT_APPLICABLE)]


class RunFilter(ListFilter):
    model = id_field("runs of this model (id)")
    status = serializers.ChoiceField(choices=RUN_STATUSES, required=False)
    target = serializers.CharField(
        max_length=100, required=False, help_text="runs on this target (id or name)"
    )
    lookups = {"model": "model_id", "status": "status"}

    def filter(self, queryset, values: dict):
        values = dict(values)
        target = values.pop("target", None)
        if target is not None:
            by_id = target.isascii() and target.isdigit() and len(target) < 19
            queryset = queryset.filter(
                **({"target_id": int(target)} if by_id else {"target__name": target})
            )
        return super().filter(queryset, values)


STAGE = OpenApiParameter(
    "stage", str, OpenApiParameter.PATH, enum=STAGE_ORDER, description="a stage of the run"
)


@extend_schema_view(
    list=extend_schema(summary="Your runs"),
)
class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = Run.objects.none()  # the schema's model; get_queryset is per user
    serializer_class = RunSerializer
    filterset_class = RunFilter
    ordering_fields = ["id", "created_at", "status"]
    ordering = ["-created_at", "-id"]

    def get_queryset(self):
        # the target's name, not its row: a profile is JSON to decode for every run listed
        return (
            Run.objects.filter(owner=self.request.user)
            .annotate(target_name=F("target__name"))
            .prefetch_related(snapshot_stages())
        )

    def list(self, request, *args, **kwargs):
        if not is_plain_list(request):
            return super().list(request, *args, **kwargs)
        page = self.paginate_queryset(hot_reads.OwnRuns(request.user.pk))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @extend_schema(summary="A run: its state and every stage's")
    def retrieve(self, request, pk=None):
        run = self._own_run(pk)
        if run.is_active:
            pipeline.reap_stale_stages(run_ids=[run.pk])
            run = self._own_run(pk)
        return Response(self.get_serializer(run).data)

    def _own_run(self, pk: str) -> Run:
        """The run polled (``hot_reads``; an id that is not a plain number: the ORM)."""
        if not (pk.isascii() and pk.isdigit() and len(pk) < 19):
            return self.get_object()
        run = hot_reads.own_run(self.request.user.pk, int(pk))
        if run is None:
            raise Http404("no such run")
        self.check_object_permissions(self.request, run)
        return run

    @extend_schema(
        summary="Start a run",
        description="The stages and their options are validated before anything is queued: "
        "a bad one is a 400 naming the field (`options.profile.window_s`).",
        request=RunCreateSerializer,
        responses={201: RunSerializer, **errors(429)},
    )
    def create(self, request):
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

    @extend_schema(
        summary="Cancel a run",
        request=None,
        responses={
            200: OpenApiResponse(RunSerializer, description="Cancelled."),
            409: OpenApiResponse(RunSerializer, description="It had already finished."),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = self.get_object()
        cancelled = pipeline.cancel_run(run)
        run = self.get_queryset().get(pk=run.pk)
        body = self.get_serializer(run).data
        return Response(body, status=status.HTTP_200_OK if cancelled else status.HTTP_409_CONFLICT)

    @extend_schema(
        summary="Retry a failed or cancelled run",
        description="A new run (201): stages that succeeded are kept, the others run again; "
        "409 when the run is not failed or cancelled.",
        request=None,
        responses={201: RunSerializer, **errors(409, 429)},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        run = self.get_object()
        try:
            new = pipeline.retry_run(run)
        except pipeline.RetryRefused as e:
            return error_response("not_retryable", e.message, status.HTTP_409_CONFLICT)
        new = self.get_queryset().get(pk=new.pk)
        return Response(self.get_serializer(new).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="The run's artifacts",
        description="Every artifact of the run (a run has a few, so this list is not paged; "
        "`GET /api/v1/artifacts/?run=` pages and orders them).",
        responses={200: ArtifactSerializer(many=True)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def artifacts(self, request, pk=None):
        run = self.get_object()
        return Response(ArtifactSerializer(run.artifacts.all(), many=True).data)

    @extend_schema(
        summary="A stage of the run, with its result",
        parameters=[STAGE],
        responses={200: StageResultSerializer},
    )
    @action(detail=True, methods=["get"], url_path=r"stages/(?P<stage>[a-z_]+)")
    def stage(self, request, pk=None, stage=None):
        run = self.get_object()
        result = get_object_or_404(run.stages, stage=stage)
        return Response(StageResultSerializer(result).data)


class ArtifactFilter(ListFilter):
    run = id_field("artifacts of this run (id)")
    stage = serializers.ChoiceField(choices=STAGE_ORDER, required=False)
    kind = serializers.ChoiceField(choices=Artifact.Kind.choices, required=False)
    lookups = {"run": "run_id", "stage": "stage", "kind": "kind"}


@extend_schema_view(
    list=extend_schema(summary="Artifacts of your runs"),
    retrieve=extend_schema(summary="An artifact"),
)
class ArtifactViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Artifact.objects.none()  # the schema's model; get_queryset is per user
    serializer_class = ArtifactSerializer
    filterset_class = ArtifactFilter
    ordering_fields = ["id", "run", "stage", "kind", "name", "size_bytes", "created_at"]
    ordering = ["run", "id"]

    def get_queryset(self):
        return Artifact.objects.filter(run__owner=self.request.user)

    @extend_schema(
        summary="Download an artifact",
        description="The file's bytes, as an attachment, with its sha256 in "
        "`X-Content-SHA256`: check it before use. Where the server keeps files in object "
        "storage with presigned downloads on, the answer is a 302 to a link that is valid "
        "for a few minutes: follow it without this API's `Authorization` header.",
        parameters=[
            OpenApiParameter(
                "X-Content-SHA256",
                str,
                OpenApiParameter.HEADER,
                response=[200, 302],
                description="The file's sha256, hex.",
            )
        ],
        responses={
            (200, "application/octet-stream"): OpenApiResponse(
                OpenApiTypes.BINARY, description="The file."
            ),
            302: OpenApiResponse(description="`Location`: a presigned link to the file."),
        },
    )
    @action(detail=True, methods=["get"])
    def download(self, request, pk=None):
        return artifact_response(self.get_object())


@csrf_exempt  # a 404 whatever the method, not the CSRF check's 403 page
def no_such_endpoint(request, *args, **kwargs):
    """Any other path under /api/v1/ (a malformed id included): the API's 404 body, not the
    site's HTML page."""
    return JsonResponse(
        {"error": {"code": "not_found", "message": f"no API endpoint {request.path[:200]}"}},
        status=404,
    )
