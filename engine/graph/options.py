"""Options of the prepared model and of the analyze stage (light: no onnx import)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.options import StageOptions, option

DEFAULT_BATCH = 1
"""A symbolic first dimension (a batch) is bound to this when the user gives none."""
DEFAULT_DIM = 128
"""Any other symbolic dimension (sequence length, spatial size) is bound to this."""


@dataclass(frozen=True)
class PrepareOptions(StageOptions):
    """What the prepared model is built for: the input shapes (the rest has defaults)."""

    stage = ""

    input_shapes: dict[str, tuple[int, ...]] = option(
        {},
        'Shapes of the model\'s inputs, e.g. {"input": [1, 3, 224, 224]}. Symbolic '
        f"dimensions not given here are bound to {DEFAULT_BATCH} on the first axis (batch) "
        f"and {DEFAULT_DIM} elsewhere (sequence length, image size).",
        label="Input shapes",
    )


@dataclass(frozen=True)
class AnalyzeOptions(StageOptions):
    """The analyze stage reads the prepared model; it has nothing to choose."""

    stage = "analyze"
