"""The error contract the job layer and the web views rely on."""

from __future__ import annotations

import pytest

from engine.errors import (
    Cancelled,
    EngineError,
    InvalidModelError,
    ModelLimitError,
    ShapeError,
    UnsupportedModelError,
)


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (EngineError, "engine_error"),
        (InvalidModelError, "invalid_model"),
        (ModelLimitError, "model_too_large"),
        (UnsupportedModelError, "unsupported_model"),
        (ShapeError, "bad_shape"),
        (Cancelled, "cancelled"),
    ],
)
def test_codes_and_dict(cls, code):
    error = cls("it broke", hint="do this")
    assert isinstance(error, EngineError)
    assert error.to_dict() == {"code": code, "message": "it broke", "hint": "do this"}
    assert str(error) == "it broke"


def test_code_can_be_overridden_per_instance():
    assert EngineError("x", code="custom").code == "custom"
    assert EngineError("x").hint is None
    assert EngineError.code == "engine_error"
