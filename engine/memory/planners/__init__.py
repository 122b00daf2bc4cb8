"""Memory planners, registered by name (see :mod:`.registry`).

Import order is registration order, which is the order reports list them in: the
baseline, the paper's shared-object planners, then the offset planners.
"""

# isort: skip_file
from engine.memory.planners import naive, greedy_objects, mincost_flow  # noqa: F401
from engine.memory.planners import greedy_by_size, greedy_by_breadth  # noqa: F401
from engine.memory.planners import best_fit_search  # noqa: F401
from engine.memory.planners.registry import (
    PLANNERS,
    Placement,
    PlannerInfo,
    PlannerOptions,
    PlannerSkipped,
    UnknownPlannerError,
    get_planner,
)

__all__ = [
    "PLANNERS",
    "Placement",
    "PlannerInfo",
    "PlannerOptions",
    "PlannerSkipped",
    "UnknownPlannerError",
    "get_planner",
]
