"""Per-node latency measured with onnxruntime's profiler on this machine's CPU.

Method (DNNTune, thesis ch.3, adapted): warm up, then run the whole model repeatedly until
a time window is filled and at least ``min_runs`` runs were made (DNNTune repeats one layer
until the power sampler's window is filled; onnxruntime cannot run one node alone, so every
run times every node once). Per op: median, p90 and spread (IQR / median) over the runs.

The profiler costs time between kernels (about 10% on a model of many small kernels, such
as ShuffleNet), so the whole-model latency is not taken from profiled runs: once the
per-op window is over, the profiler is switched off and the same session runs for half a
window more, interleaved with an independent plain session (``reference``) that checks
the figure. The profiled runs' own durations are kept as ``profiled_ms``.

onnxruntime times kernels, not nodes; :mod:`engine.profiling.attribution` maps them back
to the model's nodes. That works up to optimization level ``extended`` (the default): at
``all`` the layout pass renames most kernels and their nodes stay unmapped.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from engine.errors import ProgressFn
from engine.graph import AnalysisConfig, analyze_model, load_model
from engine.graph.loader import ModelSource
from engine.graph.topology import sorted_model, unique_node_names
from engine.profiling.attribution import KernelProfile, OpProfile, attribute_kernels
from engine.profiling.latency import window_filled
from engine.profiling.session import (
    check_optimization,
    environment,
    load_average,
    make_inputs,
    open_session,
    run_once,
    summarize,
)
from engine.profiling.trace import central_runs, parse_trace

METHOD = "onnxruntime profiler, per-kernel events mapped back to the model's nodes"


@dataclass(frozen=True)
class NodeProfileConfig:
    """Options of :func:`profile_nodes`. ``reference`` also times a plain session (no
    profiler) in the same loop, interleaved, so both see the same machine load."""

    threads: int = 0  # 0: onnxruntime's default
    graph_optimization: str = "extended"
    warmup_runs: int = 3
    min_runs: int = 10
    max_runs: int = 500
    window_s: float = 3.0
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reference: bool = False

    def __post_init__(self) -> None:
        check_optimization(self.graph_optimization)


@dataclass
class NodeProfile:
    """Result of :func:`profile_nodes`: measured on this machine, every number a median
    over ``runs`` runs unless named otherwise. ``typical_ms`` is the mean of the runs
    between the quartiles; the ops' ``typical_us`` add up to it (their medians need not:
    a run slowed down anywhere is slow as a whole, while each op's median ignores it)."""

    target: str
    unit: str
    method: str
    runs: int
    warmup_runs: int
    window_s: float
    threads: int
    graph_optimization: str
    latency_ms: dict[str, float]
    latency_runs: int
    profiled_ms: dict[str, float]
    typical_ms: float
    kernel_sum_ms: float
    ops: list[OpProfile]
    kernels: list[KernelProfile]
    reference: dict | None
    inputs: list[dict]
    environment: dict
    warnings: list[str]
    measured: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def profile_nodes(
    source: ModelSource,
    config: NodeProfileConfig = NodeProfileConfig(),
    progress: ProgressFn | None = None,
) -> NodeProfile:
    """Measure per-node and whole-model latency of a model on this machine's CPU.

    ``source`` is a path, the model's bytes or an ``onnx.ModelProto`` (not modified).
    Raises :class:`~engine.errors.InvalidModelError` and the other analysis errors; a
    :class:`~engine.errors.Cancelled` raised by ``progress`` propagates.
    """
    report = progress or _ignore
    load_before = load_average()
    report(0.0, "analyzing the model")
    model = named_model(source)
    analysis = analyze_model(model, AnalysisConfig(input_shapes=dict(config.input_shapes)))
    report(0.05, "creating the onnxruntime sessions")
    with tempfile.TemporaryDirectory(prefix="workbench-profile-") as tmp:
        session = open_session(
            model,
            threads=config.threads,
            optimization=config.graph_optimization,
            profile_prefix=os.path.join(tmp, "ort"),
        )
        plain = None
        if config.reference:
            plain = open_session(
                model, threads=config.threads, optimization=config.graph_optimization
            )
        feeds, specs = make_inputs(session, config.input_shapes, config.seed)
        try:
            wall_ms, plain_ms = _run(session, plain, feeds, config, report)
        finally:
            trace_path = session.end_profiling()
        events = json.loads(Path(trace_path).read_text())
        report(0.8, "timing the whole model with the profiler off")
        latency_ms, plain_after_ms = _time_unprofiled(session, plain, feeds, config)
    report(0.97, "reading the profiler trace")
    trace = parse_trace(events, skip_runs=config.warmup_runs)
    central = central_runs(trace.runs_us)
    kernels, ops = attribute_kernels(trace.kernels, analysis, central)
    warnings = list(analysis.warnings)
    unmapped = [k.name for k in kernels if not k.nodes]
    if unmapped:
        warnings.append(
            f"{len(unmapped)} kernels could not be mapped to model nodes "
            f"({', '.join(unmapped[:5])}{', ...' if len(unmapped) > 5 else ''})"
        )
    profiled = summarize([us / 1e3 for us in trace.runs_us])
    whole = summarize(latency_ms)
    report(1.0, f"profiled {len(trace.runs_us)} runs, median {whole['median']:.3f} ms")
    return NodeProfile(
        target="host",
        unit="cpu",
        method=METHOD,
        runs=len(trace.runs_us),
        warmup_runs=config.warmup_runs,
        window_s=config.window_s,
        threads=config.threads,
        graph_optimization=config.graph_optimization,
        latency_ms=whole,
        latency_runs=len(latency_ms),
        profiled_ms=profiled,
        typical_ms=sum(trace.runs_us[i] for i in central) / max(len(central), 1) / 1e3,
        kernel_sum_ms=sum(k.latency_us for k in kernels) / 1e3,
        ops=ops,
        kernels=kernels,
        reference=_reference(whole, wall_ms, plain_ms, plain_after_ms) if plain_ms else None,
        inputs=specs,
        environment=environment(config.threads, config.graph_optimization, load_before),
        warnings=warnings,
    )


