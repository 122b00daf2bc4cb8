"""The memory stage's entry point: every planner against the lower bound, on the prepared
model; per unit after a partition of the same run; TVM's own allocation beside ours.

A tensor of unknown size is not planned and not counted as 0: the report lists it
(``unsized``) and says that the arena sizes and the bound cover only the other tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.contract import NO_INPUTS, StageInputs, StageReport
from engine.errors import Cancelled, EngineError, ProgressFn, error_line
from engine.graph.prepared import PreparedModel
from engine.memory.levels import LevelConfig
from engine.memory.options import MemoryOptions
from engine.memory.plan import MemoryConfig, plan_memory
from engine.targets.schema import TargetProfile, Unit


class MemoryStageReport(StageReport):
    """Arena sizes per planner against the lower bound, and the full plan's artifact."""

    @property
    def best(self) -> str | None:
        return self.details["best"]


def run(
    prepared: PreparedModel,
    target: TargetProfile | None,
    options: MemoryOptions,
    progress: ProgressFn,
    inputs: StageInputs = NO_INPUTS,
) -> MemoryStageReport:
    """Plan ``prepared``'s intermediate tensors; with a partition result in ``inputs``, also
    one plan per unit of its best plan."""
    units = {u.name: u for u in target.units} if target is not None else {}
    config = MemoryConfig(
        planners=options.planners,
        plan_inputs=options.plan_inputs,
        plan_outputs=options.plan_outputs,
        plan_params=options.plan_params,
        in_place=options.in_place,
        order_search=options.order_search,
        time_limit_s=options.time_limit_s,
        levels=_chosen_levels(options, units),
    )
    report = plan_memory(prepared.graph, config, progress=lambda f, m: progress(0.5 * f, m))
    full = report.to_dict(plans=True)
    artifacts = {}
    if inputs.workdir:
        path = Path(inputs.workdir) / "memory_plan.json"
        path.write_text(json.dumps(full))
        artifacts["memory_plan"] = str(path)
    # The run page draws the best plan; every planner's plan is in the artifact.
    result = report.to_dict(plans=False)
    if full.get("best"):
        result["plans"] = {full["best"]: full["plans"][full["best"]]}
    result["complete"] = not result["unsized"]
    if result["unsized"]:
        result.setdefault("warnings", []).append(
            f"{len(result['unsized'])} tensors have an unknown size and are not planned: the "
            "arena sizes and the lower bound cover the other tensors only (lower bounds)"
        )
    partition = inputs.results.get("partition")
    result["per_unit"] = _per_unit(prepared, partition, config, units, progress)
    if options.compare_tvm:
        result["tvm"] = _tvm(prepared, options, progress)
    return MemoryStageReport(result, artifacts)


def _chosen_levels(options: MemoryOptions, units: dict[str, Unit]) -> LevelConfig | None:
    """The local buffer the options name, else the first unit's that has one."""
    if options.local_buffer_bytes is not None:
        return LevelConfig(options.local_buffer_bytes, options.global_buffer_bytes)
    return next((lv for lv in map(_levels, units.values()) if lv), None)


def _levels(unit: Unit) -> LevelConfig | None:
    """GraphTurbo's local-buffer fit, for a unit with a local buffer."""
    if unit.local_buffer_bytes:
        return LevelConfig(
            local_buffer_bytes=unit.local_buffer_bytes,
            global_buffer_bytes=unit.global_buffer_bytes,
        )
    return None


def _per_unit(
    prepared: PreparedModel,
    partition: dict | None,
    config: MemoryConfig,
    units: dict[str, Unit],
    progress: ProgressFn,
) -> dict | None:
    """One plan per compute unit of the run's best partition: each unit's arena holds only
    the tensors of its own sub-models."""
    if not partition or not partition.get("best"):
        return None
    placement = partition["results"][partition["best"]].get("placement")
    if placement is None:  # a graph planner's plan (GraphTurbo, NN-Stretch): no per-op units
        return None
    from engine.partition.export import split_model

    subs = split_model(prepared.model, placement)
    per_unit: dict[str, dict] = {}
    for k, sub in enumerate(subs.submodels):
        progress(0.5 + 0.2 * k / len(subs.submodels), f"planning the {sub.unit} sub-model")
        unit = units.get(sub.unit)
        unit_config = MemoryConfig(
            in_place=config.in_place,
            plan_params=config.plan_params,
            order_search=config.order_search,
            levels=_levels(unit) if unit is not None else None,
        )
        report = plan_memory(sub.model, unit_config).to_dict(plans=False)
        entry = per_unit.setdefault(
            sub.unit, {"submodels": 0, "arena_bytes": 0, "lower_bound_bytes": 0, "levels": []}
        )
        # Sub-models of one unit run one after another: the unit needs the largest arena.
        entry["submodels"] += 1
        if report["best"] is not None:
            entry["arena_bytes"] = max(entry["arena_bytes"], report["planners"][report["best"]])
        entry["lower_bound_bytes"] = max(entry["lower_bound_bytes"], report["lower_bound_bytes"])
        if report["levels"]:
            entry["levels"].append(report["levels"])
    return {"plan": partition["best"], "units": per_unit}


def _tvm(prepared: PreparedModel, options: MemoryOptions, progress: ProgressFn) -> dict:
    """TVM's static allocation total of the same model, next to ours on its tensors; a
    model TVM cannot take is a note in the result, not a failed stage."""
    from engine.memory.tvm import tvm_comparison

    try:
        return tvm_comparison(
            prepared.model,
            prepared.input_shapes,
            time_limit_s=options.time_limit_s,
            progress=lambda f, m: progress(0.7 + 0.3 * f, m),
        )
    except Cancelled:
        raise
    except EngineError as e:
        return {"failed": e.message}
    except Exception as e:  # noqa: BLE001 - TVM raises its own errors; the plan above stands
        return {"failed": f"{type(e).__name__}: {error_line(e, 300)}"}
