from __future__ import annotations

import re

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import UserCreationForm

from engine.options import OptionsError, OptionSpec
from engine.stages import STAGES, RunOptions
from workbench.models import InputData, OnnxModel, Target
from workbench.targets import latest_versions, visible_targets

_SHAPE = re.compile(r"^\s*([^=\s]+)\s*=\s*(\d+(?:\s*[x,]\s*\d+)*)\s*$")
_MAX_SHAPE_TEXT = 4000


def parse_shapes(text: str) -> dict[str, list[int]]:
    """'input=1x3x224x224' lines (or ; separated) -> {"input": [1, 3, 224, 224]}; the
    engine's options check names, ranks and sizes."""
    if len(text or "") > _MAX_SHAPE_TEXT:
        raise forms.ValidationError(f"longer than {_MAX_SHAPE_TEXT} characters")
    shapes: dict[str, list[int]] = {}
    for item in re.split(r"[;\n]", text or ""):
        if not item.strip():
            continue
        match = _SHAPE.match(item)
        if not match:
            raise forms.ValidationError(
                f"{item.strip()[:60]!r} is not NAME=DIMS, for example input=1x3x224x224"
            )
        shapes[match.group(1)] = [int(d) for d in re.split(r"\s*[x,]\s*", match.group(2))]
    return shapes


class UploadModelForm(forms.Form):
    file = forms.FileField(
        label="ONNX model", widget=forms.ClearableFileInput(attrs={"accept": ".onnx"})
    )
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the file name.")


def _field(spec: OptionSpec) -> forms.Field:
    """A form field for an engine option: the engine's default, bounds and help."""
    common = {"label": spec.label, "help_text": spec.help, "required": False}
    if spec.kind == "bool":
        return forms.BooleanField(initial=spec.default, **common)
    if spec.kind == "int":
        return forms.IntegerField(
            initial=spec.default, min_value=spec.min, max_value=spec.max, **common
        )
    if spec.kind in ("float", "optional_float"):
        return forms.FloatField(
            initial=spec.default, min_value=spec.min, max_value=spec.max, **common
        )
    if spec.kind == "str_list":
        return forms.MultipleChoiceField(
            choices=[(c, c) for c in spec.choices or ()],
            initial=list(spec.default),
            widget=forms.CheckboxSelectMultiple,
            **common,
        )
    if spec.kind in ("str", "optional_str") and spec.choices:
        empty = [("", "none")] if spec.kind == "optional_str" else []
        return forms.ChoiceField(
            choices=empty + [(c, c) for c in spec.choices], initial=spec.default or "", **common
        )
    raise TypeError(f"no form field for option {spec.name} ({spec.kind})")


class StartRunForm(forms.Form):
    """The new-run form. Every option field comes from the stage's engine ``Options`` (its
    default, bounds and help text), named ``<stage>_<option>``; :meth:`clean` validates
    the whole run with :meth:`RunOptions.from_dict`, as the API does."""

    target = forms.ModelChoiceField(queryset=Target.objects.none(), empty_label=None)
    stages = forms.MultipleChoiceField(
        choices=[(s.name, s.label) for s in STAGES.values()],
        initial=["analyze"],
        widget=forms.CheckboxSelectMultiple,
    )
    input_shapes = forms.CharField(
        required=False,
        label="Input shapes",
        help_text="Fix symbolic input dimensions, e.g. input=1x3x224x224 (one per line). "
        "Not given: 1 on the first axis (batch), 128 elsewhere.",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    accuracy_other_model = forms.ModelChoiceField(
        queryset=OnnxModel.objects.none(), required=False, label="the other model"
    )
    accuracy_inputs = forms.ModelChoiceField(
        queryset=InputData.objects.none(),
        required=False,
        empty_label="generated from the input specs (seed 0, normal)",
        label="inputs",
    )

    def __init__(self, *args, user=None, model=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._option_fields: dict[str, tuple[str, OptionSpec]] = {}
        for stage in STAGES.values():
            for spec in stage.options.spec():
                if spec.public:
                    name = f"{stage.name}_{spec.name}"
                    self.fields[name] = _field(spec)
                    self._option_fields[name] = (stage.name, spec)
        # Without the analysis: a choice list needs names, and a 50,000-node model's
        # analysis is 14 MB of JSON to decode, once per rendering of the list.
        self.fields["accuracy_other_model"].queryset = OnnxModel.objects.filter(owner=user).defer(
            "analysis"
        )
        self.fields["accuracy_inputs"].queryset = InputData.objects.filter(owner=user, model=model)
        self.fields["target"].queryset = latest_versions(visible_targets(user)).order_by(
            "owner_id", "name"
        )
        self.run_options: RunOptions | None = None

    def stage_groups(self) -> list[tuple[str, str, list]]:
        """(stage name, label, bound fields) for the template, in run order."""
        groups = []
        for stage in STAGES.values():
            fields = [self[n] for n, (s, _) in self._option_fields.items() if s == stage.name]
            if stage.name == "accuracy":
                fields += [self["accuracy_other_model"], self["accuracy_inputs"]]
            if fields:
                groups.append((stage.name, stage.label, fields))
        return groups

    def clean_input_shapes(self) -> dict[str, list[int]]:
        return parse_shapes(self.cleaned_data.get("input_shapes", ""))

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        options: dict = {"input_shapes": data.get("input_shapes") or {}}
        for name, (stage, spec) in self._option_fields.items():
            value = data.get(name)
            if value in (None, "") and spec.kind != "bool":
                continue  # left empty: the engine's default
            if spec.kind == "optional_str" and value == "":
                value = None
            options.setdefault(stage, {})[spec.name] = value
        accuracy = options.setdefault("accuracy", {})
        if data.get("accuracy_other_model"):
            accuracy["other_model"] = data["accuracy_other_model"].pk
        if data.get("accuracy_inputs"):
            accuracy["inputs"] = data["accuracy_inputs"].pk
        try:
            self.run_options = RunOptions.from_dict(data.get("stages") or [], options)
        except OptionsError as e:
            for path, message in e.errors.items():
                field = path.replace(".", "_", 1)
                self.add_error(field if field in self.fields else None, f"{path}: {message}")
        return data


class UploadInputsForm(forms.Form):
    file = forms.FileField(
        label="Inputs (.npz)",
        help_text="One array per model input, named like the input (numpy.savez).",
        widget=forms.ClearableFileInput(attrs={"accept": ".npz"}),
    )


EMAIL_HELP = "Optional: where a password-reset link is sent if you forget your password."


class SignUpForm(UserCreationForm):
    """Django's sign-up form with the account's mail address, which a password reset needs."""

    class Meta(UserCreationForm.Meta):
        fields = ("username", "email")
        help_texts = {"email": EMAIL_HELP}


class EmailForm(forms.ModelForm):
    """The account page's mail address."""

    class Meta:
        model = get_user_model()
        fields = ("email",)
        help_texts = {"email": EMAIL_HELP}
