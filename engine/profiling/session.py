"""onnxruntime sessions for measurement: options, generated inputs, the recorded environment,
and the statistics every measurement reports."""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from engine.accuracy.inputs import DEFAULT_INT_HIGH
from engine.errors import EngineError, InvalidModelError, ShapeError, error_line
from engine.graph.loader import ModelSource
from engine.targets.host import describe_host

GRAPH_OPTIMIZATIONS = ("disabled", "basic", "extended", "all")
"""onnxruntime graph optimization levels, by the names the engine's configs use."""

_ORT_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8,
    "tensor(bool)": np.bool_,
}


def check_optimization(level: str) -> None:
    if level not in GRAPH_OPTIMIZATIONS:
        raise EngineError(
            f"unknown graph optimization '{level}'; use one of {', '.join(GRAPH_OPTIMIZATIONS)}",
            code="invalid_config",
        )


SPIN_ALWAYS = "always"
SPIN_DURING_RUNS = "during_runs"
SPINNING = {
    SPIN_ALWAYS: "onnxruntime's default: the intra-op pool threads spin while the session "
    "runs and for a while after each run, to catch the next one on awake threads",
    SPIN_DURING_RUNS: "the intra-op pool threads spin while the session runs and block when "
    "its run returns (session.force_spinning_stop=1): idle sessions hold no core",
}
"""How a session's pool threads wait for work, by policy name (see
:mod:`engine.profiling.nodes` for why a profile's sessions spin during runs only)."""


def open_session(
    source: ModelSource,
    *,
    threads: int,
    optimization: str,
    profile_prefix: str | None = None,
    spinning: str = SPIN_ALWAYS,
    optimized_path: str | None = None,
):
    """An onnxruntime CPU session; ``profile_prefix`` turns its profiler on, ``spinning``
    names how its pool threads wait for work (:data:`SPINNING`); ``optimized_path``
    receives the graph onnxruntime runs after its optimizations (its fused nodes)."""
    import onnxruntime as ort

    check_optimization(optimization)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    if spinning not in SPINNING:
        raise ValueError(f"unknown spinning policy {spinning!r}; use one of {', '.join(SPINNING)}")
    if spinning == SPIN_DURING_RUNS:
        options.add_session_config_entry("session.force_spinning_stop", "1")
    options.log_severity_level = 3
    options.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[optimization]
    if optimized_path is not None:
        options.optimized_model_filepath = optimized_path
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    if isinstance(source, onnx.ModelProto):
        source = source.SerializeToString()
    elif not isinstance(source, bytes):
        source = os.fspath(source)
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own untyped errors for bad graphs
        raise InvalidModelError(
            f"onnxruntime could not load the model: {error_line(e, 300)}"
        ) from e


def make_inputs(
    session,
    input_shapes: Mapping[str, Sequence[int]],
    seed: int,
    index_bounds: Mapping[str, int] | None = None,
) -> tuple[dict, list[dict]]:
    """Random feeds for every input (symbolic dims default to 1) and their specs.

    Integer inputs are drawn below ``index_bounds[name]`` (the table a Gather indexes with
    them: token ids below the vocabulary, see :func:`engine.accuracy.inputs.index_bounds`),
    others from ``[0, DEFAULT_INT_HIGH)`` (masks and type ids), as the accuracy and compile
    stages draw them: a token type id of 6 sends BERT's embedding out of range.
    """
    bounds = index_bounds or {}
    rng = np.random.default_rng(seed)
    feeds, specs = {}, []
    for arg in session.get_inputs():
        dtype = _ORT_DTYPES.get(arg.type)
        if dtype is None:
            raise ShapeError(f"input {arg.name!r} has type {arg.type}, which cannot be generated")
        if arg.name in input_shapes:
            shape = tuple(input_shapes[arg.name])
        else:
            # Symbolic dims (batch, sequence) default to 1; the caller can override them.
            shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in arg.shape)
        if np.issubdtype(dtype, np.floating):
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            value = rng.integers(0, 2, shape).astype(bool)
        else:
            value = rng.integers(0, bounds.get(arg.name, DEFAULT_INT_HIGH), shape).astype(dtype)
        feeds[arg.name] = value
        specs.append({"name": arg.name, "shape": list(shape), "dtype": np.dtype(dtype).name})
    return feeds, specs


