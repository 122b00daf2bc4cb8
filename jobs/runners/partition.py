from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import onnx

from engine.errors import ProgressFn, UnsupportedModelError
from engine.graph import analyze_model
from engine.partition import PartitionOptions, compare_algorithms
from engine.partition.execute import check_partitioned
from engine.partition.export import split_model
from engine.partition.targets import problem_for_target
from engine.targets.catalog import get_target
from engine.targets.schema import validate_profile
from jobs.artifacts import save_artifact
from workbench.models import Artifact, StageResult


def _scaled(progress: ProgressFn, start: float, end: float) -> ProgressFn:
    return lambda fraction, message: progress(start + (end - start) * fraction, message)


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    options = run.config.get("options", {}).get("partition", {})
    profile = validate_profile(run.target.profile)
    if len(profile.units) < 2 and not options.get("cloud"):
        raise UnsupportedModelError(
            f"target '{profile.name}' has one compute unit: there is nothing to partition",
            hint="Pick a modeled target with several units (e.g. the phone SoC preset), "
            "or name a cloud target and a network for the mobile-cloud split.",
        )
    progress(0.02, "reading the graph")
    model = onnx.load(run.model.file.path)
    graph = analyze_model(model).graph
    cloud = get_target(options["cloud"]) if options.get("cloud") else None
    problem = problem_for_target(
        graph, profile, cloud=cloud, network=options.get("network") if cloud else None
    )
    report = compare_algorithms(
        problem,
        options.get("algorithms"),
        PartitionOptions(time_limit_s=float(options.get("time_limit_s", 20.0))),
        progress=_scaled(progress, 0.05, 0.8),
    )
    report["notes"] = list(problem.notes)
    best = report.get("best")
    if best:
        progress(0.85, f"splitting the model by the {best} plan")
        placement = report["results"][best]["placement"]
        subs = split_model(model, placement)
        progress(0.9, "running the sub-models against the whole model (onnxruntime)")
        report["execution_check"] = check_partitioned(model, subs).to_dict()
        with tempfile.TemporaryDirectory() as tmp:
            subs.save(Path(tmp) / "submodels")
            archive = shutil.make_archive(
                str(Path(tmp) / f"submodels-{best}"), "zip", Path(tmp) / "submodels"
            )
            save_artifact(stage, Artifact.Kind.SCHEDULE, Path(archive))
    return report
