"""The analyze stage's entry point: cost every node of the prepared model."""

from __future__ import annotations

from engine.contract import NO_INPUTS, StageInputs
from engine.errors import ProgressFn
from engine.graph.analyze import ModelAnalysis, analyze_prepared
from engine.graph.options import AnalyzeOptions
from engine.graph.prepared import PreparedModel


def run(
    prepared: PreparedModel,
    target: object,
    options: AnalyzeOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> ModelAnalysis:
    """Analyze ``prepared``; the target plays no part (every target sees the same model)."""
    return analyze_prepared(prepared, progress)