def run_once(session, feeds: dict) -> None:
    """One inference; onnxruntime's failures become :class:`InvalidModelError`."""
    try:
        session.run(None, feeds)
    except Exception as e:
        raise InvalidModelError(
            f"onnxruntime failed while running the model: {error_line(e, 300)}"
        ) from e


HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
"""Set in ``GLIBC_TUNABLES`` before Python starts (bin/start, bin/test and the Docker image
do), glibc's malloc asks for transparent huge pages for its memory. Without them, where a
session's weights land in 4 KiB pages decides a large Gemm's time: measured on this
project's VM, AlexNet's fc7 took 2.6 to 4.0 ms across eight sessions of one process, and
2.66 to 2.71 ms with the tunable set."""


def heap_pages() -> dict:
    """How the heap is paged: the kernel's transparent-huge-page mode and whether malloc
    asks for huge pages (``HUGE_PAGES_TUNABLE``)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        mode = text[text.index("[") + 1 : text.index("]")]
    except (OSError, ValueError):
        mode = None
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    requested = any(
        t.startswith("glibc.malloc.hugetlb=") and t.split("=", 1)[1] in ("1", "2")
        for t in tunables.split(":")
    )
    return {
        "transparent_huge_pages": mode,
        "malloc_huge_pages": mode == "always" or (mode == "madvise" and requested),
    }


def environment(
    threads: int,
    optimization: str,
    load_before: float | None,
    sessions: int = 1,
    spinning: str = SPIN_ALWAYS,
) -> dict:
    """What a measurement ran on: machine, versions, threads, how many sessions were alive
    and how their pool threads spun, and how busy the machine was."""
    import onnxruntime as ort

    return {
        "machine": describe_host(),
        "runtime": f"onnxruntime {ort.__version__}",
        "numpy": np.__version__,
        "provider": "CPUExecutionProvider",
        "intra_op_threads": threads,
        "threads_note": "0 = onnxruntime's default, one thread per physical core",
        "threading": {
            "sessions": sessions,
            "thread_pools": "one intra-op pool per session",
            "spinning": spinning,
            "spinning_note": SPINNING[spinning],
        },
        "graph_optimization": optimization,
        "heap_pages": heap_pages(),
        # Other work on the machine makes timings noisy; the load average says how much.
        "load_avg_1m": {"before": load_before, "after": load_average()},
    }


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def summarize(samples_ms: Sequence[float]) -> dict[str, float]:
    """Median, p90, mean, min, max, stdev and the spread (IQR / median, in %)."""
    ordered = np.sort(np.asarray(samples_ms, dtype=float))
    median = float(np.median(ordered))
    q25, q75, p90 = (float(np.percentile(ordered, q)) for q in (25, 75, 90))
    return {
        "median": median,
        "p90": p90,
        "mean": float(ordered.mean()),
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "stdev": statistics.pstdev(ordered.tolist()),
        # Spread: the interquartile range relative to the median, robust to outliers.
        "spread_pct": 100.0 * (q75 - q25) / median if median else 0.0,
    }


def harrell_davis_median(samples: Sequence[float]) -> float:
    """The median by the Harrell-Davis estimator: a weighted mean of all order statistics,
    the weights from the Beta((n+1)/2, (n+1)/2) distribution (as BenchmarkDotNet estimates
    quantiles). Unlike the sample median it moves smoothly when an op's times fall into two
    groups (say in cache or not) in varying proportions, so repeated profiles agree."""
    from scipy.special import betainc

    ordered = np.sort(np.asarray(samples, dtype=float))
    n = len(ordered)
    if n < 3:
        return float(np.median(ordered))
    a = (n + 1) / 2
    edges = betainc(a, a, np.arange(n + 1) / n)
    return float(np.dot(np.diff(edges), ordered))
