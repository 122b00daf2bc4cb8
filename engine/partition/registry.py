"""Options, the plan an algorithm returns, and the registry of algorithms by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ProgressFn
from engine.partition.problem import PartitionError, PartitionProblem


@dataclass(frozen=True)
class PartitionOptions:
    """Options of :func:`engine.partition.partition_model`; each algorithm reads its own.

    Exact (``hope-ilp``): ``time_limit_s`` for the whole solve, ``exact_max_ops`` the largest
    graph solved in one model, above which it is bisected into parts of fewer than ``nt`` ops
    with balance ``eps`` (thesis defaults 12 and 0.2), ``workers`` CP-SAT search workers.
    Heuristic (``hope-heuristic``): window ``k`` (``None``: 4 for 2 units, 3 for 3 or 4, else
    2, after the thesis), super-op merging of ops faster than ``merge_short_us`` (``None``: a
    tenth of the mean op latency; 0 disables it). ``blocks``: the ``key_ops`` it cuts at and
    ``refine_evaluations`` simulated moves at most. ``mobile-cloud``: ``mobile_unit``
    (``None``: the mobile unit that runs the whole model fastest).
    Every algorithm: ``objective`` (``latency``, ``energy`` or ``weighted`` with latency
    weight ``alpha``) and ``latency_cap_ms`` (``None``: no cap); see
    :mod:`engine.partition.objective`.
    ``graphturbo``: ``dsa_dtype``, the accelerator's compute type its tensors are planned
    at (the paper does not say which its chip ran; fp16 assumed).
    ``nn-stretch``: ``stretch_alpha`` (Eq. 4), ``stretch_beta`` (Eq. 5), the depth and
    width ``stretch_ratio_floor``, ``stretch_min_meet`` meeting points at least, and
    ``stretch_measure``: on a measured target, time the branches in onnxruntime (see
    :mod:`engine.partition.nnstretch.search`).
    ``little_gain_pct``: below this gain over the best single unit (in makespan; in energy
    under the energy and weighted objectives), the verdict says so.
    """

    time_limit_s: float = 10.0
    exact_max_ops: int = 40
    nt: int = 12
    eps: float = 0.2
    workers: int = 1
    seed: int = 0
    k: int | None = None
    merge_short_us: float | None = None
    key_ops: tuple[str, ...] = (
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Concat",
        "Add",
        "Sum",
    )
    refine_evaluations: int = 200
    objective: str = "latency"
    alpha: float = 0.5
    latency_cap_ms: float | None = None
    mobile_unit: str | None = None
    little_gain_pct: float = 5.0
    dsa_dtype: str = "fp16"
    stretch_alpha: float = 0.1
    stretch_beta: float = 1.1
    stretch_ratio_floor: float = 0.5
    stretch_min_meet: int = 2
    stretch_measure: bool = True

    def __post_init__(self) -> None:
        if self.time_limit_s <= 0 or self.nt < 2 or not 0 < self.eps < 1:
            raise PartitionError("time_limit_s must be > 0, nt >= 2 and 0 < eps < 1")
        if self.k is not None and not 1 <= self.k <= 8:
            raise PartitionError("k must be between 1 and 8")
        if self.objective not in ("latency", "energy", "weighted"):
            raise PartitionError("objective must be 'latency', 'energy' or 'weighted'")
        if not 0 <= self.alpha <= 1:
            raise PartitionError("alpha must be between 0 and 1")
        if self.latency_cap_ms is not None and not self.latency_cap_ms > 0:
            raise PartitionError("latency_cap_ms must be positive")
        if self.workers < 1:
            raise PartitionError("workers must be at least 1")


@dataclass(frozen=True)
class Plan:
    """What an algorithm decides: a unit per op and an order; the simulator does the rest.

    ``bound_us`` is a proven lower bound on the makespan when the algorithm has one (the
    exact solver), ``status`` its solver status, ``details`` algorithm-specific JSON.
    """

    placement: tuple[int, ...]
    order: tuple[int, ...]
    bound_us: float | None = None
    status: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)


class NoPlan(PartitionError):
    """An algorithm found no plan it can stand behind (say, no cut of the mobile-cloud split
    can be priced). The message says why; ``details`` what it tried."""

    code = "no_plan"

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.details = dict(details or {})


Algorithm = Callable[[PartitionProblem, PartitionOptions, ProgressFn], Plan]

_ALGORITHMS: dict[str, Algorithm] = {}
_PRICES_OWN_CUTS: set[str] = set()
SINGLE_PREFIX = "single:"


def register(name: str, *, prices_own_cuts: bool = False) -> Callable[[Algorithm], Algorithm]:
    """Register an algorithm under ``name``. Every algorithm gets a problem whose transfers
    can all be priced, except one registered with ``prices_own_cuts``: it is handed tensors
    of unknown size (:attr:`PartitionProblem.unpriced`) and must not move them."""

    def decorate(fn: Algorithm) -> Algorithm:
        _ALGORITHMS[name] = fn
        if prices_own_cuts:
            _PRICES_OWN_CUTS.add(name)
        return fn

    return decorate


def prices_own_cuts(name: str) -> bool:
    return name in _PRICES_OWN_CUTS


def algorithm_names() -> list[str]:
    """Registered algorithm names, graph planners included (``single:<unit>`` baselines are
    accepted besides these)."""
    return sorted([*_ALGORITHMS, *_GRAPH_PLANNERS])


GraphPlanner = Callable[..., dict]
"""``(graph, target, options, progress) -> result JSON``: an algorithm that plans on the
graph and the target itself rather than on a placement problem (GraphTurbo on a DSA).
One registered with ``uses_model`` also gets ``model=`` (the prepared ONNX model) and
``workdir=`` (where to write files, or ``None``); files it wrote are listed under the
result's ``_artifacts`` (kind -> path), which the stage takes out of the result."""

_GRAPH_PLANNERS: dict[str, GraphPlanner] = {}
_USES_MODEL: set[str] = set()


def register_graph_planner(
    name: str, *, uses_model: bool = False
) -> Callable[[GraphPlanner], GraphPlanner]:
    """Register a graph planner under ``name``; the partition stage runs it instead of the
    placement comparison when asked for it, or by default on a target it applies to."""

    def decorate(fn: GraphPlanner) -> GraphPlanner:
        _GRAPH_PLANNERS[name] = fn
        if uses_model:
            _USES_MODEL.add(name)
        return fn

    return decorate


def graph_planner(name: str) -> GraphPlanner | None:
    return _GRAPH_PLANNERS.get(name)


def planner_uses_model(name: str) -> bool:
    return name in _USES_MODEL


_FAMILIES: dict[str, Callable[[str], Algorithm]] = {}


def register_family(prefix: str) -> Callable[[Callable[[str], Algorithm]], Callable]:
    """Register algorithms named ``<prefix><argument>``: ``make(argument)`` builds one
    (``single:<unit>`` runs everything on that unit)."""

    def decorate(make: Callable[[str], Algorithm]) -> Callable[[str], Algorithm]:
        _FAMILIES[prefix] = make
        return make

    return decorate


def get_algorithm(name: str) -> Algorithm:
    for prefix, make in _FAMILIES.items():
        if name.startswith(prefix):
            return make(name[len(prefix) :])
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise PartitionError(
            f"unknown partitioning algorithm '{name}'",
            code="usage",
            hint=f"choose one of: {', '.join(algorithm_names())}, or single:<unit>",
        ) from None
