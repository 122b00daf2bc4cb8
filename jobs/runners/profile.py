"""Profile stage: measured on a measured target's worker, predicted for a modeled one."""

from __future__ import annotations

from engine.errors import ProgressFn
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
    result = profile_nodes(path, config, progress=_span(progress, 0.0, 0.6 if sweeping else 0.8))
    result = result.to_dict()
    roofs = measure_roofs(threads, window_s=0.5, progress=_span(progress, 0.8, 0.9)).to_dict()
    result["roofs"] = roofs
    sweeps = []
    if sweeping:
        sweeps.append(sweep_threads(path, progress=_span(progress, 0.6, 0.7)).to_dict())
        sweeps.append(sweep_batch(path, progress=_span(progress, 0.7, 0.8)).to_dict())
    result["sweeps"] = sweeps
    progress(0.95, "calibrating a modeled copy of this machine")
    copy = modeled_copy(target, roofs["peak_gflops_fp32"], roofs["mem_bw_gbps"])
    result["calibration"] = calibrate(copy, {run.model.name: result}).to_dict()
    result["findings"] = [f.to_dict() for f in find_all(result, sweeps)]
    return result
