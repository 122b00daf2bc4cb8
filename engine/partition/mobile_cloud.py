"""The mobile-cloud split of DNNTune's Deployment Analyzer (thesis 3.5, eq. 3-1 to 3-4).

Every cut ``p`` of the topological order is evaluated: ops before it run on the mobile unit,
the rest in the cloud. With ``v_p`` the bytes that cross the cut (graph inputs included):

    T_t = T_ttl + v_p / b        E_t = w * T_t
    T^p = T_m + T_t + T_c        E^p = E_m + E_t,   E_m = T_m * (P_active - P_idle)

and the cut with the least ``T^p`` (latency-first), ``E^p`` (energy-first) or weighted sum
of the two (normalised by the least of each over the cuts) wins, the same objectives every
algorithm takes (:mod:`engine.partition.objective`). Under a latency cap, a cut whose
simulated makespan exceeds it is passed over. Cut 0 is
cloud-only (the raw input is uploaded), cut ``n`` mobile-only. Like the thesis, the cost
curve leaves out downloading the result (the round trip ``T_ttl`` stands in for it) and the
cloud's energy; the plan's makespan, from the shared simulator, does count the download and
lets uploads start as soon as each tensor is ready.

A cut that would send a tensor of unknown size is not offered: its ``v_p`` is unknown, and
counting it as 0 bytes would make offloading look free. Its entry in the curve says so
(``feasible`` false, ``reason``), and if no cut is left the split has no plan
(:class:`~engine.partition.registry.NoPlan`) and says why.

The networks (3G, 4G, Wi-Fi: round trip, bandwidth, radio power) come from the target
profiles (the cloud preset carries the thesis's).
"""

from __future__ import annotations

import math

from engine.partition.baselines import single_unit_makespans
from engine.partition.objective import Objective
from engine.partition.problem import PartitionError, PartitionProblem, describe_tensors
from engine.partition.registry import NoPlan, PartitionOptions, Plan, register
from engine.partition.simulator import simulate


def cut_costs(problem: PartitionProblem, mobile: int, cloud: int) -> list[dict]:
    """The cost of every cut: thesis eq. 3-1 to 3-4, times in ms and energy in J. A cut that
    runs an op where it cannot run, or sends a tensor of unknown size, is not ``feasible``
    and has no price; ``reason`` says why."""
    net = problem.network
    if net is None:
        raise PartitionError("the mobile-cloud split needs a network", code="usage")
    n = problem.n
    power = problem.power.get(problem.units[mobile])
    crossing = [0] * (n + 2)  # crossing[p]: bytes a cut before op p sends up
    unknown: list[tuple[int, int, int]] = []  # (first cut, last cut, tensor) of unknown size
    for k, t in enumerate(problem.tensors):
        if t.dsts:
            lo, hi = 0 if t.src is None else t.src + 1, max(t.dsts)
            if t.bytes is None:
                unknown.append((lo, hi, k))
                continue
            crossing[lo] += t.bytes
            crossing[hi + 1] -= t.bytes
    mobile_us = [problem.latency_us[i][mobile] for i in range(n)]
    cloud_us = [problem.latency_us[i][cloud] for i in range(n)]
    # Prefix and suffix sums; +inf marks an op the unit cannot run (the thesis's cl = +inf).
    prefix_m, suffix_c = [0.0], [0.0]
    for i in range(n):
        prefix_m.append(prefix_m[-1] + (mobile_us[i] if mobile_us[i] is not None else math.inf))
        j = n - 1 - i
        suffix_c.append(suffix_c[-1] + (cloud_us[j] if cloud_us[j] is not None else math.inf))
    curve, sent = [], 0
    for p in range(n + 1):
        sent += crossing[p]
        entry = {
            "cut": "input" if p == 0 else "output" if p == n else problem.ops[p - 1].name,
            "position": p,
            "feasible": True,
            "reason": None,
            "bytes": sent,
            "mobile_ms": None,
            "transfer_ms": None,
            "cloud_ms": None,
            "latency_ms": None,
            "energy_j": None,
            "transfer_j": None,
        }
        curve.append(entry)
        t_m, t_c = prefix_m[p] / 1e3, suffix_c[n - p] / 1e3
        blind = [k for lo, hi, k in unknown if lo <= p <= hi]
        if blind:
            entry["bytes"] = None
        if not math.isfinite(t_m + t_c):
            entry.update(feasible=False, reason="an op cannot run where it is placed")
            continue
        if blind:
            entry.update(
                feasible=False,
                reason=f"sends {describe_tensors(problem, blind, limit=2)}, of unknown size",
            )
            continue
        t_t = net.upload_s(sent) * 1e3 if p < n else 0.0
        e_t = net.upload_j(sent) if p < n else 0.0
        e_m = t_m / 1e3 * (power.active_w - power.idle_w) if power else None
        entry.update(
            mobile_ms=t_m,
            transfer_ms=t_t,
            cloud_ms=t_c,
            latency_ms=t_m + t_t + t_c,
            energy_j=None if e_m is None or e_t is None else e_m + e_t,
            transfer_j=e_t,
        )
    return curve


