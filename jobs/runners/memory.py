from __future__ import annotations

import json
import tempfile
from pathlib import Path

import onnx

from engine.errors import Cancelled, ProgressFn
from engine.memory import LevelConfig, MemoryConfig, plan_memory
from engine.partition.export import split_model
from jobs.artifacts import save_artifact
from workbench.models import StageResult


def _levels(unit: dict | None) -> LevelConfig | None:
    """GraphTurbo's local-buffer fit, for a unit with a local buffer."""
    if unit and unit.get("local_buffer_bytes"):
        return LevelConfig(
            local_buffer_bytes=unit["local_buffer_bytes"],
            global_buffer_bytes=unit.get("global_buffer_bytes"),
        )
    return None


def _per_unit(stage: StageResult, config: MemoryConfig, units: dict, progress) -> dict | None:
    """One plan per compute unit when this run partitioned the model: each unit's arena
    holds only the tensors of its own sub-model."""
    plan = stage.run.stages.filter(stage="partition", status="succeeded").first()
    if plan is None or not plan.result.get("best"):
        return None
    best = plan.result["best"]
    subs = split_model(
        onnx.load(stage.run.model.file.path), plan.result["results"][best]["placement"]
    )
    per_unit = {}
    for k, sub in enumerate(subs.submodels):
        progress(0.5 + 0.2 * k / len(subs.submodels), f"planning the {sub.unit} sub-model")
        unit_config = MemoryConfig(
            in_place=config.in_place,
            plan_params=config.plan_params,
            order_search=config.order_search,
            levels=_levels(units.get(sub.unit)),
        )
        report = plan_memory(sub.model, unit_config).to_dict(plans=False)
        entry = per_unit.setdefault(
            sub.unit, {"submodels": 0, "arena_bytes": 0, "lower_bound_bytes": 0, "levels": []}
        )
        # Sub-models of one unit run one after another: the unit needs the largest arena.
        entry["submodels"] += 1
        entry["arena_bytes"] = max(entry["arena_bytes"], report["planners"][report["best"]])
        entry["lower_bound_bytes"] = max(entry["lower_bound_bytes"], report["lower_bound_bytes"])
        if report["levels"]:
            entry["levels"].append(report["levels"])
    return {"plan": best, "units": per_unit}


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    options = run.config.get("options", {}).get("memory", {})
    units = {u["name"]: u for u in run.target.profile.get("units", [])}
    config = MemoryConfig(
        in_place=bool(options.get("in_place", False)),
        plan_params=bool(options.get("plan_params", False)),
        order_search=bool(options.get("order_search", True)),
        levels=next((lv for lv in map(_levels, units.values()) if lv), None),
    )
    report = plan_memory(run.model.file.path, config, progress=lambda f, m: progress(0.5 * f, m))
    full = report.to_dict(plans=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_plan.json"
        path.write_text(json.dumps(full))
        save_artifact(stage, "memory_plan", path)
    # The run page draws the best plan; every planner's plan is in the artifact.
    result = report.to_dict(plans=False)
    if full.get("best"):
        result["plans"] = {full["best"]: full["plans"][full["best"]]}
    result["per_unit"] = _per_unit(stage, config, units, progress)
    if options.get("compare_tvm", True):
        result["tvm"] = _tvm(run, progress)
    return result


def _tvm(run, progress: ProgressFn) -> dict:
    """TVM's static allocation total of the same model, next to ours on its tensors; a
    model TVM cannot take is a note in the result, not a failed stage."""
    from engine.fusion.memory import tvm_comparison

    shapes = {
        k: tuple(v)
        for k, v in run.config.get("options", {}).get("analyze", {}).get("input_shapes", {}).items()
    }
    try:
        return tvm_comparison(
            run.model.file.path, shapes, progress=lambda f, m: progress(0.7 + 0.3 * f, m)
        )
    except Cancelled:
        raise
    except Exception as e:  # noqa: BLE001 - TVM raises its own errors; the plan above stands
        return {"failed": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
