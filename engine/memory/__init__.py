"""Memory planning: tensor lifetimes, planners, the lower bound, a validator, order search
and the local-buffer fit. The entry point is :func:`plan_memory`."""

from engine.memory.levels import LevelConfig, LevelFit, fit_levels
from engine.memory.lifetimes import Buffer, LifetimeOptions, Lifetimes, TensorUse, build_lifetimes
from engine.memory.order import OrderSearch, search_order
from engine.memory.plan import MemoryConfig, MemoryReport, PlannerResult, plan_memory
from engine.memory.planners import PLANNERS, UnknownPlannerError
from engine.memory.validate import InvalidPlanError, validate_plan

__all__ = [
    "PLANNERS",
    "Buffer",
    "InvalidPlanError",
    "LevelConfig",
    "LevelFit",
    "LifetimeOptions",
    "Lifetimes",
    "MemoryConfig",
    "MemoryReport",
    "OrderSearch",
    "PlannerResult",
    "TensorUse",
    "UnknownPlannerError",
    "build_lifetimes",
    "fit_levels",
    "plan_memory",
    "search_order",
    "validate_plan",
]
