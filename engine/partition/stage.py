"""The partition stage's entry point: every algorithm on one problem, judged by one simulator.

The problem comes from the prepared model and the target's cost model; with a network, a
cloud unit joins it for the mobile-cloud split. The best valid plan's sub-models are run
in onnxruntime against the whole model, and kept as an artifact when there is a workdir.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from engine.contract import NO_INPUTS, NotApplicable, StageInputs, StageReport
from engine.errors import ProgressFn
from engine.graph.prepared import PreparedModel
from engine.partition.api import compare_algorithms
from engine.partition.options import PartitionStageOptions
from engine.partition.pareto import trade_off
from engine.partition.problem import PartitionError
from engine.partition.registry import PartitionOptions, graph_planner, planner_uses_model
from engine.partition.targets import problem_for_target
from engine.targets.catalog import get_target, load_presets
from engine.targets.schema import TargetProfile


class PartitionReport(StageReport):
    """The comparison (every algorithm's plan with its makespan and energy, the best for the
    objective, the verdict), the energy-vs-latency trade-off (``trade_off``) and the best
    plan's sub-models (``schedule``)."""

    @property
    def best(self) -> str | None:
        return self.details["best"]


def run(
    prepared: PreparedModel,
    target: TargetProfile,
    options: PartitionStageOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> PartitionReport:
    """Partition ``prepared`` across ``target``'s units. Raises :class:`NotApplicable` for a
    target with one unit and no cloud to offload to, unless a graph planner applies (on a
    DSA target GraphTurbo runs by default)."""
    planners = [a for a in options.algorithms if graph_planner(a)]
    if not options.algorithms and any(u.kind == "dsa" for u in target.units):
        planners = ["graphturbo"]
    if planners:
        return _run_graph_planners(prepared, target, options, planners, progress, inputs)
    if len(target.units) < 2 and options.network is None:
        raise NotApplicable(
            f"target '{target.name}' has one compute unit ({target.units[0].name}): there is "
            "nothing to partition",
            hint="Pick a target with several units (e.g. the phone SoC preset), or choose a "
            "network to consider offloading to a cloud server.",
        )
    cloud = cloud_target(options.cloud, target.name) if options.network else None
    progress(0.02, "pricing every op on every unit")
    problem = problem_for_target(prepared.graph, target, cloud=cloud, network=options.network)
    engine_options = PartitionOptions(
        time_limit_s=options.time_limit_s,
        objective=options.objective,
        alpha=options.alpha,
        latency_cap_ms=options.latency_cap_ms,
    )
    end = 0.65 if options.trade_off else 0.8
    details = compare_algorithms(
        problem,
        list(options.algorithms) or None,
        engine_options,
        progress=lambda f, m: progress(0.05 + (end - 0.05) * f, m),
    )
    if options.trade_off:
        details["trade_off"] = trade_off(
            problem,
            engine_options,
            details["results"],
            progress=lambda f, m: progress(end + (0.8 - end) * f, m),
        )
    details["notes"] = list(problem.notes)
    details["cloud"] = cloud.name if cloud is not None else None
    details["target"] = target.name
    best = details.get("best")
    artifacts = {}
    if best and (options.check_execution or inputs.workdir):
        from engine.partition.export import split_model

        progress(0.85, f"splitting the model by the {best} plan")
        subs = split_model(prepared.model, details["results"][best]["placement"])
        if options.check_execution:
            from engine.partition.execute import check_partitioned

            progress(0.9, "running the sub-models against the whole model (onnxruntime)")
            details["execution_check"] = check_partitioned(prepared.model, subs).to_dict()
        if inputs.workdir:
            folder = Path(inputs.workdir) / "submodels"
            subs.save(folder)
            archive = shutil.make_archive(
                str(Path(inputs.workdir) / f"submodels-{best}"), "zip", folder
            )
            artifacts["schedule"] = archive
    return PartitionReport(details, artifacts)


def _run_graph_planners(
    prepared: PreparedModel,
    target: TargetProfile,
    options: PartitionStageOptions,
    names: list[str],
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> PartitionReport:
    """Run planners that plan on the graph itself; each result under ``results``, as the
    placement comparison reports its algorithms. Files a planner writes into the workdir
    (``_artifacts`` of its result) become the stage's artifacts."""
    others = [a for a in options.algorithms if a not in names]
    if others:
        raise PartitionError(
            f"{', '.join(names)} plans on its own and cannot be compared with {', '.join(others)}",
            code="usage",
        )
    engine_options = PartitionOptions(
        time_limit_s=options.time_limit_s,
        stretch_alpha=options.stretch_alpha,
        stretch_beta=options.stretch_beta,
        stretch_ratio_floor=options.stretch_ratio_floor,
        stretch_min_meet=options.stretch_min_meet,
        stretch_measure=options.stretch_measure,
    )
    results, failed, artifacts = {}, {}, {}
    for name in names:
        extra = (
            {"model": prepared.model, "workdir": inputs.workdir} if planner_uses_model(name) else {}
        )
        try:
            results[name] = graph_planner(name)(
                prepared.graph, target, engine_options, progress, **extra
            )
            artifacts.update(results[name].pop("_artifacts", {}))
        except PartitionError as e:
            if e.code != "unknown_size":
                raise
            failed[name] = e.message
            continue
        if not results[name]["valid"]:
            failed[name] = results.pop(name)["reason"]
    best = next(iter(results), None)
    return PartitionReport(
        {
            "planned_on_graph": True,
            "target": target.name,
            "units": [u.name for u in target.units],
            "algorithms": {n: _summary(r) for n, r in results.items()},
            "results": results,
            "failed": failed,
            "invalid": [],
            "best": best,
            "best_makespan_ms": _summary(results[best]).get("makespan_ms") if best else None,
            "verdict": results[best]["verdict"]
            if best
            else f"no plan ({'; '.join(failed.values())})",
            "notes": [],
        },
        artifacts,
    )


def _summary(result: dict) -> dict:
    """A graph planner's line in ``algorithms``: its makespan and speedup when it compares
    with the best single unit, as placement plans do (NN-Stretch); GraphTurbo compares with
    one kernel per layer instead, which is not that speedup."""
    if "best_single_unit" not in result:
        return {"valid": True}
    return {
        "valid": True,
        "makespan_ms": result.get("latency_ms"),
        "speedup": result.get("speedup"),
        "solve_s": result.get("planning_s"),
    }


def cloud_target(name: str | None, mobile: str) -> TargetProfile:
    """The named cloud target, else the first preset that describes networks."""
    if name is not None:
        return get_target(name)
    for profile in load_presets():
        if profile.networks and profile.name != mobile:
            return profile
    raise NotApplicable("no cloud target with networks is available to offload to")
