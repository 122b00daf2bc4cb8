"""Target profiles: schema, presets, the machine a worker runs on, and the cost model."""

from engine.targets.catalog import get_target, load_presets, load_profile_file
from engine.targets.costmodel import MODEL_NAME, CostModel, OpEstimate
from engine.targets.schema import (
    Link,
    Network,
    Power,
    ProfileError,
    TargetProfile,
    Unit,
    validate_profile,
)

__all__ = [
    "MODEL_NAME",
    "CostModel",
    "Link",
    "Network",
    "OpEstimate",
    "Power",
    "ProfileError",
    "TargetProfile",
    "Unit",
    "get_target",
    "load_presets",
    "load_profile_file",
    "validate_profile",
]