def named_model(source: ModelSource) -> onnx.ModelProto:
    """A sorted copy of the model whose nodes carry the names the graph IR gives them, so
    that onnxruntime's kernel names match the analysis."""
    model = load_model(source)
    model, reordered = sorted_model(model)
    if not reordered:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    for node, name in zip(model.graph.node, unique_node_names(model.graph.node), strict=True):
        node.name = name
    return model


def _run(session, plain, feeds, config: NodeProfileConfig, report: ProgressFn):
    for i in range(config.warmup_runs):
        report(0.06, f"warm-up {i + 1}/{config.warmup_runs}")
        run_once(session, feeds)
        if plain is not None:
            run_once(plain, feeds)
    wall_ms: list[float] = []
    plain_ms: list[float] = []
    started = time.perf_counter()
    while len(wall_ms) < config.max_runs:
        t0 = time.perf_counter()
        run_once(session, feeds)
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        if plain is not None:
            t0 = time.perf_counter()
            run_once(plain, feeds)
            plain_ms.append((time.perf_counter() - t0) * 1e3)
        elapsed = time.perf_counter() - started
        if window_filled(len(wall_ms), elapsed, config.window_s, config.min_runs):
            break
        report(
            0.07 + 0.7 * min(elapsed / config.window_s, 0.99),
            f"profiling: {len(wall_ms)} runs, median {float(np.median(wall_ms)):.3f} ms",
        )
    return wall_ms, plain_ms


def _time_unprofiled(session, plain, feeds, config: NodeProfileConfig):
    """The profiled session's runs after ``end_profiling`` (and the plain session's,
    interleaved): half a window, at least ``min_runs`` each."""
    window = config.window_s / 2
    session_ms: list[float] = []
    plain_ms: list[float] = []
    started = time.perf_counter()
    while len(session_ms) < config.max_runs:
        for runner, times in ((session, session_ms), (plain, plain_ms)):
            if runner is not None:
                t0 = time.perf_counter()
                run_once(runner, feeds)
                times.append((time.perf_counter() - t0) * 1e3)
        if window_filled(len(session_ms), time.perf_counter() - started, window, config.min_runs):
            break
    return session_ms, plain_ms


def _reference(whole: dict, wall_ms: list[float], plain_ms: list[float], after_ms) -> dict:
    """The independent plain session: the whole-model figure against its timing in the
    same loop, and the profiler's overhead (profiled runs against the plain runs next to
    them)."""
    plain = summarize(after_ms)
    wall = summarize(wall_ms)
    return {
        "method": "an independent plain onnxruntime session (no profiler), run by turns "
        "with the profiled session in the same loop",
        "runs": len(after_ms),
        "latency_ms": plain,
        "profiled_wall_ms": wall,
        "agreement_pct": 100.0 * (whole["median"] / plain["median"] - 1.0),
        "overhead_ratio": wall["median"] / summarize(plain_ms)["median"],
    }


def _ignore(fraction: float, message: str) -> None:
    pass
