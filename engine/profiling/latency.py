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

import numpy as np

from engine.errors import EngineError, InvalidModelError, ProgressFn, ShapeError
from engine.targets.host import describe_host

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


@dataclass(frozen=True)
class LatencyConfig:
    threads: int = 0  # 0: onnxruntime's default (all usable cores)
    warmup_runs: int = 3
    min_runs: int = 10
    max_runs: int = 100_000
    window_s: float = 5.0
    seed: int = 0
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


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


def _make_inputs(session, config: LatencyConfig) -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(config.seed)
    feeds, specs = {}, []
    for arg in session.get_inputs():
        dtype = _ORT_DTYPES.get(arg.type)
        if dtype is None:
            raise ShapeError(f"input {arg.name!r} has type {arg.type}, which cannot be generated")
        if arg.name in config.input_shapes:
            shape = tuple(config.input_shapes[arg.name])
        else:
            # Symbolic dims (batch, sequence) default to 1; the caller can override them.
            shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in arg.shape)
        if np.issubdtype(dtype, np.floating):
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype is np.bool_:
            value = rng.integers(0, 2, shape).astype(bool)
        else:
            value = rng.integers(0, 8, shape).astype(dtype)
        feeds[arg.name] = value
        specs.append({"name": arg.name, "shape": list(shape), "dtype": np.dtype(dtype).name})
    return feeds, specs


def _percentile(sorted_ms: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(sorted_ms), q))


def measure_latency(
    model_path: str, config: LatencyConfig = LatencyConfig(), progress: ProgressFn | None = None
) -> LatencyProfile:
    """Measure one inference's wall time on this machine's CPU with onnxruntime."""
    import onnxruntime as ort

    report = progress or (lambda fraction, message: None)
    report(0.0, "creating the onnxruntime session")
    options = ort.SessionOptions()
    if config.threads:
        options.intra_op_num_threads = config.threads
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own untyped errors for bad graphs
        raise InvalidModelError(
            f"onnxruntime could not load the model: {str(e).splitlines()[0][:300]}"
        ) from e
    feeds, specs = _make_inputs(session, config)
    try:
        for i in range(config.warmup_runs):
            report(0.02, f"warm-up {i + 1}/{config.warmup_runs}")
            session.run(None, feeds)
        samples: list[float] = []
        started = time.perf_counter()
        while len(samples) < config.max_runs:
            t0 = time.perf_counter()
            session.run(None, feeds)
            samples.append((time.perf_counter() - t0) * 1e3)
            elapsed = time.perf_counter() - started
            if elapsed >= config.window_s and len(samples) >= config.min_runs:
                break
            report(
                0.05 + 0.95 * min(elapsed / config.window_s, 0.99),
                f"timing: {len(samples)} runs, median {statistics.median(samples):.3f} ms",
            )
    except EngineError:  # includes Cancelled, raised by the progress callback
        raise
    except Exception as e:
        raise InvalidModelError(
            f"onnxruntime failed while running the model: {str(e).splitlines()[0][:300]}"
        ) from e
    ordered = sorted(samples)
    median = statistics.median(ordered)
    latency = {
        "median": median,
        "p90": _percentile(ordered, 90),
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "stdev": statistics.pstdev(ordered),
        # Spread: the interquartile range relative to the median, robust to outliers.
        "spread_pct": 100.0 * (_percentile(ordered, 75) - _percentile(ordered, 25)) / median,
    }
    return LatencyProfile(
        measured=True,
        runs=len(samples),
        warmup_runs=config.warmup_runs,
        window_s=config.window_s,
        threads=session.get_session_options().intra_op_num_threads or 0,
        latency_ms=latency,
        samples_ms=[round(s, 4) for s in samples[:2000]],
        inputs=specs,
        environment={
            "machine": describe_host(),
            "runtime": f"onnxruntime {ort.__version__}",
            "provider": "CPUExecutionProvider",
        },
    )
