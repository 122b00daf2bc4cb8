"""Whole-model latency measured with onnxruntime on this machine.

The repetition rule follows DNNTune (thesis ch.3): warm up, then repeat until a time
window is filled (and at least `min_runs` times), because a fixed repetition count is
either too short for small models or too long for large ones. Reported: median, p90 and
the spread, with the machine and versions the numbers were measured on.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

from engine.accuracy.inputs import index_bounds
from engine.errors import ProgressFn
from engine.graph.loader import ModelSource, load_model
from engine.profiling.session import (
    check_optimization,
    environment,
    load_average,
    make_inputs,
    open_session,
    run_once,
    summarize,
)


@dataclass(frozen=True)
class LatencyConfig:
    threads: int = 0  # 0: onnxruntime's default (all usable cores)
    warmup_runs: int = 3
    min_runs: int = 10
    max_runs: int = 100_000
    window_s: float = 5.0
    seed: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    graph_optimization: str = "all"  # disabled | basic | extended | all

    def __post_init__(self) -> None:
        check_optimization(self.graph_optimization)


@dataclass
class LatencyProfile:
    measured: bool
    runs: int
    warmup_runs: int
    window_s: float
    threads: int
    latency_ms: dict[str, float]
    samples_ms: list[float]
    inputs: list[dict]
    environment: dict

    def to_dict(self) -> dict:
        return asdict(self)


def window_filled(runs: int, elapsed_s: float, window_s: float, min_runs: int) -> bool:
    """DNNTune's repetition rule: stop once the window is filled by at least ``min_runs``."""
    return elapsed_s >= window_s and runs >= min_runs


@dataclass(frozen=True)
class Stretch:
    """The runs a profile's statistics come from: ``blocks`` consecutive blocks of
    ``block_runs`` runs each, starting at run ``start``. ``stable``: their median run times
    agree within the tolerance (the machine's load did not change meanwhile)."""

    start: int
    stop: int
    block_runs: int
    block_medians_ms: list[float]
    stable: bool

    def to_dict(self) -> dict:
        return asdict(self)


def block_medians(samples_ms: list[float], block_runs: int) -> list[float]:
    """Median run time of each complete block of ``block_runs`` consecutive runs."""
    full = len(samples_ms) // block_runs
    return [
        statistics.median(samples_ms[i * block_runs : (i + 1) * block_runs]) for i in range(full)
    ]


# Block medians this close (ms) agree whatever the tolerance: on a model that runs in
# 20 us, one microsecond of call overhead is 5%, and says nothing about the machine's load.
AGREE_FLOOR_MS = 0.002


def agree(medians: list[float], tolerance_pct: float) -> bool:
    if not medians:
        return False
    low, high = min(medians), max(medians)
    return high - low <= max(low * tolerance_pct / 100, AGREE_FLOOR_MS)


def quietest_stretch(
    samples_ms: list[float], block_runs: int, blocks: int, tolerance_pct: float
) -> Stretch:
    """The stretch of ``blocks`` consecutive blocks to take a profile's statistics from.

    The last stretch when its blocks agree (the window was extended until they did, see
    :func:`engine.profiling.nodes.profile_nodes`); else the one whose slowest block is the
    fastest: the stretch another process disturbed least. Slowdowns from other load only
    add time, so the quietest stretch is the one a repeated profile finds again."""
    medians = block_medians(samples_ms, block_runs)
    if len(medians) <= blocks:
        return Stretch(
            0, len(medians) * block_runs or len(samples_ms), block_runs, medians,
            agree(medians, tolerance_pct) or not medians,
        )  # fmt: skip
    last = len(medians) - blocks
    if agree(medians[last:], tolerance_pct):
        first = last
    else:
        first = min(range(last + 1), key=lambda i: max(medians[i : i + blocks]))
    window = medians[first : first + blocks]
    return Stretch(
        first * block_runs,
        (first + blocks) * block_runs,
        block_runs,
        medians,
        agree(window, tolerance_pct),
    )


def measure_latency(
    source: ModelSource, config: LatencyConfig = LatencyConfig(), progress: ProgressFn | None = None
) -> LatencyProfile:
    """Measure one inference's wall time on this machine's CPU with onnxruntime.

    ``source`` is a path, the model's bytes or an ``onnx.ModelProto``. Raises
    :class:`~engine.errors.InvalidModelError` when onnxruntime cannot load or run the
    model; a :class:`~engine.errors.Cancelled` raised by ``progress`` propagates.
    """
    report = progress or (lambda fraction, message: None)
    load_before = load_average()
    report(0.0, "creating the onnxruntime session")
    session = open_session(source, threads=config.threads, optimization=config.graph_optimization)
    bounds = index_bounds(load_model(source))
    feeds, specs = make_inputs(session, config.input_shapes, config.seed, bounds)
    for i in range(config.warmup_runs):
        report(0.02, f"warm-up {i + 1}/{config.warmup_runs}")
        run_once(session, feeds)
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < config.max_runs:
        t0 = time.perf_counter()
        run_once(session, feeds)
        samples.append((time.perf_counter() - t0) * 1e3)
        elapsed = time.perf_counter() - started
        if window_filled(len(samples), elapsed, config.window_s, config.min_runs):
            break
        report(
            0.05 + 0.95 * min(elapsed / config.window_s, 0.99),
            f"timing: {len(samples)} runs, median {statistics.median(samples):.3f} ms",
        )
    return LatencyProfile(
        measured=True,
        runs=len(samples),
        warmup_runs=config.warmup_runs,
        window_s=config.window_s,
        threads=session.get_session_options().intra_op_num_threads or 0,
        latency_ms=summarize(samples),
        samples_ms=[round(s, 4) for s in samples[:2000]],
        inputs=specs,
        environment=environment(config.threads, config.graph_optimization, load_before),
    )
