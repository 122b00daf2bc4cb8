"""Per-node latency measured with onnxruntime's profiler on this machine's CPU.

Method (DNNTune, thesis ch.3, adapted): warm up, then run the whole model repeatedly until
a time window is filled and every session made at least ``min_runs`` runs (DNNTune repeats
one layer until the power sampler's window is filled; onnxruntime cannot run one node alone,
so every run times every node once). Per op: median, p90 and spread (IQR / median) over the
runs. The window alone is not enough on a large model: three seconds of VGG-19 on a slow
host are a dozen runs, four per session, and the median of four runs of an op whose runs
spread by 20% moves by 10% from one profile to the next.

Each session places the weights and buffers in memory its own way, and an op's time can
depend on that placement by 10% (cache sets, pages): two profiles, each with one session,
disagree by that much on single ops while their whole-model times agree. So the runs go by
turns over ``sessions`` sessions and each op's median pools them: a repeated profile then
samples the placements again instead of inheriting one. A session makes several runs in a
row before the next takes its turn (:data:`TURN_MS`), so that its caches are as warm as in
a user's tight loop.

On a shared machine another process can slow a stretch of runs down, and per-op medians
taken over such a stretch do not come back in a second profile. So the window is cut into
``blocks`` blocks of runs, and while the blocks' median run times disagree by more than
``stable_pct`` the window grows, block by block, up to ``max_extend`` times its length.
The statistics come from the last ``blocks`` blocks once they agree, or else from the
stretch of blocks the other load disturbed least; the profile says which runs it used
(``stability``) and warns when no stretch was steady.

Other processes' memory traffic is a second kind of disturbance the whole run hardly
shows: it slows the memory-bound kernels by up to half while the compute-bound ones, most
of the time, do not move. :mod:`engine.profiling.contention` compares the memory-bound
kernels' time block by block and the profile warns when it moved (``stability``
``memory_bound``).

The profiler costs time between kernels (about 10% on a model of many small kernels, such
as ShuffleNet), so the whole-model latency is not taken from profiled runs: once the
per-op window is over, the profiler is switched off and the same session runs for half a
window more, interleaved with an independent plain session (``reference``) that checks
the figure. The profiled runs' own durations are kept as ``profiled_ms``.

Every session has its own intra-op thread pool, and by default its threads spin for a while
after each run to catch the next one early. With several sessions run by turns, the idle
sessions' threads then take the cores from the one being timed: at 2 threads, three
profiled sessions and a plain one measured ViT at 3.6x and MobileNetV2 at 4.7x a plain
session's latency. So where more than one session is alive, their threads spin only while
their own session runs (:data:`~engine.profiling.session.SPIN_DURING_RUNS`): between
kernels the timed session spins as a user's session does, and when its run returns its
threads block. The environment records it (``threading``).

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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from engine.accuracy.inputs import index_bounds
from engine.errors import ProgressFn
from engine.graph import AnalysisConfig, analyze_model, load_model
from engine.graph.analyze import ModelAnalysis
from engine.graph.costs import OpCost
from engine.graph.loader import ModelSource
from engine.graph.topology import name_uniquely, sorted_model
from engine.profiling.attribution import KernelProfile, OpProfile, attribute_kernels
from engine.profiling.contention import memory_contention
from engine.profiling.latency import agree, block_medians, quietest_stretch, window_filled
from engine.profiling.rapl import Counters, measured_energy, open_counters
from engine.profiling.session import (
    HUGE_PAGES_TUNABLE,
    SPIN_ALWAYS,
    SPIN_DURING_RUNS,
    check_optimization,
    environment,
    heap_pages,
    load_average,
    make_inputs,
    open_session,
    run_once,
    summarize,
)
from engine.profiling.trace import central_runs, interleave, parse_trace

METHOD = (
    "onnxruntime profiler, per-kernel events mapped back to the model's nodes, runs by turns "
    "over several sessions"
)
LARGE_MODEL_BYTES = 1 << 30  # above this, one profiled session (each holds the weights)


@dataclass(frozen=True)
class NodeProfileConfig:
    """Options of :func:`profile_nodes`. ``min_runs`` counts per profiled session.
    ``reference`` also times a plain session (no profiler) in the same loop, once per turn
    over the profiled sessions, so both see the same machine load."""

    threads: int = 0  # 0: onnxruntime's default
    graph_optimization: str = "extended"
    warmup_runs: int = 3
    min_runs: int = 20  # per profiled session
    max_runs: int = 500
    window_s: float = 3.0
    sessions: int = 3
    blocks: int = 3
    stable_pct: float = 3.0
    max_extend: float = 3.0
    seed: int = 0
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    reference: bool = False

    def __post_init__(self) -> None:
        check_optimization(self.graph_optimization)
        if self.sessions < 1 or self.blocks < 1 or self.max_extend < 1 or self.stable_pct <= 0:
            raise ValueError(
                "sessions, blocks and max_extend must be at least 1, stable_pct positive"
            )


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
    stability: dict
    reference: dict | None
    inputs: list[dict]
    environment: dict
    warnings: list[str]
    measured: bool = True
    energy: dict | None = None
    """Package energy per run around the whole-model timing (:mod:`engine.profiling.rapl`):
    measured, or ``measured`` false and the reason it is unavailable."""

    def to_dict(self) -> dict:
        return asdict(self)


def profile_nodes(
    source: ModelSource,
    config: NodeProfileConfig = NodeProfileConfig(),
    progress: ProgressFn | None = None,
    costs: Mapping[str, OpCost] | None = None,
) -> NodeProfile:
    """Measure per-node and whole-model latency of a model on this machine's CPU.

    ``source`` is a path, the model's bytes or an ``onnx.ModelProto`` (not modified).
    ``costs`` (node name -> cost) stands in for the work of the nodes the model's own
    analysis cannot cost: the user's model as uploaded keeps its shape arithmetic, and the
    prepared model, which folded it, knows every node's work (the profile stage passes
    it). Raises :class:`~engine.errors.InvalidModelError` and the other analysis errors; a
    :class:`~engine.errors.Cancelled` raised by ``progress`` propagates.
    """
    report = progress or _ignore
    load_before = load_average()
    report(0.0, "analyzing the model")
    model = named_model(source)
    analysis = analyze_model(model, AnalysisConfig(input_shapes=dict(config.input_shapes)))
    if costs is not None:
        _fill_costs(analysis, costs)
    count = config.sessions if model.ByteSize() <= LARGE_MODEL_BYTES else 1
    alive = count + config.reference
    # Idle sessions' spinning threads would take the cores from the one being timed.
    spinning = SPIN_DURING_RUNS if alive > 1 else SPIN_ALWAYS
    report(0.05, f"creating the onnxruntime sessions ({count} profiled)")
    with tempfile.TemporaryDirectory(prefix="workbench-profile-") as tmp:
        optimized = os.path.join(tmp, "optimized.onnx")
        sessions = [
            open_session(
                model,
                threads=config.threads,
                optimization=config.graph_optimization,
                profile_prefix=os.path.join(tmp, f"ort{i}"),
                spinning=spinning,
                optimized_path=optimized if i == 0 and count > 1 else None,
            )
            for i in range(count)
        ]
        fused = _fused_nodes(optimized, {n.name for n in analysis.graph.nodes})
        plain = None
        if config.reference:
            plain = open_session(
                model,
                threads=config.threads,
                optimization=config.graph_optimization,
                spinning=spinning,
            )
        feeds, specs = make_inputs(
            sessions[0], config.input_shapes, config.seed, index_bounds(model)
        )
        try:
            wall_ms, plain_ms, block_runs, order, turn = _run(
                sessions, plain, feeds, config, report
            )
        finally:
            paths = [session.end_profiling() for session in sessions]
        traces = [json.loads(Path(path).read_text()) for path in paths]
        report(0.8, "timing the whole model with the profiler off")
        counters = open_counters()
        before = _reading(counters)
        latency_ms, plain_after_ms = _time_unprofiled(sessions, plain, feeds, config, turn)
        energy = measured_energy(
            counters, before, _reading(counters), len(latency_ms) + len(plain_after_ms)
        )
    report(0.97, "reading the profiler trace")
    trace = interleave(
        [parse_trace(events, skip_runs=config.warmup_runs) for events in traces], order
    )
    stretch = quietest_stretch(
        [us / 1e3 for us in trace.runs_us], block_runs, config.blocks, config.stable_pct
    )
    recorded = len(trace.runs_us)
    everything, trace = trace, trace.subset(range(stretch.start, min(stretch.stop, recorded)))
    central = central_runs(trace.runs_us)
    kernels, ops = attribute_kernels(trace.kernels, analysis, central, fused)
    contention = memory_contention(everything, kernels, ops, block_runs)
    warnings = list(analysis.warnings)
    if count < config.sessions:
        warnings.append(
            f"the model is over {LARGE_MODEL_BYTES >> 30} GiB: profiled in one session instead "
            f"of {config.sessions}, so per-op times may differ by the session's memory "
            "placement in a repeated profile"
        )
    if not stretch.stable:
        medians = stretch.block_medians_ms
        warnings.append(
            f"the machine's load changed while profiling: blocks of {block_runs} runs took "
            f"{min(medians):.3f} to {max(medians):.3f} ms (median) over "
            f"{len(wall_ms)} runs, more than {config.stable_pct:g}% apart, even after "
            f"extending the window; per-op figures come from the least disturbed "
            f"{len(trace.runs_us)} runs. Profile again when the machine is quieter."
        )
    pages = heap_pages()
    if pages["transparent_huge_pages"] == "madvise" and not pages["malloc_huge_pages"]:
        warnings.append(
            "the heap is on 4 KiB pages (transparent huge pages only on request, and "
            f"GLIBC_TUNABLES does not hold {HUGE_PAGES_TUNABLE}): an op with large weights "
            "can take up to 40% longer in one session than in another by where its pages "
            "landed. Start the worker with GLIBC_TUNABLES="
            f"{HUGE_PAGES_TUNABLE} (bin/start does) for repeatable per-op figures."
        )
    if contention is not None and contention.contended:
        warnings.append(contention.warning())
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
        stability={
            **stretch.to_dict(),
            "recorded_runs": recorded,
            "tolerance_pct": config.stable_pct,
            "sessions": count,
            "memory_bound": contention.to_dict() if contention else None,
        },
        reference=_reference(whole, wall_ms, plain_ms, plain_after_ms) if plain_ms else None,
        inputs=specs,
        environment=environment(
            config.threads, config.graph_optimization, load_before, alive, spinning
        ),
        warnings=warnings,
        energy=energy,
    )


def _reading(counters: Counters | str):
    """A reading of the RAPL counters, or ``None`` (the energy then says unavailable)."""
    if isinstance(counters, str):
        return None
    try:
        return counters.read()
    except (OSError, ValueError):
        return None


def _fused_nodes(path: str, names: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    """The nodes onnxruntime made by fusion (named after no node of the model), from the
    optimized graph it wrote: name -> (input tensors, output tensors). None written (a
    model profiled in one session, over 2 GiB): none known."""
    if not os.path.exists(path):
        return {}
    try:
        graph = onnx.load(path, load_external_data=False).graph
    except Exception:  # noqa: BLE001 - a graph we cannot read only loses the mapping
        return {}
    return {
        node.name: (list(node.input), list(node.output))
        for node in graph.node
        if node.name and node.name not in names
    }


def _fill_costs(analysis: ModelAnalysis, costs: Mapping[str, OpCost]) -> None:
    """Give the nodes the analysis could not cost the work ``costs`` knows for them; its
    warnings about costing go (the analyze stage reports the model's costs)."""
    analysis.node_list = [
        replace(node, cost=costs.get(node.name)) if node.cost is None else node
        for node in analysis.node_list
    ]
    analysis.not_costed = [n.name for n in analysis.node_list if n.cost is None]
    analysis.warnings = [
        w for w in analysis.warnings if "not costed" not in w and "is unknown" not in w
    ]


def named_model(source: ModelSource) -> onnx.ModelProto:
    """A sorted copy of the model whose nodes carry the names the graph IR gives them, so
    that onnxruntime's kernel names match the analysis."""
    model = load_model(source)
    model, reordered = sorted_model(model)
    if not reordered:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    name_uniquely(model.graph.node)
    return model


TURN_MS = 100.0
"""How long one session runs before the next takes its turn. A user's session runs in a
tight loop with its weights and buffers warm in the caches; sessions that take turns run by
run start every run cold: ViT (1 ms a run, weights that fit in the caches) measured 1.33 ms
by turns of one run over three sessions against 1.04 ms in a tight loop, at one thread.
Turns of up to 100 ms keep the caches as warm as a tight loop and still spread every session
over the window (a turn is shortened so that each block of the stability check holds a
few rounds over all the sessions)."""


def turn_runs(run_ms: float) -> int:
    """Runs one session makes in a row: as many as fill :data:`TURN_MS` (at least one;
    ``run_ms`` 0, no warm-up timed, gives one)."""
    return max(1, int(TURN_MS / run_ms)) if run_ms > 0 else 1


def _run(sessions, plain, feeds, config: NodeProfileConfig, report: ProgressFn):
    """Profiled runs, by turns of ``turn`` runs over ``sessions`` (and a shorter turn of the
    plain session after each, one plain run per round); the runs' times, the plain runs' times, the block size once
    the first window was filled, the session of every run and the turn length."""
    run_ms = 0.0
    for i in range(config.warmup_runs):
        report(0.06, f"warm-up {i + 1}/{config.warmup_runs}")
        for session in sessions:
            t0 = time.perf_counter()
            run_once(session, feeds)
            run_ms = (time.perf_counter() - t0) * 1e3
        if plain is not None:
            run_once(plain, feeds)
    # every block of the stability check holds a few rounds over all the sessions
    turn = min(turn_runs(run_ms), max(1, config.max_runs // (2 * config.blocks * len(sessions))))
    order: list[int] = []
    wall_ms: list[float] = []
    plain_ms: list[float] = []
    block_runs = 0  # set once the first window is filled
    limit = int(config.max_runs * config.max_extend)
    longest = config.window_s * config.max_extend
    # whole rounds until every session has made min_runs runs
    min_runs = -(-config.min_runs // turn) * turn * len(sessions)
    plain_turn = -(-turn // len(sessions))  # one plain run for every session's run
    started = time.perf_counter()
    while len(wall_ms) < limit:
        k = (len(wall_ms) // turn) % len(sessions)
        t0 = time.perf_counter()
        run_once(sessions[k], feeds)
        wall_ms.append((time.perf_counter() - t0) * 1e3)
        order.append(k)
        if plain is not None and len(wall_ms) % turn == 0:
            plain_ms += _timed_runs(plain, feeds, plain_turn)
        elapsed = time.perf_counter() - started
        first_window_done = len(wall_ms) >= config.max_runs or window_filled(
            len(wall_ms), elapsed, config.window_s, min_runs
        )
        if not block_runs and first_window_done:
            block_runs = -(-len(wall_ms) // config.blocks)
        if block_runs and len(wall_ms) % block_runs == 0:
            medians = block_medians(wall_ms, block_runs)[-config.blocks :]
            if agree(medians, config.stable_pct) or elapsed >= longest:
                break
            report(
                _fraction(elapsed, len(wall_ms), min_runs, config),
                f"profiling: the machine's load changed (blocks of {block_runs} runs: "
                f"{min(medians):.3f} to {max(medians):.3f} ms), extending the window",
            )
        elif not block_runs:
            report(
                _fraction(elapsed, len(wall_ms), min_runs, config),
                f"profiling: {len(wall_ms)} runs, median {float(np.median(wall_ms)):.3f} ms",
            )
    block_runs = block_runs or max(1, -(-len(wall_ms) // config.blocks))
    return wall_ms, plain_ms, block_runs, order, turn


def _timed_runs(session, feeds, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run_once(session, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _fraction(elapsed_s: float, runs: int, min_runs: int, config: NodeProfileConfig) -> float:
    """Progress: the first window (its time and its minimum runs) takes 0.07-0.57, an
    extension up to 0.77."""
    first = min(elapsed_s / config.window_s, runs / min_runs, 1.0)
    extra_s = config.window_s * (config.max_extend - 1)
    extended = min(max(elapsed_s - config.window_s, 0.0) / extra_s, 0.99) if extra_s else 0.0
    return 0.07 + 0.5 * first + 0.2 * extended


def _time_unprofiled(sessions, plain, feeds, config: NodeProfileConfig, turn: int):
    """The profiled sessions' runs after ``end_profiling``, by turns of ``turn`` runs (and
    the plain session's turns between them): half a window, at least ``min_runs`` each."""
    window = config.window_s / 2
    session_ms: list[float] = []
    plain_ms: list[float] = []
    started = time.perf_counter()
    k = 0
    while len(session_ms) < config.max_runs:
        session_ms += _timed_runs(sessions[k % len(sessions)], feeds, turn)
        if plain is not None:
            plain_ms += _timed_runs(plain, feeds, turn)
        k += 1
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
