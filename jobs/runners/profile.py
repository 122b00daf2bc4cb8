from __future__ import annotations

from engine.errors import ProgressFn, UnsupportedModelError
from engine.profiling import LatencyConfig, measure_latency
from workbench.models import StageResult, Target


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    if run.target.kind != Target.Kind.MEASURED:
        raise UnsupportedModelError(
            f"target {run.target.name!r} is {run.target.kind}: only measured targets can be "
            "profiled yet.",
            hint="Pick the 'host' target to measure on the worker's CPU.",
        )
    options = run.config.get("options", {}).get("profile", {})
    config = LatencyConfig(
        threads=int(options.get("threads", 0)),
        window_s=float(options.get("window_s", 5.0)),
        input_shapes={
            name: tuple(dims)
            for name, dims in run.config.get("options", {})
            .get("analyze", {})
            .get("input_shapes", {})
            .items()
        },
    )
    return measure_latency(run.model.file.path, config, progress=progress).to_dict()
