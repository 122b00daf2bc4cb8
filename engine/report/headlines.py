"""The headline figures of a run: one flat, named list per run, read from its stage reports.

A figure is what a gate tests (``profile.latency_ms<=5``), what a comparison lines up
side by side and what a model's history plots. Each says what it is: its unit, which way
is better, and whether it was measured (where, how many runs, how many threads, with the
run-to-run spread as its noise band) or predicted (by which model) or counted. A figure
whose value a report does not know is listed with ``value=None``: unknown is never 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

LOWER, HIGHER = "lower", "higher"


@dataclass(frozen=True)
class Figure:
    """One named figure of a run. ``key`` is ``<stage>.<name>``, as gates write it."""

    key: str
    label: str
    value: float | str | bool | None
    unit: str
    better: str | None
    basis: str
    measured: bool
    noise_pct: float | None = None
    """Run-to-run spread of a measured figure (interquartile range / median, in %)."""

    @property
    def stage(self) -> str:
        return self.key.split(".", 1)[0]

    def to_dict(self) -> dict:
        return asdict(self)


KEYS: dict[str, str] = {
    "analyze.params": "parameters",
    "analyze.param_bytes": "parameter bytes",
    "analyze.macs": "multiply-accumulates (counted)",
    "analyze.flops": "floating-point operations (counted)",
    "analyze.activation_bytes": "bytes of every intermediate tensor",
    "analyze.nodes": "nodes of the prepared model",
    "profile.latency_ms": "whole-model latency: measured median, or predicted",
    "profile.latency_p90_ms": "whole-model latency, 90th percentile (measured)",
    "profile.tvm_latency_ms": "latency of the TVM build (measured)",
    "partition.makespan_ms": "predicted makespan of the best plan",
    "partition.speedup": "best plan over the best single unit (predicted)",
    "partition.bound_ms": "lower bound of the makespan (predicted)",
    "memory.arena_bytes": "arena of the best memory plan",
    "memory.lower_bound_bytes": "peak of live tensor bytes",
    "memory.arena_vs_bound": "best arena / lower bound",
    "memory.tvm_static_bytes": "TVM's static memory plan",
    "compile.latency_ms": "latency of the shipped build (measured)",
    "compile.onnxruntime_latency_ms": "onnxruntime's latency, same worker (measured)",
    "compile.speed_vs_onnxruntime": "onnxruntime latency / shipped build latency",
    "compile.kernel_count": "TVM kernels in the build",
    "compile.outputs_match": "the build's outputs match onnxruntime's",
    "accuracy.verdict": "pass or fail against the thresholds",
    "accuracy.cosine": "cosine similarity, worst output",
    "accuracy.snr_db": "signal-to-noise ratio in dB, worst output",
    "accuracy.max_abs": "largest absolute error",
    "accuracy.mean_rel": "mean relative error, worst output",
    "accuracy.top1": "top-1 agreement, worst output",
    "accuracy.top5": "top-5 agreement, worst output",
}
"""Every figure key a report can give, with what it means (gates are checked against it)."""


def headline_figures(results: dict[str, dict | None]) -> list[Figure]:
    """Every headline figure of the stage reports in ``results`` (stage name -> report, as
    the API stores them), in stage order. Stages without a report give no figures."""
    figures: list[Figure] = []
    for stage, read in _READERS.items():
        report = results.get(stage)
        if isinstance(report, dict):
            figures.extend(read(report))
    return figures


def _num(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value else None  # NaN is unknown


def _threads(environment: dict) -> str:
    threads = environment.get("intra_op_threads")
    machine = environment.get("machine") or {}
    if not threads:
        cores = machine.get("physical_cores")
        # onnxruntime's default: one intra-op thread per physical core
        return f"default threads ({cores}, one per physical core)" if cores else "default threads"
    return f"{threads} thread{'s' if threads != 1 else ''}"


def _analyze(d: dict) -> Iterator[Figure]:
    basis = "counted from the model's shapes"
    for name, label, unit in (
        ("params", "parameters", ""),
        ("param_bytes", "parameter bytes", "bytes"),
        ("macs", "MACs", ""),
        ("flops", "FLOPs", ""),
        ("activation_bytes", "activation bytes", "bytes"),
        ("nodes", "nodes", ""),
    ):
        value = _num(d.get(name))
        if name in ("macs", "flops") and d.get("not_costed"):
            # Some ops have no cost formula: the total is a lower bound, not the figure.
            basis_here = f"{basis}; {len(d['not_costed'])} ops not costed (a lower bound)"
        else:
            basis_here = basis
        # fewer nodes is not better in itself (a fused export has fewer): no direction
        better = None if name == "nodes" else LOWER
        yield Figure(f"analyze.{name}", label, value, unit, better, basis_here, False)


def _profile(d: dict) -> Iterator[Figure]:
    latency = _num(d.get("latency_ms"))
    if d.get("measured"):
        env = d.get("environment") or {}
        cpu = (env.get("machine") or {}).get("cpu_model") or "an unnamed CPU"
        stats = d.get("latency") or {}
        runs = d.get("latency_runs") if d.get("latency_runs") is not None else d.get("runs")
        where = f"measured on {cpu}, {{}} of {runs} runs, {_threads(env)}"
        noise = _num(stats.get("spread_pct"))
        yield Figure(
            "profile.latency_ms",
            "latency (median)",
            latency,
            "ms",
            LOWER,
            where.format("median"),
            True,
            noise,
        )
        yield Figure(
            "profile.latency_p90_ms",
            "latency (p90)",
            _num(stats.get("p90")),
            "ms",
            LOWER,
            where.format("90th percentile"),
            True,
            noise,
        )
    else:
        unit = f" / {d['unit']}" if d.get("unit") else ""
        basis = f"predicted by {d.get('model') or 'the target model'} for {d.get('target')}{unit}"
        yield Figure("profile.latency_ms", "latency", latency, "ms", LOWER, basis, False)
    kernels = d.get("tvm_kernels")
    if isinstance(kernels, dict) and "failed" not in kernels:
        threads = kernels.get("threads")
        basis = (
            f"measured, TVM {kernels.get('tvm_version')} build, median of "
            f"{kernels.get('runs')} runs" + (f", {threads} threads" if threads else "")
        )
        yield Figure(
            "profile.tvm_latency_ms",
            "TVM build latency",
            _num(kernels.get("latency_ms")),
            "ms",
            LOWER,
            basis,
            True,
        )


def _memory(d: dict) -> Iterator[Figure]:
    best = d.get("best")
    planners = d.get("planners") or {}
    basis = f"planned by {best}" if best else "planned"
    if not d.get("complete", True) or d.get("unsized"):
        basis += "; some tensor sizes unknown (a lower bound)"
    yield Figure(
        "memory.arena_bytes",
        "arena (best plan)",
        _num(planners.get(best)),
        "bytes",
        LOWER,
        basis,
        False,
    )
    bound_basis = "the peak of live tensor bytes in the chosen order"
    if not d.get("complete", True) or d.get("unsized"):
        bound_basis += "; some tensor sizes unknown (a lower bound)"
    yield Figure(
        "memory.lower_bound_bytes",
        "lower bound (peak live bytes)",
        _num(d.get("lower_bound_bytes")),
        "bytes",
        LOWER,
        bound_basis,
        False,
    )
    yield Figure(
        "memory.arena_vs_bound",
        "arena / lower bound",
        _num((d.get("ratios") or {}).get(best)),
        "x",
        LOWER,
        basis,
        False,
    )
    tvm = d.get("tvm")
    if isinstance(tvm, dict) and "failed" not in tvm:
        yield Figure(
            "memory.tvm_static_bytes",
            "TVM's static plan",
            _num(tvm.get("tvm_static_bytes")),
            "bytes",
            LOWER,
            f"planned by TVM {tvm.get('tvm_version')} ({tvm.get('tvm_pass')})",
            False,
        )


def _partition(d: dict) -> Iterator[Figure]:
    best = d.get("best")
    algorithm = (d.get("algorithms") or {}).get(best) or {}
    basis = f"predicted for {d.get('target')} by its cost model, best plan {best}"
    yield Figure(
        "partition.makespan_ms",
        "makespan (best plan)",
        _num(d.get("best_makespan_ms")),
        "ms",
        LOWER,
        basis,
        False,
    )
    yield Figure(
        "partition.speedup",
        "speedup over the best single unit",
        _num(algorithm.get("speedup")),
        "x",
        HIGHER,
        basis,
        False,
    )
    yield Figure(
        "partition.bound_ms",
        "lower bound",
        _num(d.get("bound_ms")),
        "ms",
        None,
        f"predicted for {d.get('target')}",
        False,
    )


def _compile(d: dict) -> Iterator[Figure]:
    timing = d.get("timing") or {}
    rounds = timing.get("rounds")
    threads = d.get("threads")
    basis = "measured on the worker"
    if rounds:
        basis += f", each side's fastest of {rounds} alternating rounds"
    device = d.get("measured_on")
    if device:  # a remote target: measured on the device, through its tracker
        cpu = (device.get("reported") or {}).get("cpu") or "CPU not reported"
        basis = (
            f"measured on device '{device.get('key')}' at {device.get('address')} ({cpu}), "
            f"median of {timing.get('runs')} repeats"
        )
    if threads:
        basis += f", {threads} threads"
    yield Figure(
        "compile.latency_ms",
        "shipped build latency",
        _num(d.get("latency_ms")),
        "ms",
        LOWER,
        basis,
        True,
    )
    if d.get("baseline_model"):  # what onnxruntime ran: the user's file or the prepared one
        basis += f"; onnxruntime on {d['baseline_model']}"
    yield Figure(
        "compile.onnxruntime_latency_ms",
        "onnxruntime latency",
        _num(d.get("onnxruntime_latency_ms")),
        "ms",
        LOWER,
        basis,
        True,
    )
    speed, speed_basis = _num(d.get("speed_vs_onnxruntime")), basis
    # results from before the field was kept: onnxruntime alone was always the upload
    as_uploaded = d.get("onnxruntime_as_uploaded", d.get("backend") == "onnxruntime")
    if as_uploaded and speed is not None:
        # The shipped build is onnxruntime itself on the model as uploaded, at its best
        # thread setting: 1 by construction; a gate on the measured ratio of two timings
        # of the same thing would fail on machine noise.
        speed_basis = (
            f"1 by construction: the build is onnxruntime itself (measured {speed:.2f}x, "
            f"{basis}: machine noise)"
        )
        speed = 1.0
    yield Figure(
        "compile.speed_vs_onnxruntime",
        "speed vs onnxruntime",
        speed,
        "x",
        HIGHER,
        speed_basis,
        True,
    )
    yield Figure(
        "compile.kernel_count",
        "kernels",
        _num(d.get("kernel_count")),
        "",
        None,
        "counted in the build",
        False,
    )
    match = d.get("outputs_match")
    yield Figure(
        "compile.outputs_match",
        "outputs match onnxruntime",
        match if isinstance(match, bool) else None,
        "",
        HIGHER,
        "checked on the worker",
        False,
    )


def _accuracy(d: dict) -> Iterator[Figure]:
    candidate = (d.get("candidate") or {}).get("name") or "the candidate"
    basis = f"{candidate} against onnxruntime fp32, worst output"
    outputs = [o for o in d.get("outputs") or [] if isinstance(o, dict)]
    nonfinite = sum(int(_num(o.get("nonfinite_mismatch")) or 0) for o in outputs)
    if nonfinite:
        # The error metrics cover the finite values only: with NaN/inf where the reference
        # has numbers, a cosine of 1.0 would be a lie. Unknown, and says why.
        basis += f"; {nonfinite} NaN/inf values differ from the reference, metrics unknown"

    failed = [o.get("name") or "?" for o in outputs if o.get("error")]
    if failed:
        basis += f"; could not compare {', '.join(failed)}, metrics unknown"

    def worst(name: str, pick: Callable) -> float | None:
        if nonfinite or failed:
            return None
        values = [_num(o.get(name)) for o in outputs]
        if name not in ("top1", "top5") and any(v is None for v in values):
            # an output without this metric (an infinite error stored as null): the worst
            # of the others would be a better figure than the truth
            return None
        known = [v for v in values if v is not None]
        return pick(known) if known else None

    yield Figure("accuracy.verdict", "verdict", d.get("verdict"), "", None, basis, False)
    for name, label, pick, better in (
        ("cosine", "cosine similarity", min, HIGHER),
        ("snr_db", "SNR", min, HIGHER),
        ("max_abs", "max abs error", max, LOWER),
        ("mean_rel", "mean relative error", max, LOWER),
        ("top1", "top-1 agreement", min, HIGHER),
        ("top5", "top-5 agreement", min, HIGHER),
    ):
        unit = "dB" if name == "snr_db" else ""
        yield Figure(f"accuracy.{name}", label, worst(name, pick), unit, better, basis, False)


_READERS: dict[str, Callable[[dict], Iterator[Figure]]] = {
    "analyze": _analyze,
    "profile": _profile,
    "partition": _partition,
    "memory": _memory,
    "compile": _compile,
    "accuracy": _accuracy,
}
