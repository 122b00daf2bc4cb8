from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.options import OptionsError
from engine.stages import STAGE_ORDER, RunOptions
from workbench.forms import parse_shapes
from workbench.models import Artifact, InputData, OnnxModel, Run, StageResult, Status, Target
from workbench.snapshots import run_snapshot
from workbench.targets import visible_targets


def drf_datetime(value) -> str | None:
    """A datetime as DRF's ``DateTimeField`` writes it: in the current time zone, ISO 8601,
    UTC as ``Z``."""
    if not value:
        return None
    text = value.astimezone(timezone.get_current_timezone()).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


# The runs and models are what every CI job polls. DRF builds a serializer's fields anew for
# every request (copying the declared ones, mapping each model field) and then walks them
# per row: a sixth of such a request's CPU (bench/api_profile.py). Their representations
# below are written out instead, with what DRF's fields write (str, int, float, the JSON as
# stored, dates as drf_datetime): tests/workbench/test_api_fast_paths.py compares them byte
# for byte with DRF's own. A field added to Meta.fields must be added there too (the test
# fails until it is).


class OnnxModelSerializer(serializers.ModelSerializer):
    analyzed = serializers.SerializerMethodField()

    class Meta:
        model = OnnxModel
        fields = [
            "id",
            "name",
            "sha256",
            "size_bytes",
            "ir_version",
            "opsets",
            "producer",
            "node_count",
            "inputs",
            "outputs",
            "is_sample",
            "analyzed",
            "baseline_run",
            "created_at",
        ]
        read_only_fields = fields

    def get_analyzed(self, obj: OnnxModel) -> bool:
        has_analysis = getattr(obj, "has_analysis", None)  # the list's annotation
        return obj.analysis is not None if has_analysis is None else bool(has_analysis)

    def to_representation(self, obj: OnnxModel) -> dict:
        return {
            "id": obj.pk,
            "name": obj.name,
            "sha256": obj.sha256,
            "size_bytes": obj.size_bytes,
            "ir_version": obj.ir_version,
            "opsets": obj.opsets,
            "producer": obj.producer,
            "node_count": obj.node_count,
            "inputs": obj.inputs,
            "outputs": obj.outputs,
            "is_sample": obj.is_sample,
            "analyzed": self.get_analyzed(obj),
            "baseline_run": obj.baseline_run_id,
            "created_at": drf_datetime(obj.created_at),
        }


class UploadedModelSerializer(OnnxModelSerializer):
    """The upload's answer: the model, and the analysis run it started (null when the
    model was already there, ``analyze`` was false, or a limit stopped it: then
    ``analysis_not_started`` says which)."""

    analysis_run = serializers.IntegerField(allow_null=True, read_only=True)
    analysis_not_started = serializers.CharField(allow_null=True, read_only=True)

    # more fields than the model's hand-written representation: DRF's own
    to_representation = serializers.ModelSerializer.to_representation

    class Meta(OnnxModelSerializer.Meta):
        fields = [*OnnxModelSerializer.Meta.fields, "analysis_run", "analysis_not_started"]
        read_only_fields = fields


class InputDataSerializer(serializers.ModelSerializer):
    class Meta:
        model = InputData
        fields = ["id", "name", "sha256", "size_bytes", "tensors", "created_at"]
        read_only_fields = fields


class UploadSerializer(serializers.Serializer):
    """A multipart upload: the file and an optional name (else the file's own)."""

    file = serializers.FileField()
    name = serializers.CharField(required=False, allow_blank=True, default="")


class ModelUploadSerializer(UploadSerializer):
    analyze = serializers.BooleanField(
        required=False,
        default=True,
        help_text="start the analysis run a new upload gets on the web page (default true)",
    )


