"""Typed failures of the engine and the progress-callback contract.

Every error the engine raises on purpose is an :class:`EngineError` with a stable
``code`` (stored by the job layer, shown by the web views) and an optional ``hint``
telling the user what to do about it.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[float, str], None]
"""Progress callback: ``progress(fraction, message)`` with ``0 <= fraction <= 1``.

The engine calls it at meaningful steps and at least every ~2000 nodes inside loops. A
caller cancels the work by raising :class:`Cancelled` from it; engine code never catches
that exception.
"""


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code: str = "engine_error"

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint

    def to_dict(self) -> dict[str, str | None]:
        """Return ``{"code", "message", "hint"}`` for storage and display."""
        return {"code": self.code, "message": self.message, "hint": self.hint}


class InvalidModelError(EngineError):
    """Not a valid ONNX model: not ONNX, truncated, empty, checker failure, cycle, etc."""

    code = "invalid_model"


class ModelLimitError(EngineError):
    """The model exceeds a configured limit (file size, node count, tensor size)."""

    code = "model_too_large"


class UnsupportedModelError(EngineError):
    """A valid model the engine cannot handle (unknown opset, domain or operator)."""

    code = "unsupported_model"


class ShapeError(EngineError):
    """User-given input shapes that do not fit the model."""

    code = "bad_shape"


class Cancelled(EngineError):
    """Raised by a progress callback to stop the work; the engine lets it propagate."""

    code = "cancelled"


def error_line(error: BaseException, limit: int = 400) -> str:
    """One line saying what ``error`` is about: its message's first line, or the last
    one when the message starts with a traceback (TVM's errors carry one); the type's
    name for an empty message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:limit]
