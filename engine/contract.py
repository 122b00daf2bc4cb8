"""What a stage's entry point takes besides the prepared model and its options, and how it
says that it does not apply (:mod:`engine.stages` lists the stages)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError


class NotApplicable(EngineError):
    """The stage does not apply to this target or these options; ``message`` says why.
    Not a failure: the stages after it run."""

    code = "not_applicable"


@dataclass(frozen=True)
class StageInputs:
    """What a stage gets besides the prepared model: results of earlier stages of the same
    run that it reads (``uses`` / ``needs``), by stage name, as their ``to_dict()`` JSON;
    files the caller resolved for it (``source``: the model as uploaded, ``inputs``: an
    .npz, ``other_model``: another .onnx); ``workdir``, a directory where the stage
    writes its artifacts (none are kept without it); ``tuning_store``, where compiles
    share tuning records (a directory or a ``RecordStore``; none: no sharing); and
    ``tuning_builder``, a MetaSchedule builder that builds tuning candidates (e.g. spread
    over other workers; none: this machine's processes); ``build_cache``, a directory
    where compiles keep built segments by what they were built from, or a
    ``BuildCache`` (none: every segment is built)."""

    results: Mapping[str, dict] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    tuning_store: Any = None
    tuning_builder: Any = None
    build_cache: Any = None


NO_INPUTS = StageInputs()


@dataclass
class StageReport:
    """A stage's result: the JSON the web stores and the CLI prints (``details``) and the
    files it wrote into the workdir (kind -> path). Stages whose result has a dataclass of
    its own (the analysis, the accuracy report) return that instead."""

    details: dict = field(repr=False)
    artifacts: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return self.details


"""A stage run on its own: no earlier results, no files, no artifacts kept."""