@register("mobile-cloud", prices_own_cuts=True)
def split_mobile_cloud(problem: PartitionProblem, options: PartitionOptions, progress) -> Plan:
    if problem.network is None or problem.cloud_unit is None:
        raise PartitionError(
            "the mobile-cloud split needs a cloud unit and a network",
            code="usage",
            hint="partition with a cloud target and a network preset (3g, 4g, wifi)",
        )
    cloud = problem.unit_index[problem.cloud_unit]
    mobile = _mobile_unit(problem, options, cloud)
    curve = cut_costs(problem, mobile, cloud)
    offered = [c for c in curve if c["feasible"]]
    if options.objective != "latency" and any(c["energy_j"] is None for c in offered):
        raise PartitionError(
            f"the {options.objective} objective needs the power of unit "
            f"'{problem.units[mobile]}' and the radio power of network '{problem.network.name}'",
            code="usage",
        )
    objective = _curve_objective(offered, options)
    second = "latency_ms" if options.objective != "latency" else "energy_j"

    def key(c: dict) -> tuple:
        energy = None if c["energy_j"] is None else c["energy_j"] * 1e3
        return objective.key(c["latency_ms"] * 1e3, energy)

    # Ties go to the other objective (a missing one sorts last), then to the later cut.
    offered.sort(key=lambda c: (key(c), c[second] is None, c[second] or 0.0, -c["position"]))
    details = {
        "network": problem.network.name,
        "objective": options.objective,
        "objective_detail": objective.to_dict(),
        "mobile_unit": problem.units[mobile],
        "cloud_unit": problem.cloud_unit,
        "curve": curve,
    }
    for best in offered:
        p = best["position"]
        placement = tuple(mobile if i < p else cloud for i in range(problem.n))
        # The curve prices the upload; the plan may also move inputs and outputs between
        # the home unit, the mobile unit and the cloud (the download).
        blind = problem.unpriced_moves(placement)
        if blind:
            best.update(
                feasible=False,
                latency_ms=None,
                energy_j=None,
                reason=f"moves {describe_tensors(problem, blind, limit=2)}, of unknown size",
            )
            continue
        if objective.cap_us is not None:
            makespan = simulate(problem, placement, range(problem.n)).makespan_us
            if objective.over_cap_us(makespan):
                continue
        details["best_cut"] = best
        return Plan(placement, tuple(range(problem.n)), details=details)
    if objective.cap_us is not None and offered:
        raise NoPlan(
            f"no cut of the mobile-cloud split runs within the latency cap of "
            f"{objective.cap_us / 1e3:g} ms",
            details=details,
        )
    reasons = list(dict.fromkeys(c["reason"] for c in curve if c["reason"]))
    raise NoPlan(
        "no cut of the mobile-cloud split can be priced: " + "; ".join(reasons[:3]),
        details=details,
    )


def _curve_objective(offered: list[dict], options: PartitionOptions) -> Objective:
    """The objective over the cut costs, normalised by the least latency and energy of the
    cuts (the split needs only the mobile unit's and the radio's power, not every unit's)."""
    cap = None if options.latency_cap_ms is None else options.latency_cap_ms * 1e3
    times = [c["latency_ms"] * 1e3 for c in offered]
    energies = [c["energy_j"] * 1e6 for c in offered if c["energy_j"] is not None]
    return Objective(
        options.objective,
        options.alpha,
        cap,
        max(min(times, default=1.0), 1e-9),
        max(min(energies, default=1.0), 1e-9),
    )


def _mobile_unit(problem: PartitionProblem, options: PartitionOptions, cloud: int) -> int:
    if options.mobile_unit is not None:
        if options.mobile_unit not in problem.unit_index:
            raise PartitionError(f"unknown unit '{options.mobile_unit}'", code="usage")
        return problem.unit_index[options.mobile_unit]
    full = [u for u in problem.full_units if u != cloud]
    if not full:
        raise PartitionError("no mobile unit runs every op", code="unplaceable")
    makespans = single_unit_makespans(problem)  # units that need no unknown size moved
    priced = [u for u in full if problem.units[u] in makespans]
    if not priced:
        raise NoPlan(
            "every mobile unit that runs every op would move a tensor of unknown size from or "
            "to the home unit: "
            + describe_tensors(problem, problem.unpriced_moves((full[0],) * problem.n))
        )
    return min(priced, key=lambda u: (makespans[problem.units[u]], u))
