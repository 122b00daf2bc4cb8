"""The stages, their options and what each needs: shared by the web, the workers and the CLI.

Light on purpose (no onnx, onnxruntime or TVM import): the web process validates a run's
options with :meth:`RunOptions.from_dict` before anything is enqueued. The code that runs
a stage is named by ``entry`` (``module:function``) and imported only where it runs.

Every entry point has one signature::

    report = run(prepared, target, options, progress)

``prepared`` is the :class:`engine.graph.prepare.PreparedModel`, ``target`` a validated
:class:`engine.targets.TargetProfile`, ``options`` the stage's :class:`StageOptions` and
the report a dataclass with ``to_dict()``. A stage that does not apply to the target
raises :class:`~engine.contract.NotApplicable`; one that needs another stage's result
takes it through ``inputs`` (a :class:`~engine.contract.StageInputs`), which the caller
fills from the run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.accuracy.options import AccuracyOptions
from engine.contract import NotApplicable, StageInputs
from engine.fusion.options import CompileOptions
from engine.graph.options import AnalyzeOptions, PrepareOptions
from engine.memory.options import MemoryOptions
from engine.options import OptionsError, StageOptions
from engine.partition.options import PartitionStageOptions
from engine.profiling.options import ProfileOptions


@dataclass(frozen=True)
class StageSpec:
    """A stage: its name and words, its options, its entry point and its time limit.
    ``needs(options)`` names the stages whose results it reads (with these options)."""

    name: str
    label: str
    description: str
    options: type[StageOptions]
    entry: str
    time_limit_s: int
    needs: Callable[[Any], tuple[str, ...]] = field(default=lambda options: ())
    uses: tuple[str, ...] = ()
    """Stages whose results it reads when they are in the run, without needing them."""

    def load(self) -> Callable:
        """The entry point (imports the stage's engine package)."""
        module, _, name = self.entry.partition(":")
        return getattr(importlib.import_module(module), name)


def _accuracy_needs(options: AccuracyOptions) -> tuple[str, ...]:
    return ("partition",) if options.candidate == "partitioned" else ()


STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        StageSpec(
            "analyze",
            "Analyze",
            "Validate the model, prepare it (input shapes bound, shape arithmetic folded) "
            "and count operators, parameters, MACs/FLOPs and bytes per node.",
            AnalyzeOptions,
            "engine.graph.stage:run",
            time_limit_s=15 * 60,
        ),
        StageSpec(
            "profile",
            "Profile",
            "Measure per-op and whole-model latency with onnxruntime on the worker's CPU "
            "(measured targets), or predict it per compute unit (modeled targets).",
            ProfileOptions,
            "engine.profiling.stage:run",
            time_limit_s=30 * 60,
        ),
        StageSpec(
            "partition",
            "Partition",
            "Place ops on the target's compute units and order them: HOPE exact and "
            "heuristic, HEFT, chain DP, key-op blocks (and the mobile-cloud split), judged by "
            "one simulator; the best plan's sub-models are run against the whole model.",
            PartitionStageOptions,
            "engine.partition.stage:run",
            time_limit_s=30 * 60,
        ),
        StageSpec(
            "memory",
            "Memory plan",
            "Plan the intermediate tensors' memory: lifetimes, six planners against the lower "
            "bound (peak live bytes), every plan validated, a memory-aware execution order.",
            MemoryOptions,
            "engine.memory.stage:run",
            time_limit_s=15 * 60,
            uses=("partition",),
        ),
        StageSpec(
            "compile",
            "Fuse + compile",
            "Import into Apache TVM (unsupported nodes fall back to onnxruntime), plan "
            "fusion with every cut explained, build for the worker's CPU, time each kernel, "
            "optionally tune with MetaSchedule; the artifact is downloadable.",
            CompileOptions,
            "engine.fusion.stage:run",
            time_limit_s=90 * 60,
        ),
        StageSpec(
            "accuracy",
            "Accuracy",
            "Run a candidate (fp16 conversion, prepared model, partitioned execution, TVM "
            "build or another ONNX file) and onnxruntime fp32 on the same inputs; metrics "
            "per output, the first layer whose error crosses the thresholds, pass or fail.",
            AccuracyOptions,
            "engine.accuracy.stage:run",
            time_limit_s=30 * 60,
            needs=_accuracy_needs,
        ),
    )
}
STAGE_ORDER: list[str] = list(STAGES)


