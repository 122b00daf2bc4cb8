from __future__ import annotations

from rest_framework import serializers

from jobs.stages import STAGE_ORDER
from workbench.forms import parse_shapes
from workbench.models import Artifact, InputData, OnnxModel, Run, StageResult, Target
from workbench.snapshots import run_snapshot
from workbench.targets import visible_targets


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
            "created_at",
        ]
        read_only_fields = fields

    def get_analyzed(self, obj: OnnxModel) -> bool:
        return obj.analysis is not None


class InputDataSerializer(serializers.ModelSerializer):
    class Meta:
        model = InputData
        fields = ["id", "name", "sha256", "size_bytes", "tensors", "created_at"]
        read_only_fields = fields


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


class RunCreateSerializer(serializers.Serializer):
    model = serializers.IntegerField()
    target = serializers.CharField(default="host", help_text="target id or name")
    stages = serializers.ListField(
        child=serializers.ChoiceField(choices=STAGE_ORDER), default=["analyze"], allow_empty=False
    )
    input_shapes = serializers.JSONField(required=False, default=dict)
    options = serializers.DictField(
        required=False,
        default=dict,
        help_text='per-stage options, e.g. {"memory": {"in_place": true}}',
    )
    profile_window_s = serializers.FloatField(
        required=False, default=5.0, min_value=0.5, max_value=600
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
            if value.isdigit()
            else visible.filter(name=value).order_by("-version").first()
        )
        if target is None:
            names = ", ".join(sorted(set(visible.values_list("name", flat=True))))
            raise serializers.ValidationError(f"no target {value!r}; available: {names}")
        return target

    def validate_input_shapes(self, value):
        if isinstance(value, str):
            from django import forms

            try:
                return parse_shapes(value)
            except forms.ValidationError as e:
                raise serializers.ValidationError(e.messages) from e
        if not isinstance(value, dict) or not all(
            isinstance(dims, list) and dims and all(isinstance(d, int) and d > 0 for d in dims)
            for dims in value.values()
        ):
            raise serializers.ValidationError(
                'give {"input_name": [1, 3, 224, 224]} with positive integer dimensions'
            )
        return value

    def validate_options(self, value: dict) -> dict:
        for stage, values in value.items():
            if stage not in STAGE_ORDER or not isinstance(values, dict):
                raise serializers.ValidationError(
                    f"{stage!r}: give a stage name ({', '.join(STAGE_ORDER)}) and a mapping "
                    "of its options"
                )
        return value

    def validate(self, data: dict) -> dict:
        """Ids named in the accuracy options must be the user's own."""
        accuracy = data.get("options", {}).get("accuracy", {})
        user, model = self.context["request"].user, data.get("model")
        other, inputs = accuracy.get("other_model"), accuracy.get("inputs")
        if other is not None and not OnnxModel.objects.filter(pk=other, owner=user).exists():
            raise serializers.ValidationError({"options": f"you have no model with id {other}"})
        if (
            inputs is not None
            and not InputData.objects.filter(pk=inputs, owner=user, model=model).exists()
        ):
            raise serializers.ValidationError(
                {"options": f"model {model.pk} has no input set with id {inputs}"}
            )
        return data

    def stage_options(self) -> dict:
        data = self.validated_data
        options = {
            "analyze": {"input_shapes": data["input_shapes"]},
            "profile": {"window_s": data["profile_window_s"]},
        }
        for stage, values in data["options"].items():
            options[stage] = {**options.get(stage, {}), **values}
        return options


class StageResultSerializer(serializers.ModelSerializer):
    duration_s = serializers.FloatField(read_only=True)

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


class RunSerializer(serializers.ModelSerializer):
    model = serializers.IntegerField(source="model_id", read_only=True)
    target = serializers.CharField(source="target.name", read_only=True)
    snapshot = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "model", "target", "config", "status", "progress", "snapshot", "created_at"]
        read_only_fields = fields

    def get_snapshot(self, obj: Run) -> dict:
        return run_snapshot(obj)