class TargetProfileSerializer(serializers.Serializer):
    """A target profile (README "Targets"): validated by the engine, which names every
    field it refuses; start from a built-in target's ``profile``."""

    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=Target.Kind.choices)
    units = serializers.ListField(
        child=serializers.DictField(), help_text="compute units: name, kind, peak_gflops, ..."
    )
    links = serializers.ListField(child=serializers.DictField(), required=False)
    power = serializers.DictField(required=False)
    network = serializers.DictField(required=False, help_text="one network, named 'default'")
    networks = serializers.ListField(child=serializers.DictField(), required=False)
    description = serializers.CharField(required=False, allow_blank=True)


class TargetSerializer(serializers.ModelSerializer):
    builtin = serializers.BooleanField(source="is_builtin", read_only=True)
    units = serializers.ListField(source="unit_names", read_only=True)

    class Meta:
        model = Target
        fields = [
            "id",
            "name",
            "kind",
            "version",
            "builtin",
            "units",
            "queue",
            "description",
            "profile",
        ]
        read_only_fields = fields


# The run request's JSON fields are checked by the engine's RunOptions (one place for every
# default and limit); these classes only tell the schema what they hold.
@extend_schema_field({"type": "array", "items": {"type": "string", "enum": STAGE_ORDER}})
class StagesField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "oneOf": [
            {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
            },
            {"type": "string"},
        ]
    }
)
class InputShapesField(serializers.JSONField):
    pass


@extend_schema_field(
    {
        "type": "object",
        "properties": {name: {"type": "object"} for name in STAGE_ORDER},
        "additionalProperties": False,
    }
)
class OptionsField(serializers.JSONField):
    pass


@extend_schema_field({"type": "number"})
class WindowField(serializers.JSONField):
    pass


class RunCreateSerializer(serializers.Serializer):
    """A run request. The stages and their options are validated by the engine's
    :class:`RunOptions`, as the web form's are: a bad option is a 400 naming the field
    (``options.profile.window_s``) and nothing is enqueued."""

    model = serializers.IntegerField(min_value=1, max_value=2**63 - 1)
    target = serializers.CharField(default="host", max_length=200, help_text="target id or name")
    stages = StagesField(default=["analyze"], help_text="stage names, in any order")
    input_shapes = InputShapesField(
        required=False, default=dict, help_text='{"input": [1, 3, 224, 224]} or "input=1x3x224x224"'
    )
    options = OptionsField(
        required=False,
        default=dict,
        help_text='per-stage options, e.g. {"memory": {"in_place": true}}',
    )
    profile_window_s = WindowField(
        required=False, help_text="shorthand for options.profile.window_s"
    )

    def validate_model(self, value: int) -> OnnxModel:
        model = OnnxModel.objects.filter(pk=value, owner=self.context["request"].user).first()
        if model is None:
            raise serializers.ValidationError(f"you have no model with id {value}")
        return model

    def validate_target(self, value: str) -> Target:
        user = self.context["request"].user
        visible = visible_targets(user)
        target = (
            visible.filter(pk=int(value)).first()
            if value.isascii() and value.isdigit() and len(value) < 12  # not '²'
            else visible.filter(name=value).order_by("-version").first()
        )
        if target is None:
            names = ", ".join(sorted(set(visible.values_list("name", flat=True))))
            raise serializers.ValidationError(f"no target {value[:80]!r}; available: {names}")
        return target

    def validate_input_shapes(self, value):
        if isinstance(value, str):
            from django import forms

            try:
                return parse_shapes(value)
            except forms.ValidationError as e:
                raise serializers.ValidationError(e.messages) from e
        return value

    def validate(self, data: dict) -> dict:
        """The engine validates stages and options; ids named in the accuracy options must
        be the user's own. A field the API does not know is an error, not ignored: a
        misspelt option would otherwise run with its default, silently."""
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {
                    name[:80]: f"unknown field (known: {', '.join(self.fields)}); stage "
                    'options go under "options", e.g. {"options": {"profile": '
                    '{"window_s": 5}}}'
                    for name in unknown[:20]
                }
            )
        options = data.get("options")
        if not isinstance(options, dict):
            raise serializers.ValidationError(
                {"options": "expected an object: {stage: {option: value}}"}
            )
        options = {**options, "input_shapes": data.get("input_shapes", {})}
        if "profile_window_s" in data:
            profile = options.get("profile")
            profile = dict(profile) if isinstance(profile, dict) else {}
            options["profile"] = {"window_s": data["profile_window_s"], **profile}
        try:
            data["run_options"] = RunOptions.from_dict(data.get("stages"), options)
        except OptionsError as e:
            raise serializers.ValidationError(
                {_field_path(path): message for path, message in e.errors.items()}
            ) from e
        accuracy = data["run_options"].options.get("accuracy")
        user, model = self.context["request"].user, data.get("model")
        if accuracy is not None:
            other, inputs = accuracy.other_model, accuracy.inputs
            if other is not None and not OnnxModel.objects.filter(pk=other, owner=user).exists():
                raise serializers.ValidationError(
                    {"options.accuracy.other_model": f"you have no model with id {other}"}
                )
            if (
                inputs is not None
                and not InputData.objects.filter(pk=inputs, owner=user, model=model).exists()
            ):
                raise serializers.ValidationError(
                    {
                        "options.accuracy.inputs": f"model {model.pk} has no input set with id {inputs}"
                    }
                )
        return data


