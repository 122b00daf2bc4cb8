from __future__ import annotations

import re

from django import forms

from jobs.stages import STAGES
from workbench.models import Target
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

    def __init__(self, *args, user=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].queryset = latest_versions(visible_targets(user)).order_by(
            "owner_id", "name"
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

    partition_network = forms.ChoiceField(
        required=False,
        choices=[("", "no cloud"), ("3g", "3G"), ("4g", "4G"), ("wifi", "Wi-Fi")],
        label="Partition: also consider offloading to the cloud preset over",
    )

    def clean_input_shapes(self) -> dict[str, list[int]]:
        return parse_shapes(self.cleaned_data.get("input_shapes", ""))

    def options(self) -> dict:
        data = self.cleaned_data
        return {
            "analyze": {"input_shapes": data["input_shapes"], "simplify": data["simplify"]},
            "profile": {"window_s": data["profile_window_s"]},
            "memory": {"in_place": data["memory_in_place"]},
            "partition": (
                {"cloud": CLOUD_PRESET, "network": data["partition_network"]}
                if data["partition_network"]
                else {}
            ),
        }
