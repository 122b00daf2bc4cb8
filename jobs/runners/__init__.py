"""Stage runners: (StageResult, progress) -> result JSON. Imported by the worker only."""

from __future__ import annotations

from collections.abc import Callable

from engine.errors import ProgressFn
from jobs.runners import accuracy, analyze, compile, memory, partition, profile
from workbench.models import StageResult

Runner = Callable[[StageResult, ProgressFn], dict]

RUNNERS: dict[str, Runner] = {
    "analyze": analyze.run,
    "profile": profile.run,
    "memory": memory.run,
    "partition": partition.run,
    "compile": compile.run,
    "accuracy": accuracy.run,
}