@dataclass(frozen=True)
class RunOptions:
    """A run's stages and options, validated: the prepared model's input shapes and one
    options object per stage (defaults filled in)."""

    stages: tuple[str, ...]
    prepare: PrepareOptions
    options: Mapping[str, StageOptions]

    @classmethod
    def from_dict(cls, stages: Iterable[str], data: Mapping[str, Any] | None = None) -> RunOptions:
        """``data`` is ``{"input_shapes": {...}, "<stage>": {...}, ...}``. Raises
        :class:`OptionsError` naming every bad field; unknown stages are errors too."""
        data = {} if data is None else data
        errors: dict[str, str] = {}
        if not isinstance(data, Mapping):
            raise OptionsError({"options": "expected an object: {stage: {option: value}}"})
        names = ordered_stages(stages, errors)
        prepare = PrepareOptions()
        try:
            prepare = PrepareOptions.from_dict(
                {"input_shapes": data["input_shapes"]} if "input_shapes" in data else {}
            )
        except OptionsError as e:
            errors.update(e.errors)
        options: dict[str, StageOptions] = {}
        for key in data:
            if key != "input_shapes" and key not in STAGES:
                errors[str(key)[:80]] = (
                    f"unknown stage (stages: {', '.join(STAGE_ORDER)}; or input_shapes)"
                )
        for name in STAGE_ORDER:
            try:
                options[name] = STAGES[name].options.from_dict(data.get(name))
            except OptionsError as e:
                errors.update(e.errors)
        if errors:
            raise OptionsError(errors)
        for name in names:
            for needed in STAGES[name].needs(options[name]):
                if needed not in names:
                    errors["stages"] = (
                        f"{name} needs the {needed} stage with these options "
                        f"({STAGES[needed].label}): tick it too"
                    )
        if errors:
            raise OptionsError(errors)
        return cls(tuple(names), prepare, {n: options[n] for n in names})

    def to_dict(self) -> dict:
        """``{"stages": [...], "input_shapes": {...}, "options": {stage: {...}}}``."""
        return {
            "stages": list(self.stages),
            "input_shapes": self.prepare.to_dict()["input_shapes"],
            "options": {name: o.to_dict() for name, o in self.options.items()},
        }


def ordered_stages(requested: Iterable[str], errors: dict[str, str] | None = None) -> list[str]:
    """The requested stages in run order, analyze always first (it states what the
    prepared model is). Unknown names are reported in ``errors`` (or raised)."""
    if isinstance(requested, str) or not isinstance(requested, Iterable):
        problems = {"stages": "expected a list of stage names"}
        wanted: set[str] = set()
    else:
        wanted = {s for s in requested if isinstance(s, str)}
        problems = {}
        unknown = sorted(
            str(s)[:40] for s in requested if not isinstance(s, str) or s not in STAGES
        )
        if unknown:
            problems["stages"] = (
                f"unknown stage(s): {', '.join(unknown)}; available: {', '.join(STAGE_ORDER)}"
            )
        elif not wanted:
            problems["stages"] = "choose at least one stage"
    if problems:
        if errors is None:
            raise OptionsError(problems)
        errors.update(problems)
    wanted.add("analyze")
    return [name for name in STAGE_ORDER if name in wanted]


__all__ = ["STAGES", "STAGE_ORDER", "NotApplicable", "RunOptions", "StageInputs", "StageSpec"]
