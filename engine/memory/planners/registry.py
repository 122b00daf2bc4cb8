"""Planners by name. A planner places buffers (see :mod:`engine.memory.lifetimes`).

Each planner is a function ``plan(buffers, steps, options) -> Placement`` in a module of
its own, registered with :func:`register`. Shared-object planners also return the object
of every buffer; their offsets lay the objects end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from engine.errors import EngineError
from engine.memory.lifetimes import Buffer


@dataclass(frozen=True)
class PlannerOptions:
    """Budgets of the planners that search: wall time, and the size exact methods accept."""

    time_limit_s: float = 1.0
    exact_max_buffers: int = 1500
    seed: int = 0


@dataclass
class Placement:
    """Byte offset of every buffer in one arena of ``arena_bytes``.

    ``objects[i]`` is buffer ``i``'s shared object for shared-object planners (``None``
    for offset planners); ``object_sizes`` the size of each object.
    """

    offsets: list[int]
    arena_bytes: int
    objects: list[int] | None = None
    object_sizes: list[int] | None = None


PlanFn = Callable[[Sequence[Buffer], int, PlannerOptions], Placement]


@dataclass(frozen=True)
class PlannerInfo:
    name: str
    kind: str  # "objects" or "offsets"
    heuristic: bool
    plan: PlanFn
    summary: str


PLANNERS: dict[str, PlannerInfo] = {}


class UnknownPlannerError(EngineError):
    code = "unknown_planner"


class PlannerSkipped(EngineError):
    """A planner declines a problem (e.g. an exact method on too many buffers)."""

    code = "planner_skipped"


def register(name: str, *, kind: str, heuristic: bool = True) -> Callable[[PlanFn], PlanFn]:
    """Register ``plan`` under ``name``; the first docstring line becomes its summary."""

    def wrap(plan: PlanFn) -> PlanFn:
        summary = (plan.__doc__ or "").strip().splitlines()[0] if plan.__doc__ else ""
        PLANNERS[name] = PlannerInfo(name, kind, heuristic, plan, summary)
        return plan

    return wrap


def get_planner(name: str) -> PlannerInfo:
    try:
        return PLANNERS[name]
    except KeyError:
        known = ", ".join(PLANNERS)
        raise UnknownPlannerError(
            f"unknown memory planner '{name}'", hint=f"Known planners: {known}."
        ) from None


def objects_placement(objects: list[int], object_sizes: list[int]) -> Placement:
    """Lay shared objects end to end in one arena."""
    starts = [0, *accumulate(object_sizes)]
    return Placement(
        offsets=[starts[o] for o in objects],
        arena_bytes=starts[-1],
        objects=objects,
        object_sizes=object_sizes,
    )
