"""The memory-plan stage: lifetimes, order search, every planner, lower bound, validation.

Follows tflite_gpu section 2.7 (lifetimes from a topological order; naive, greedy and
min-cost-flow shared objects; the later offset planners) and adds an order search, our
own offset planner and, for targets with a local buffer, GraphTurbo's level fit.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from engine.errors import EngineError, ProgressFn
from engine.graph import analyze_model
from engine.graph.ir import Graph
from engine.graph.loader import ModelSource
from engine.memory.levels import LevelConfig, LevelFit, fit_levels
from engine.memory.lifetimes import LifetimeOptions, Lifetimes, build_lifetimes
from engine.memory.order import OrderSearch, search_order
from engine.memory.planners import (
    PLANNERS,
    Placement,
    PlannerInfo,
    PlannerOptions,
    PlannerSkipped,
    get_planner,
)
from engine.memory.validate import InvalidPlanError, validate_plan


@dataclass(frozen=True)
class MemoryConfig:
    """Options of :func:`plan_memory`.

    ``planners`` names the planners to run (empty: all registered). ``plan_inputs``,
    ``plan_outputs`` and ``plan_params`` put graph inputs, outputs and weights in the
    arena too; ``in_place`` lets elementwise ops overwrite a dying input. ``time_limit_s``
    bounds each searching planner; ``exact_max_buffers`` the size exact planners accept.
    ``levels`` adds GraphTurbo's local-buffer fit.
    """

    planners: tuple[str, ...] = ()
    plan_inputs: bool = False
    plan_outputs: bool = False
    plan_params: bool = False
    in_place: bool = False
    order_search: bool = True
    time_limit_s: float = 1.0
    exact_max_buffers: int = 1500
    levels: LevelConfig | None = None

    def lifetime_options(self) -> LifetimeOptions:
        return LifetimeOptions(self.plan_inputs, self.plan_outputs, self.plan_params, self.in_place)


@dataclass
class PlannerResult:
    """One planner's plan: tensor -> offset (and shared object), arena size, timing."""

    name: str
    kind: str
    arena_bytes: int | None
    time_s: float
    valid: bool
    offsets: dict[str, int] = field(default_factory=dict)
    objects: dict[str, int] | None = None
    error: str | None = None
    """Why there is no plan: declined (too large) or rejected by the validator."""


@dataclass
class MemoryReport:
    """Result of :func:`plan_memory`."""

    lifetimes: Lifetimes
    order_search: OrderSearch | None
    planners: dict[str, PlannerResult]
    node_names: list[str]
    levels: LevelFit | None
    config: MemoryConfig
    planning_s: float

    @property
    def lower_bound_bytes(self) -> int:
        return self.lifetimes.lower_bound()

    @property
    def valid(self) -> bool:
        """True when every plan made passed the validator."""
        return all(r.valid for r in self.planners.values() if r.arena_bytes is not None)

    @property
    def best(self) -> str | None:
        """The valid planner with the smallest arena (the earlier registered on ties)."""
        made = [r for r in self.planners.values() if r.valid and r.arena_bytes is not None]
        return min(made, key=lambda r: r.arena_bytes).name if made else None

    def to_dict(self, *, plans: bool = True) -> dict:
        """The stored result JSON; ``plans=False`` leaves out the per-tensor plans."""
        lt, lower = self.lifetimes, self.lower_bound_bytes
        live = lt.live_bytes()
        made = {n: r for n, r in self.planners.items() if r.arena_bytes is not None}
        search = self.order_search
        result = {
            "lower_bound_bytes": lower,
            "planners": {n: r.arena_bytes for n, r in made.items()},
            "best": self.best,
            "valid": self.valid,
            "ratios": {
                n: round(r.arena_bytes / lower, 6) if lower else 1.0 for n, r in made.items()
            },
            "planner_kinds": {n: r.kind for n, r in self.planners.items()},
            "planner_time_s": {n: round(r.time_s, 6) for n, r in self.planners.items()},
            "errors": {n: r.error for n, r in self.planners.items() if r.error},
            "original_lower_bound_bytes": search.original_peak_bytes if search else lower,
            "order_gain_bytes": search.gain_bytes if search else 0,
            "order_method": search.method if search else "original",
            "order_tried": dict(search.tried) if search else {},
            "order": [self.node_names[i] for i in lt.order],
            "steps": lt.steps,
            "peak_step": live.index(lower) if live else None,
            "live_bytes": live,
            "tensors": [
                {
                    "name": u.name,
                    "size": u.size,
                    "first": u.first,
                    "last": u.last,
                    "producer": u.producer,
                    "consumers": list(u.consumers),
                }
                for u in lt.uses.values()
            ],
            "in_place": [list(pair) for pair in lt.aliases],
            "unsized": list(lt.unsized),
            "levels": self.levels.to_dict() if self.levels else None,
            "config": asdict(self.config),
            "planning_s": round(self.planning_s, 4),
        }
        if plans:
            result["plans"] = {n: _plan_entries(lt, r) for n, r in made.items()}
        return result


