"""Sweeps of whole-model latency over thread count and batch size (DNNTune, thesis ch.3:
no thread count wins for every model, small GEMV-bound models do not scale).

Each point is one :func:`engine.profiling.latency.measure_latency` run on this machine. A
point that fails (the model does not take that batch size, say) is recorded with its
reason and the sweep goes on, as DNNTune's sweeps record OOM and go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import onnx

from engine.errors import Cancelled, EngineError, ProgressFn
from engine.graph.loader import ModelSource, load_model, model_inputs
from engine.profiling.latency import LatencyConfig, measure_latency
from engine.profiling.session import environment, load_average
from engine.targets.host import describe_host

SWEEP_CONFIG = LatencyConfig(window_s=2.0)
"""Default per-point measurement: a 2 s window (a sweep has several points)."""


@dataclass
class SweepPoint:
    """One setting: ``status`` ok or failed; latency and throughput measured when ok."""

    value: int
    status: str
    latency_ms: dict[str, float] | None
    throughput_per_s: float | None
    runs: int
    error: str | None = None


@dataclass
class Sweep:
    """Latency over one knob (``threads`` or ``batch``), measured on this machine."""

    kind: str
    points: list[SweepPoint]
    window_s: float
    environment: dict
    measured: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def sweep_threads(
    source: ModelSource,
    threads: Sequence[int] | None = None,
    config: LatencyConfig = SWEEP_CONFIG,
    progress: ProgressFn | None = None,
) -> Sweep:
    """Whole-model latency per intra-op thread count (default: 1, 2, 4, ... up to twice the
    usable cores, so that oversubscription shows)."""
    if threads is None:
        host = describe_host()
        cores = host["usable_cores"] or host["logical_cores"]
        threads = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max(2 * cores, 2)]
    model = load_model(source)
    return _sweep(
        "threads",
        list(threads),
        lambda t: (model, replace(config, threads=t), 1),
        config,
        progress,
    )


def sweep_batch(
    source: ModelSource,
    batches: Sequence[int] = (1, 2, 4, 8),
    config: LatencyConfig = SWEEP_CONFIG,
    progress: ProgressFn | None = None,
) -> Sweep:
    """Whole-model latency and throughput per batch size (the first dimension of every
    input; a model built for one batch size fails at the others, and says why)."""
    model = load_model(source)
    return _sweep(
        "batch",
        list(batches),
        lambda b: (with_batch(model, b), config, b),
        config,
        progress,
    )


def with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy whose inputs and outputs have first dimension ``batch``; inner shapes are
    left to onnxruntime's own inference."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    fed = {v.name for v in model_inputs(copy)}
    for value in (*(v for v in copy.graph.input if v.name in fed), *copy.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_value = batch
    del copy.graph.value_info[:]
    return copy


def _sweep(
    kind: str,
    values: list[int],
    setup: Callable[[int], tuple[onnx.ModelProto, LatencyConfig, int]],
    config: LatencyConfig,
    progress: ProgressFn | None,
) -> Sweep:
    """Measure each value's ``setup(value) -> (model, config, batch)``."""
    report = progress or (lambda fraction, message: None)
    load_before = load_average()
    points = []
    for i, value in enumerate(values):
        start, end = i / len(values), (i + 1) / len(values)
        report(start, f"{kind} = {value}")
        model, point_config, batch = setup(value)

        def scaled(fraction: float, message: str, start=start, end=end, value=value) -> None:
            report(start + (end - start) * fraction, f"{kind} = {value}: {message}")

        try:
            result = measure_latency(model, point_config, scaled)
        except Cancelled:
            raise
        except EngineError as e:
            points.append(SweepPoint(value, "failed", None, None, 0, e.message))
            continue
        median_s = result.latency_ms["median"] / 1e3
        points.append(SweepPoint(value, "ok", result.latency_ms, batch / median_s, result.runs))
    report(1.0, f"{kind} sweep done")
    return Sweep(
        kind=kind,
        points=points,
        window_s=config.window_s,
        environment=environment(config.threads, config.graph_optimization, load_before),
    )
