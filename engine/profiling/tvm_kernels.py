"""Per-kernel latency of the model's TVM build on this machine.

The model is built as the compile stage builds it (simplified, TVM's FuseOps plus our
fusion rules, default schedules, nodes TVM cannot take on onnxruntime), then every kernel
launch is timed with the Relax VM's instrument hook over repeated runs: one warm-up run,
then runs until a time window is filled (at least ``min_runs``), the rule the onnxruntime
profile follows. Per kernel: median, p90 and spread (IQR / median) of its launch time, the
ONNX nodes it computes, and -- given the onnxruntime profile of the same model -- what
those nodes took there, so one kernel can be set against the ops it replaced.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.errors import ProgressFn
from engine.graph.loader import ModelSource
from engine.profiling.session import summarize


@dataclass(frozen=True)
class KernelTimingConfig:
    threads: int = 0
    window_s: float = 3.0
    min_runs: int = 10
    max_runs: int = 1000
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class TvmKernel:
    id: str
    func: str
    segment: int
    nodes: list[str]
    op_types: list[str]
    pattern: str
    intensity: str
    flops: int
    global_bytes: int
    median_us: float | None
    p90_us: float | None
    spread_pct: float | None
    runs: int
    share_pct: float | None = None
    onnxruntime_us: float | None = None  # the same nodes in the onnxruntime profile


@dataclass
class TvmKernelProfile:
    """Measured on this machine: every time is a median over ``runs`` model runs."""

    method: str
    runs: int
    window_s: float
    threads: int
    tvm_version: str
    target: dict  # the TVM target it was built for (kind, mcpu, cores)
    latency_ms: float  # whole model, TVM, median (compile stage's timing)
    onnxruntime_latency_ms: float  # whole model, onnxruntime, same loop rule and threads
    kernel_sum_ms: float
    kernels: list[TvmKernel]
    fallback_nodes: list[dict]
    compile_s: float
    measured: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def profile_tvm_kernels(
    source: ModelSource,
    config: KernelTimingConfig = KernelTimingConfig(),
    ops_us: Mapping[str, float] | None = None,
    progress: ProgressFn | None = None,
) -> TvmKernelProfile:
    """Build ``source`` with TVM and time every kernel launch on this machine.

    ``ops_us`` maps ONNX node names to their onnxruntime time (e.g. a profile's
    ``typical_us``) to put next to each kernel. Raises the compile stage's errors.
    """
    import tvm

    from engine.fusion import CompileConfig, compile_model
    from engine.fusion.standalone import CompiledModel
    from engine.fusion.timing import TimingConfig, kernel_samples_us

    report = progress or (lambda fraction, message: None)
    with tempfile.TemporaryDirectory(prefix="workbench-kernels-") as tmp:
        started = time.perf_counter()
        compiled = compile_model(
            source,
            CompileConfig(
                out_dir=tmp,
                threads=config.threads,
                input_shapes=dict(config.input_shapes),
                timing_window_s=0.5,
                kernel_timing_runs=1,
                choose_backends=False,  # the TVM build's kernels, not onnxruntime's
            ),
            progress=lambda f, m: report(0.7 * f, f"TVM build: {m}"),
        )
        compile_s = time.perf_counter() - started
        model = CompiledModel(Path(tmp) / "artifact", threads=compiled.threads)
        feeds = model.example_inputs()
        vms = [s.vm for s in model.segments if hasattr(s, "vm")]
        indices = [s["index"] for s in compiled.segments if s["backend"] == "tvm"]
        timing = TimingConfig(config.min_runs, config.max_runs, config.window_s)
        samples: dict[tuple[int, str, int], list[float]] = {}
        for k, (vm, index) in enumerate(zip(vms, indices, strict=True)):
            report(0.7 + 0.3 * k / max(len(vms), 1), f"timing the kernels of segment {index}")
            names = {kernel.func for kernel in compiled.kernels if kernel.segment == index}
            found = kernel_samples_us(vm, lambda: model.run(feeds), names, timing)
            samples.update({(index, func, n): v for (func, n), v in found.items()})
    kernels = _kernels(compiled.kernels, samples, ops_us or {})
    total = sum(k.median_us or 0.0 for k in kernels)
    for k in kernels:
        k.share_pct = 100.0 * k.median_us / total if k.median_us and total else None
    report(1.0, f"{len(kernels)} kernels timed")
    return TvmKernelProfile(
        method="Relax VM instrument hook around every kernel launch",
        runs=max((len(v) for v in samples.values()), default=0),
        window_s=config.window_s,
        threads=compiled.threads,
        tvm_version=tvm.__version__,
        target=dict(compiled.target.get("target", {})),
        latency_ms=compiled.latency_ms,
        onnxruntime_latency_ms=compiled.onnxruntime_latency_ms,
        kernel_sum_ms=total / 1e3,
        kernels=kernels,
        fallback_nodes=compiled.fallback_nodes,
        compile_s=round(compile_s, 2),
    )


def _kernels(planned, samples, ops_us: Mapping[str, float]) -> list[TvmKernel]:
    seen: dict[tuple[int, str], int] = {}
    out = []
    for k in planned:
        occurrence = seen.get((k.segment, k.func), 0)
        seen[(k.segment, k.func)] = occurrence + 1
        values = samples.get((k.segment, k.func, occurrence))
        stats = summarize([v / 1e3 for v in values]) if values else None
        ort = [ops_us[n] for n in k.nodes if n in ops_us]
        out.append(
            TvmKernel(
                id=k.id,
                func=k.func,
                segment=k.segment,
                nodes=list(k.nodes),
                op_types=list(k.op_types),
                pattern=k.pattern,
                intensity=k.intensity,
                flops=k.flops,
                global_bytes=k.global_bytes,
                median_us=1e3 * stats["median"] if stats else None,
                p90_us=1e3 * stats["p90"] if stats else None,
                spread_pct=stats["spread_pct"] if stats else None,
                runs=len(values or ()),
                onnxruntime_us=sum(ort) if ort else None,
            )
        )
    return out