def plan_memory(
    source: Graph | ModelSource,
    config: MemoryConfig = MemoryConfig(),
    progress: ProgressFn | None = None,
) -> MemoryReport:
    """Plan the memory of a model's tensors with every requested planner.

    ``source`` is a graph from :func:`engine.graph.analyze_model`, or anything that
    function accepts (path, bytes, ``onnx.ModelProto``). Every plan is checked by
    :func:`engine.memory.validate.validate_plan`; a plan that fails is reported with
    ``valid: false`` and never chosen as best. Raises
    :class:`~engine.memory.planners.UnknownPlannerError` for an unknown planner name and
    the analysis errors for a bad model.
    """
    started = time.perf_counter()
    report = progress or (lambda fraction, message: None)
    names = config.planners or tuple(PLANNERS)
    infos = [get_planner(n) for n in names]
    graph = source if isinstance(source, Graph) else analyze_model(source).graph

    report(0.05, "tensor lifetimes")
    options = config.lifetime_options()
    search = None
    if config.order_search:
        report(0.1, "searching a memory-aware execution order")
        search, lifetimes = search_order(graph, options)
    else:
        lifetimes = build_lifetimes(graph, None, options)

    planner_options = PlannerOptions(config.time_limit_s, config.exact_max_buffers)
    results = {}
    for k, info in enumerate(infos):
        report(0.2 + 0.7 * k / len(infos), f"planner {info.name}")
        results[info.name] = _run_planner(info, lifetimes, planner_options)

    levels = None
    if config.levels is not None:
        report(0.92, "fitting the local buffer")
        levels = fit_levels(graph, lifetimes, config.levels)
    report(1.0, "memory plan done")
    return MemoryReport(
        lifetimes=lifetimes,
        order_search=search,
        planners=results,
        node_names=[n.name for n in graph.nodes],
        levels=levels,
        config=config,
        planning_s=time.perf_counter() - started,
    )


def _run_planner(info: PlannerInfo, lifetimes: Lifetimes, options: PlannerOptions) -> PlannerResult:
    buffers = lifetimes.buffers
    started = time.perf_counter()
    try:
        placement = info.plan(buffers, lifetimes.steps, options)
    except PlannerSkipped as e:
        elapsed = time.perf_counter() - started
        return PlannerResult(info.name, info.kind, None, elapsed, True, error=e.message)
    elapsed = time.perf_counter() - started
    offsets, objects = _per_tensor(lifetimes, placement)
    result = PlannerResult(info.name, info.kind, placement.arena_bytes, elapsed, True, offsets)
    result.objects = objects
    try:
        validate_plan(lifetimes, offsets, placement.arena_bytes, objects, placement.object_sizes)
    except InvalidPlanError as e:
        result.valid, result.error = False, e.message
    return result


def _per_tensor(
    lifetimes: Lifetimes, placement: Placement
) -> tuple[dict[str, int], dict[str, int] | None]:
    if len(placement.offsets) != len(lifetimes.buffers):
        raise EngineError("a planner returned a placement of the wrong length", code="internal")
    offsets, objects = {}, None if placement.objects is None else {}
    for i, buffer in enumerate(lifetimes.buffers):
        for name in buffer.tensors:
            offsets[name] = placement.offsets[i]
            if objects is not None:
                objects[name] = placement.objects[i]
    return offsets, objects


def _plan_entries(lifetimes: Lifetimes, result: PlannerResult) -> list[dict]:
    entries = []
    for u in lifetimes.uses.values():
        entry = {
            "tensor": u.name,
            "offset": result.offsets[u.name],
            "size": u.size,
            "first": u.first,
            "last": u.last,
        }
        if result.objects is not None:
            entry["object"] = result.objects[u.name]
        entries.append(entry)
    return entries
