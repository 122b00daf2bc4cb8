from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engine.errors import ProgressFn
from engine.memory import LevelConfig, MemoryConfig, plan_memory
from jobs.artifacts import save_artifact
from workbench.models import StageResult


def _levels(profile: dict) -> LevelConfig | None:
    """GraphTurbo's local-buffer fit, for targets whose units have a local buffer."""
    for unit in profile.get("units", []):
        if unit.get("local_buffer_bytes"):
            return LevelConfig(
                local_buffer_bytes=unit["local_buffer_bytes"],
                global_buffer_bytes=unit.get("global_buffer_bytes"),
            )
    return None


def run(stage: StageResult, progress: ProgressFn) -> dict:
    run = stage.run
    options = run.config.get("options", {}).get("memory", {})
    config = MemoryConfig(
        in_place=bool(options.get("in_place", False)),
        plan_params=bool(options.get("plan_params", False)),
        order_search=bool(options.get("order_search", True)),
        levels=_levels(run.target.profile),
    )
    report = plan_memory(run.model.file.path, config, progress=progress)
    full = report.to_dict(plans=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memory_plan.json"
        path.write_text(json.dumps(full))
        save_artifact(stage, "memory_plan", path)
    # The run page draws the best plan; every planner's plan is in the artifact.
    result = report.to_dict(plans=False)
    if full.get("best"):
        result["plans"] = {full["best"]: full["plans"][full["best"]]}
    return result
