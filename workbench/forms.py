from __future__ import annotations

import re

from django import forms

from jobs.stages import STAGES
from workbench.models import InputData, OnnxModel, Target
from workbench.targets import latest_versions, visible_targets

# The cloud side of the mobile-cloud split (a preset of engine/targets/presets).
CLOUD_PRESET = "cloud-xeon-e5-2620v4"

_SHAPE = re.compile(r"^\s*([^=\s]+)\s*=\s*(\d+(?:\s*[x,]\s*\d+)*)\s*$")


def parse_shapes(text: str) -> dict[str, list[int]]:
    """'input=1x3x224x224' lines (or ; separated) -> {"input": [1, 3, 224, 224]}."""
    shapes: dict[str, list[int]] = {}
    for item in re.split(r"[;\n]", text or ""):
        if not item.strip():
            continue
        match = _SHAPE.match(item)
        if not match:
            raise forms.ValidationError(
                f"{item.strip()!r} is not NAME=DIMS, for example input=1x3x224x224"
            )
        dims = [int(d) for d in re.split(r"\s*[x,]\s*", match.group(2))]
        if any(d <= 0 for d in dims):
            raise forms.ValidationError(f"{match.group(1)}: every dimension must be positive")
        shapes[match.group(1)] = dims
    return shapes


class UploadModelForm(forms.Form):
    file = forms.FileField(
        label="ONNX model", widget=forms.ClearableFileInput(attrs={"accept": ".onnx"})
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")


class StartRunForm(forms.Form):
    target = forms.ModelChoiceField(queryset=Target.objects.none(), empty_label=None)
    stages = forms.MultipleChoiceField(
        choices=[(s.name, s.label) for s in STAGES.values()],
        initial=["analyze"],
        widget=forms.CheckboxSelectMultiple,
    )
    input_shapes = forms.CharField(
        required=False,
        label="Input shapes",
        help_text="For symbolic dimensions, e.g. input=1x3x224x224 (one per line).",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    profile_window_s = forms.FloatField(
        initial=5.0, min_value=0.5, max_value=600, label="Profile time window (s)"
    )

    def __init__(self, *args, user=None, model=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["accuracy_other_model"].queryset = OnnxModel.objects.filter(owner=user)
        self.fields["accuracy_inputs"].queryset = InputData.objects.filter(owner=user, model=model)
        self.fields["target"].queryset = latest_versions(visible_targets(user)).order_by(
            "owner_id", "name"
        )

    profile_threads = forms.IntegerField(
        initial=0, min_value=0, max_value=256, label="Profile threads (0: onnxruntime's default)"
    )
    profile_sweeps = forms.BooleanField(
        required=False, label="Profile: also sweep thread count and batch size (takes longer)"
    )
    simplify = forms.BooleanField(
        required=False,
        label="Simplify first (fold constants and shape arithmetic with onnxslim; the "
        "simplified ONNX becomes an artifact and is what gets analyzed)",
    )
    memory_in_place = forms.BooleanField(
        required=False,
        label="Memory plan: let elementwise ops overwrite their input (in-place reuse)",
    )

    compile_tune_minutes = forms.FloatField(
        initial=0,
        min_value=0,
        max_value=240,
        label="Compile: MetaSchedule tuning budget in minutes (0: default schedules only)",
    )
    partition_network = forms.ChoiceField(
        required=False,
        choices=[("", "no cloud"), ("3g", "3G"), ("4g", "4G"), ("wifi", "Wi-Fi")],
        label="Partition: also consider offloading to the cloud preset over",
    )

    accuracy_candidate = forms.ChoiceField(
        required=False,
        initial="fp16",
        choices=[
            ("fp16", "fp16 conversion of this model"),
            ("simplified", "simplified model (onnxslim)"),
            ("partitioned", "partitioned execution (needs the Partition stage)"),
            ("tvm", "TVM build of this model"),
            ("other", "another of my models, as an optimized version of this one"),
        ],
        label="Accuracy: candidate",
    )
    accuracy_other_model = forms.ModelChoiceField(
        queryset=OnnxModel.objects.none(), required=False, label="Accuracy: the other model"
    )
    accuracy_inputs = forms.ModelChoiceField(
        queryset=InputData.objects.none(),
        required=False,
        empty_label="generated from the input specs (seed 0, normal)",
        label="Accuracy: inputs",
    )

    def clean(self):
        data = super().clean()
        if data.get("accuracy_candidate") == "other" and not data.get("accuracy_other_model"):
            self.add_error("accuracy_other_model", "choose the model to compare against")
        return data

    def clean_input_shapes(self) -> dict[str, list[int]]:
        return parse_shapes(self.cleaned_data.get("input_shapes", ""))

    def options(self) -> dict:
        data = self.cleaned_data
        return {
            "analyze": {"input_shapes": data["input_shapes"], "simplify": data["simplify"]},
            "profile": {
                "window_s": data["profile_window_s"],
                "threads": data["profile_threads"],
                "sweeps": data["profile_sweeps"],
            },
            "memory": {"in_place": data["memory_in_place"]},
            "compile": {"tune_minutes": data["compile_tune_minutes"]},
            "accuracy": {
                "candidate": data["accuracy_candidate"] or "fp16",
                "other_model": data["accuracy_other_model"].pk
                if data["accuracy_other_model"]
                else None,
                "inputs": data["accuracy_inputs"].pk if data["accuracy_inputs"] else None,
            },
            "partition": (
                {"cloud": CLOUD_PRESET, "network": data["partition_network"]}
                if data["partition_network"]
                else {}
            ),
        }


class UploadInputsForm(forms.Form):
    file = forms.FileField(
        label="Inputs (.npz)",
        help_text="One array per model input, named like the input (numpy.savez).",
        widget=forms.ClearableFileInput(attrs={"accept": ".npz"}),
    )
