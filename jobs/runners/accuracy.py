from __future__ import annotations

from engine.accuracy import AccuracyConfig, check_accuracy, make_candidate
from engine.errors import ProgressFn, UnsupportedModelError
from engine.graph import load_model
from workbench.models import InputData, OnnxModel, StageResult


def _candidate(stage: StageResult, options: dict, model):
    """The candidate named in the run's options, built for this model."""
    name = options.get("candidate", "fp16")
    if name == "partitioned":
        plan = stage.run.stages.filter(stage="partition", status="succeeded").first()
        if plan is None or not plan.result.get("best"):
            raise UnsupportedModelError(
                "the partitioned candidate needs a partition plan from this run",
                hint="Start the run with the Partition stage as well.",
            )
        best = plan.result["best"]
        placement = plan.result["results"][best]["placement"]
        return make_candidate("partitioned", model, placement=placement)
    if name == "other":
        other = OnnxModel.objects.get(pk=options["other_model"], owner=stage.run.owner)
        return make_candidate(other.file.path, model)
    return make_candidate(name, model)


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    all_options = run.config.get("options", {})
    options = all_options.get("accuracy", {})
    inputs = None
    if options.get("inputs"):
        inputs = InputData.objects.get(pk=options["inputs"], owner=run.owner).file.path
    config = AccuracyConfig(
        inputs=inputs,
        seed=int(options.get("seed", 0)),
        distribution=options.get("distribution", "normal"),
        input_shapes={
            k: tuple(v) for k, v in all_options.get("analyze", {}).get("input_shapes", {}).items()
        },
    )
    model = load_model(run.model.file.path)
    candidate = _candidate(stage, options, model)
    return check_accuracy(model, candidate, config, progress=progress).to_dict()
