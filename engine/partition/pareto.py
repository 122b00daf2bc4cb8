"""The energy-vs-latency trade-off of a model on a target: the Pareto front of plans.

DNNTune reports latency-first and energy-first as two answers (thesis 3.5.2, L788-808);
between them lie plans that give up a little speed for a lot of energy, or the reverse.
The front is found by a sweep: the fast algorithms of :data:`SWEPT` run under the weighted
objective for latency weights from 1 (latency-first) to 0 (energy-first)
(:mod:`engine.partition.objective`), and every plan they return, with the compared
algorithms' own plans, is a candidate (plans of equal makespan and energy count once). A candidate is on the front when no other is at
least as fast and as frugal and strictly better in one. Every number is predicted by the
shared simulator (makespan) and :mod:`engine.partition.energy` (energy), not measured.

The exact solver takes part only on graphs it solves whole (``exact_max_ops``), with at
most ``_ILP_SWEEP_S`` per weight, so that the sweep stays within seconds; a sweep point it
cannot finish in time is its best plan so far, still a true plan of the problem. ``blocks``
is not swept (its compared plan still is a candidate): its refinement simulates up to
``refine_evaluations`` plans per weight, 4 to 7 s per weight on DenseNet-121's 668 ops on
the phone preset (measured here), against well under a second for the others.
"""

from __future__ import annotations

from dataclasses import replace

from engine.errors import ProgressFn
from engine.partition.api import partition_model
from engine.partition.energy import MODEL, energy_unknown_reason
from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.registry import PartitionOptions

WEIGHTS = (1.0, 0.9, 0.75, 0.5, 0.25, 0.1, 0.0)
"""Latency weights of the sweep (1: latency-first, 0: energy-first)."""
SWEPT = ("heft", "hope-heuristic", "chain-dp", "hope-ilp", "single-unit")
_ILP_SWEEP_S = 2.0
_TOLERANCE = 1e-9


def trade_off(
    problem: PartitionProblem,
    options: PartitionOptions,
    results: dict[str, dict],
    progress: ProgressFn | None = None,
) -> dict:
    """The Pareto front of (makespan, energy) over a sweep of weights with the algorithms of
    :data:`SWEPT`, plus ``results`` (each compared algorithm's result JSON). Without power
    figures the result says so (``available`` false, ``reason``)."""
    reason = energy_unknown_reason(problem)
    if reason is not None or problem.unpriced:
        return {
            "available": False,
            "reason": reason or "some transfers cannot be priced",
            "points": [],
            "front": [],
            "plans": {},
        }
    swept = [n for n in SWEPT if n != "hope-ilp" or _exact_whole(problem, options)]
    points = [
        _point(name, r["makespan_ms"], r["energy_mj"], "compared")
        for name, r in results.items()
        if r.get("makespan_ms") is not None and r.get("energy_mj") is not None
    ]
    steps = len(WEIGHTS) * max(len(swept), 1)
    for w, alpha in enumerate(WEIGHTS):
        chosen = _weighted(options, alpha)
        for a, name in enumerate(swept):
            if progress is not None:
                progress((w * len(swept) + a) / steps, f"trade-off: {name} at weight {alpha:g}")
            if name == "hope-ilp":
                chosen = replace(chosen, time_limit_s=min(options.time_limit_s, _ILP_SWEEP_S))
            try:
                result = partition_model(problem, name, chosen)
            except PartitionError:
                continue  # an algorithm that does not apply here is in the comparison already
            if result.valid and result.schedule.energy_mj is not None:
                makespan, energy = result.makespan_ms, result.schedule.energy_mj
                points.append(_point(name, round(makespan, 6), round(energy, 6), alpha))
    points = _distinct(points)
    front = sorted(
        (p for p in points if not _dominated(p, points)),
        key=lambda p: (p["makespan_ms"], p["energy_mj"]),
    )
    plans = {
        name: {
            "makespan_ms": r["makespan_ms"],
            "energy_mj": r["energy_mj"],
            "on_front": not _dominated(
                {"makespan_ms": r["makespan_ms"], "energy_mj": r["energy_mj"]}, points
            ),
        }
        for name, r in results.items()
        if r.get("makespan_ms") is not None and r.get("energy_mj") is not None
    }
    return {
        "available": True,
        "reason": None,
        "method": "weighted-objective sweep over latency weights "
        + ", ".join(f"{w:g}" for w in WEIGHTS)
        + f" with {', '.join(swept) or 'no algorithm'}, plus the compared plans",
        "energy_model": MODEL,
        "predicted": True,
        "points": points,
        "front": front,
        "plans": plans,
    }


def _weighted(options: PartitionOptions, alpha: float) -> PartitionOptions:
    """The options of one sweep point: the extremes are the plain objectives."""
    objective = "latency" if alpha == 1.0 else "energy" if alpha == 0.0 else "weighted"
    return replace(options, objective=objective, alpha=alpha, latency_cap_ms=None)


def _exact_whole(problem: PartitionProblem, options: PartitionOptions) -> bool:
    return problem.n <= options.exact_max_ops


def _point(name, makespan_ms, energy_mj, weight) -> dict:
    return {"algorithm": name, "weight": weight, "makespan_ms": makespan_ms, "energy_mj": energy_mj}


def _distinct(points: list[dict]) -> list[dict]:
    """One point per distinct (makespan, energy) (the first found keeps its label)."""
    seen, out = set(), []
    for p in points:
        key = (round(p["makespan_ms"], 6), round(p["energy_mj"], 6))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _dominated(p: dict, points: list[dict]) -> bool:
    t, e = p["makespan_ms"], p["energy_mj"]
    for q in points:
        qt, qe = q["makespan_ms"], q["energy_mj"]
        no_worse = qt <= t * (1 + _TOLERANCE) and qe <= e * (1 + _TOLERANCE)
        better = qt < t * (1 - _TOLERANCE) or qe < e * (1 - _TOLERANCE)
        if no_worse and better:
            return True
    return False
