"""The bundled target presets and lookup of a target by name or file.

``host`` is built from this machine (:mod:`engine.targets.host`, a measured target); the
modeled presets are JSON documents under ``presets/``, every number with its citation.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.errors import EngineError
from engine.targets.host import host_target_profile
from engine.targets.schema import TargetProfile, validate_profile

PRESET_DIR = Path(__file__).parent / "presets"


def load_presets() -> list[TargetProfile]:
    """All presets, validated: ``host`` first, then the modeled ones by name."""
    presets = [validate_profile(host_target_profile())]
    for path in sorted(PRESET_DIR.glob("*.json")):
        presets.append(load_profile_file(path))
    return presets


def load_profile_file(path: str | Path) -> TargetProfile:
    """Read and validate a profile from a JSON file."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise EngineError(f"target profile file not found: {path}", code="unknown_target") from e
    except json.JSONDecodeError as e:
        raise EngineError(
            f"target profile {path.name} is not valid JSON: {e}", code="invalid_target"
        ) from e
    return validate_profile(document)


def get_target(name_or_path: str) -> TargetProfile:
    """A preset by name, or else a profile JSON file by path."""
    for profile in load_presets():
        if profile.name == name_or_path:
            return profile
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        return load_profile_file(name_or_path)
    names = ", ".join(p.name for p in load_presets())
    raise EngineError(
        f"unknown target '{name_or_path}'",
        code="unknown_target",
        hint=f"Use one of: {names}, or the path of a profile .json file.",
    )
