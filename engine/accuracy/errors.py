"""Typed failures of the accuracy stage (subclasses of :class:`engine.errors.EngineError`)."""

from __future__ import annotations

from engine.errors import EngineError


class InputDataError(EngineError):
    """Uploaded inputs that do not fit the model, or that cannot be read safely."""

    code = "bad_inputs"


class CandidateError(EngineError):
    """A candidate that cannot be built or run (unknown name, runtime refused the model).

    ``stage`` says how far it got: ``"import"`` (the runtime or compiler refused the
    model), ``"run"`` (it loaded but failed while computing) or ``"setup"`` (no such
    candidate).
    """

    code = "candidate_failed"

    def __init__(self, message: str, *, stage: str = "setup", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.stage = stage