def _field_path(path: str) -> str:
    """Where a field lives in the request body: ``options.profile.window_s``, ``stages``."""
    return path if path in ("stages", "input_shapes") else f"options.{path}"


class StageResultSerializer(serializers.ModelSerializer):
    duration_s = serializers.FloatField(read_only=True, allow_null=True)

    class Meta:
        model = StageResult
        fields = [
            "stage",
            "status",
            "progress",
            "message",
            "attempts",
            "worker",
            "started_at",
            "finished_at",
            "duration_s",
            "error_code",
            "error_message",
            "result",
        ]
        read_only_fields = fields


class ArtifactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "stage", "kind", "name", "sha256", "size_bytes", "created_at"]
        read_only_fields = fields


class StageSnapshotSerializer(serializers.Serializer):
    stage = serializers.CharField()
    status = serializers.ChoiceField(choices=Status.choices)
    progress = serializers.FloatField()
    message = serializers.CharField()
    attempts = serializers.IntegerField()
    worker = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    error_code = serializers.CharField()
    error_message = serializers.CharField()


class RunSnapshotSerializer(serializers.Serializer):
    """The run's state as the websocket sends it (``workbench.snapshots``)."""

    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Status.choices)
    progress = serializers.FloatField(help_text="0..1")
    error_code = serializers.CharField()
    error_message = serializers.CharField()
    created_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    stages = StageSnapshotSerializer(many=True)


class RunSerializer(serializers.ModelSerializer):
    model = serializers.IntegerField(source="model_id", read_only=True)
    target = serializers.SerializerMethodField(help_text="the target's name")
    snapshot = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id",
            "model",
            "target",
            "config",
            "status",
            "progress",
            "retry_of",
            "snapshot",
            "created_at",
        ]
        read_only_fields = fields

    def get_target(self, obj: Run) -> str:
        # the API's runs carry the name alone (RunViewSet.get_queryset), not the target row
        name = getattr(obj, "target_name", None)
        return obj.target.name if name is None else name

    @extend_schema_field(RunSnapshotSerializer)
    def get_snapshot(self, obj: Run) -> dict:
        return run_snapshot(obj)

    def to_representation(self, obj: Run) -> dict:
        return {
            "id": obj.pk,
            "model": obj.model_id,
            "target": self.get_target(obj),
            "config": obj.config,
            "status": obj.status,
            "progress": float(obj.progress),
            "retry_of": obj.retry_of_id,
            "snapshot": run_snapshot(obj),
            "created_at": drf_datetime(obj.created_at),
        }
