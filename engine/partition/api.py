"""The partition stage's entry points: run one algorithm, or compare several fairly."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.errors import ProgressFn
from engine.partition.baselines import single_unit_makespans
from engine.partition.energy import MODEL as ENERGY_MODEL
from engine.partition.energy import energy_unknown_reason
from engine.partition.objective import objective_for
from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.ranks import lower_bound_us
from engine.partition.registry import (
    NoPlan,
    PartitionOptions,
    Plan,
    get_algorithm,
    prices_own_cuts,
)
from engine.partition.simulator import InvalidPlan, Schedule, checked_schedule, simulate


@dataclass
class PartitionResult:
    """One algorithm's plan, its simulated schedule and how it compares to one unit alone.

    ``plan`` and ``schedule`` are ``None`` when the algorithm found no plan (``reason`` says
    why) or made one that failed validation (``errors`` lists the violations: a bug, never
    shown as a result).
    """

    algorithm: str
    plan: Plan | None
    schedule: Schedule | None
    solve_s: float
    single_unit_ms: dict[str, float]
    errors: list[str] = field(default_factory=list)
    reason: str | None = None
    details: dict = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.schedule is not None and not self.errors

    @property
    def makespan_ms(self) -> float | None:
        return None if self.schedule is None else self.schedule.makespan_us / 1e3

    @property
    def best_single_unit(self) -> str | None:
        units = self.single_unit_ms
        return min(units, key=units.__getitem__) if units else None

    @property
    def best_single_unit_ms(self) -> float | None:
        unit = self.best_single_unit
        return None if unit is None else self.single_unit_ms[unit]

    @property
    def gap(self) -> float | None:
        """``(makespan - bound) / makespan`` for an algorithm that proves a bound."""
        if self.plan is None or self.schedule is None:
            return None
        bound = self.plan.bound_us
        if bound is None or self.schedule.makespan_us <= 0:
            return None
        return max(0.0, (self.schedule.makespan_us - bound) / self.schedule.makespan_us)

    def to_dict(self) -> dict:
        """The result JSON (ARCHITECTURE 5b ``partition`` keys and the full schedule); without
        a plan, ``"plan": null`` and the ``reason``."""
        if self.plan is None or self.schedule is None:
            return {
                "algorithm": self.algorithm,
                "plan": None,
                "reason": self.reason,
                "valid": False,
                "errors": self.errors[:20],
                "makespan_ms": None,
                "energy_mj": None,
                "best_single_unit_ms": _round(self.best_single_unit_ms),
                "best_single_unit": self.best_single_unit,
                "single_unit_ms": {u: _round(v) for u, v in self.single_unit_ms.items()},
                "speedup": None,
                "solve_s": round(self.solve_s, 4),
                "status": None,
                "details": dict(self.details),
            }
        problem, s = self.schedule.problem, self.schedule
        units, ops = problem.units, problem.ops
        best = self.best_single_unit_ms
        first_reader: dict[tuple[int, int], str] = {}
        for i in s.order:
            for k in problem.in_tensors[i]:
                first_reader.setdefault((k, s.placement[i]), ops[i].name)
        return {
            "algorithm": self.algorithm,
            "makespan_ms": _round(self.makespan_ms),
            "best_single_unit_ms": _round(best),
            "best_single_unit": self.best_single_unit,
            "single_unit_ms": {u: _round(v) for u, v in self.single_unit_ms.items()},
            "speedup": _round(best / self.makespan_ms) if best and self.makespan_ms else None,
            "solve_s": round(self.solve_s, 4),
            "valid": self.valid,
            "errors": self.errors[:20],
            "energy_mj": _round(s.energy_mj),
            "energy": s.energy.to_dict(),
            "gap": None if self.gap is None else round(self.gap, 4),
            "bound_ms": _round(None if self.plan.bound_us is None else self.plan.bound_us / 1e3),
            "status": self.plan.status,
            "units": list(units),
            "placement": {ops[i].name: units[u] for i, u in enumerate(s.placement)},
            "order": [ops[i].name for i in s.order],
            "timeline": [
                {
                    "op": ops[i].name,
                    "op_type": ops[i].op_type,
                    "unit": units[s.placement[i]],
                    "start_us": _round(s.start_us[i]),
                    "finish_us": _round(s.finish_us[i]),
                }
                for i in s.order
            ],
            "transfers": [
                {
                    "tensor": problem.tensors[t.tensor].name,
                    "src": "<input>" if t.src_op is None else ops[t.src_op].name,
                    "dst": first_reader.get((t.tensor, t.dst_unit), "<output>"),
                    "bytes": t.bytes,
                    "start_us": _round(t.start_us),
                    "finish_us": _round(t.finish_us),
                    "link": f"{units[t.src_unit]}->{units[t.dst_unit]}",
                }
                for t in s.transfers
            ],
            "unit_busy_us": {units[u]: _round(b) for u, b in enumerate(s.unit_busy_us)},
            "details": dict(self.plan.details),
        }


def partition_model(
    problem: PartitionProblem,
    algorithm: str,
    options: PartitionOptions | None = None,
    progress: ProgressFn | None = None,
) -> PartitionResult:
    """Run ``algorithm`` on ``problem``, simulate and validate its plan.

    Raises :class:`PartitionError` for an unknown algorithm, one that does not apply
    (``mobile-cloud`` without a network), or a problem it cannot price (a tensor of unknown
    size that may cross units); a :class:`~engine.errors.Cancelled` raised by ``progress``
    propagates. An algorithm that finds no plan, or makes one that fails validation, gives a
    result without a plan and the reason.
    """
    options = options or PartitionOptions()
    run = get_algorithm(algorithm)
    if not prices_own_cuts(algorithm):
        problem.require_priced()
    if progress is not None:
        progress(0.0, f"partitioning with {algorithm}")
    singles = {u: v / 1e3 for u, v in single_unit_makespans(problem).items()}
    started = time.perf_counter()
    try:
        plan = run(problem, options, progress)
        schedule = checked_schedule(problem, plan.placement, plan.order, algorithm)
    except NoPlan as e:
        elapsed = time.perf_counter() - started
        return PartitionResult(
            algorithm, None, None, elapsed, singles, reason=e.message, details=e.details
        )
    except InvalidPlan as e:  # logged where it was caught; a bug, so no plan is shown
        elapsed = time.perf_counter() - started
        reason = f"internal error, the plan is not shown: {e.message}"
        return PartitionResult(algorithm, None, None, elapsed, singles, e.errors, reason)
    solve_s = time.perf_counter() - started
    if progress is not None:
        progress(1.0, f"{algorithm}: {schedule.makespan_us / 1e3:.3f} ms")
    return PartitionResult(algorithm, plan, schedule, solve_s, singles)


DEFAULT_COMPARISON = ("heft", "hope-heuristic", "chain-dp", "blocks", "hope-ilp", "mobile-cloud")


def compare_algorithms(
    problem: PartitionProblem,
    names: Sequence[str] | None = None,
    options: PartitionOptions | None = None,
    progress: ProgressFn | None = None,
) -> dict:
    """Run several algorithms on one problem and report them side by side.

    The report holds each algorithm's result JSON, its speedup over the best single unit and
    its gap to the best lower bound found (the exact solver's, or a simple bound), its
    predicted energy (``energy_mj``, ``None`` with ``energy_unknown`` saying why), the best
    plan for ``options.objective`` (latency-first: the shortest, ties to the least energy),
    and a verdict that says plainly when partitioning gains little. Only validated
    plans are compared: an algorithm without one is in ``failed`` with the reason, and in
    ``invalid`` too when its plan failed validation (a bug).
    """
    options = options or PartitionOptions()
    objective = objective_for(problem, options) if not problem.unpriced else None
    if names is None:
        names = [n for n in DEFAULT_COMPARISON if n != "mobile-cloud" or problem.network]
    results: dict[str, dict] = {}
    failures: dict[str, str] = {}
    invalid: list[str] = []
    for k, name in enumerate(names):
        step = _scaled(progress, k / len(names), (k + 1) / len(names))
        try:
            result = partition_model(problem, name, options, step)
        except PartitionError as e:
            failures[name] = e.message
            continue
        if not result.valid:  # no plan, or one that failed validation: never compared
            failures[name] = result.reason or "no plan"
            if result.errors:
                invalid.append(name)
            continue
        results[name] = result.to_dict()
    singles = {u: v / 1e3 for u, v in single_unit_makespans(problem).items()}
    bounds = [r["bound_ms"] for r in results.values() if r["bound_ms"] is not None]
    if not problem.unpriced:
        bounds.append(lower_bound_us(problem) / 1e3)
    bound_ms = max(bounds, default=None)
    exact = results.get("hope-ilp", {}).get("makespan_ms")
    summary = {}
    for name, r in results.items():
        summary[name] = {
            "makespan_ms": r["makespan_ms"],
            "energy_mj": r["energy_mj"],
            "speedup": r["speedup"],
            "solve_s": r["solve_s"],
            "valid": r["valid"],
            "gap_to_bound": round(max(0.0, 1 - bound_ms / r["makespan_ms"]), 4)
            if r["makespan_ms"] and bound_ms is not None
            else None,
            "gap_to_exact": round(r["makespan_ms"] / exact - 1, 4) if exact else None,
        }
    if objective is None or objective.latency_first:
        # Equal makespans go to the plan that draws less energy (unknown last).
        best = min(
            results,
            key=lambda n: (results[n]["makespan_ms"], _or_inf(results[n]["energy_mj"])),
            default=None,
        )
    else:
        best = min(
            results,
            key=lambda n: objective.key(results[n]["makespan_ms"] * 1e3, results[n]["energy_mj"]),
            default=None,
        )
    single_energy = {
        u: simulate(problem, (problem.unit_index[u],) * problem.n, range(problem.n)).energy_mj
        for u in singles
    }
    report = {
        "units": list(problem.units),
        "ops": problem.n,
        "single_unit_ms": {u: _round(v) for u, v in singles.items()},
        "best_single_unit": min(singles, key=singles.__getitem__) if singles else None,
        "best_single_unit_ms": _round(min(singles.values())) if singles else None,
        "bound_ms": _round(bound_ms),
        "algorithms": summary,
        "failed": failures,
        "invalid": invalid,
        "best": best,
        "best_makespan_ms": results[best]["makespan_ms"] if best else None,
        "best_energy_mj": results[best]["energy_mj"] if best else None,
        "single_unit_energy_mj": {u: _round(e) for u, e in single_energy.items()},
        "energy_unknown": energy_unknown_reason(problem),
        "energy_model": ENERGY_MODEL,
        "objective": options.objective,
        "objective_detail": objective.to_dict() if objective is not None else None,
        "results": results,
    }
    if objective is not None and objective.kind != "latency":
        report.update(_energy_verdict(report, objective, options.little_gain_pct))
    else:
        report.update(_verdict(report, options.little_gain_pct))
    if progress is not None:
        progress(1.0, "comparison done")
    return report


def _verdict(report: dict, little_gain_pct: float) -> dict:
    best, single = report["best_makespan_ms"], report["best_single_unit_ms"]
    if best is None:
        why = "; ".join(f"{name}: {reason}" for name, reason in report["failed"].items())
        return {"gain_pct": None, "little_to_gain": None, "verdict": f"no plan ({why})"}
    if single is None:
        return {
            "gain_pct": None,
            "little_to_gain": False,
            "verdict": "no single unit runs every op: the model must be partitioned",
        }
    gain = 100.0 * (single - best) / single
    unit = report["best_single_unit"]
    if gain < little_gain_pct:
        text = (
            f"little to gain: the best plan ({report['best']}, {best:.3f} ms) is within "
            f"{max(gain, 0.0):.1f}% of running everything on {unit} ({single:.3f} ms)"
        )
    else:
        text = (
            f"partitioning helps: {report['best']} runs in {best:.3f} ms, {single / best:.2f}x "
            f"faster than {unit} alone ({single:.3f} ms)"
        )
    return {"gain_pct": round(gain, 2), "little_to_gain": gain < little_gain_pct, "verdict": text}


def _energy_verdict(report: dict, objective, little_gain_pct: float) -> dict:
    """The chosen plan's energy against the least-energy single unit (``gain_pct``: the
    energy saved, in percent)."""
    best, energy = report["best"], report["best_energy_mj"]
    known = {u: e for u, e in report["single_unit_energy_mj"].items() if e is not None}
    if best is None or energy is None or not known:
        verdict = _verdict(report, little_gain_pct)
        return {**verdict, "verdict": f"{objective.describe()}: {verdict['verdict']}"}
    unit = min(known, key=known.__getitem__)
    gain = 100.0 * (1 - energy / known[unit]) if known[unit] else 0.0
    text = (
        f"{objective.describe()}: {best} uses {energy:.3f} mJ in "
        f"{report['best_makespan_ms']:.3f} ms (predicted), "
        + (
            f"{gain:.1f}% less energy than {unit} alone ({known[unit]:.3f} mJ)"
            if gain >= little_gain_pct
            else f"little to gain: within {max(gain, 0.0):.1f}% of {unit} alone "
            f"({known[unit]:.3f} mJ)"
        )
    )
    return {"gain_pct": round(gain, 2), "little_to_gain": gain < little_gain_pct, "verdict": text}


def _scaled(progress: ProgressFn | None, start: float, end: float) -> ProgressFn | None:
    if progress is None:
        return None
    return lambda fraction, message: progress(start + (end - start) * fraction, message)


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
