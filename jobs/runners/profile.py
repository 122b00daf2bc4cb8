"""Profile stage: measured on a measured target's worker, predicted for a modeled one."""

from __future__ import annotations

from engine.errors import Cancelled, ProgressFn
from engine.graph import analyze_model
from engine.profiling import (
    NodeProfileConfig,
    calibrate,
    find_all,
    measure_roofs,
    modeled_copy,
    predict_profile,
    profile_nodes,
    sweep_batch,
    sweep_threads,
)
from engine.profiling.tvm_kernels import KernelTimingConfig, profile_tvm_kernels
from engine.targets.schema import validate_profile
from workbench.models import StageResult, Target


def _span(progress: ProgressFn, start: float, end: float) -> ProgressFn:
    return lambda fraction, message: progress(start + (end - start) * fraction, message)


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    all_options = run.config.get("options", {})
    options = all_options.get("profile", {})
    shapes = {
        k: tuple(v) for k, v in all_options.get("analyze", {}).get("input_shapes", {}).items()
    }
    path = run.model.file.path
    target = validate_profile(run.target.profile)
    if run.target.kind != Target.Kind.MEASURED:
        graph = analyze_model(path).graph
        progress(0.5, f"predicting per-op latency on {target.name}'s units")
        result = predict_profile(graph, target).to_dict()
        result["findings"] = [f.to_dict() for f in find_all(predicted=result)]
        return result

    threads = int(options.get("threads", 0))
    config = NodeProfileConfig(
        threads=threads,
        window_s=float(options.get("window_s", 5.0)),
        input_shapes=shapes,
        reference=True,
    )
    sweeping = bool(options.get("sweeps", False))
    kernels = bool(options.get("tvm_kernels", True))
    end = 0.4 if sweeping else 0.6 if kernels else 0.85
    result = profile_nodes(path, config, progress=_span(progress, 0.0, end)).to_dict()
    sweeps = []
    if sweeping:
        sweeps.append(sweep_threads(path, progress=_span(progress, 0.4, 0.5)).to_dict())
        sweeps.append(sweep_batch(path, progress=_span(progress, 0.5, 0.6)).to_dict())
    result["sweeps"] = sweeps
    if kernels:
        result["tvm_kernels"] = _tvm_kernels(path, threads, shapes, result, progress)
    roofs = measure_roofs(threads, window_s=0.5, progress=_span(progress, 0.85, 0.93)).to_dict()
    result["roofs"] = roofs
    progress(0.95, "calibrating a modeled copy of this machine")
    copy = modeled_copy(target, roofs["peak_gflops_fp32"], roofs["mem_bw_gbps"])
    result["calibration"] = calibrate(copy, {run.model.name: result}).to_dict()
    result["findings"] = [f.to_dict() for f in find_all(result, sweeps)]
    return result


def _tvm_kernels(path, threads: int, shapes: dict, result: dict, progress: ProgressFn) -> dict:
    """Per-kernel latency of the model's TVM build; a model TVM cannot build is a note
    in the result, the onnxruntime profile stands."""
    ops_us = {op["name"]: op["typical_us"] for op in result["ops"] if op["typical_us"] is not None}
    config = KernelTimingConfig(
        threads=threads, window_s=min(float(result["window_s"]), 3.0), input_shapes=shapes
    )
    try:
        found = profile_tvm_kernels(path, config, ops_us, progress=_span(progress, 0.6, 0.85))
    except Cancelled:
        raise
    except Exception as e:  # noqa: BLE001 - TVM raises its own errors
        text = str(e).strip()
        return {"failed": f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"}
    return found.to_dict()
