"""The mobile-cloud split of DNNTune's Deployment Analyzer (thesis 3.5, eq. 3-1 to 3-4).

Every cut ``p`` of the topological order is evaluated: ops before it run on the mobile unit,
the rest in the cloud. With ``v_p`` the bytes that cross the cut (graph inputs included):

    T_t = T_ttl + v_p / b        E_t = w * T_t
    T^p = T_m + T_t + T_c        E^p = E_m + E_t,   E_m = T_m * (P_active - P_idle)

and the cut with the least ``T^p`` (latency-first) or ``E^p`` (energy-first) wins. Cut 0 is
cloud-only (the raw input is uploaded), cut ``n`` mobile-only. Like the thesis, the cost
curve leaves out downloading the result (the round trip ``T_ttl`` stands in for it) and the
cloud's energy; the plan's makespan, from the shared simulator, does count the download and
lets uploads start as soon as each tensor is ready.

The networks (3G, 4G, Wi-Fi: round trip, bandwidth, radio power) come from the target
profiles (the cloud preset carries the thesis's).
"""

from __future__ import annotations

import math

from engine.partition.baselines import single_unit_makespans
from engine.partition.problem import PartitionError, PartitionProblem
from engine.partition.registry import PartitionOptions, Plan, register


def cut_costs(problem: PartitionProblem, mobile: int, cloud: int) -> list[dict]:
    """The cost of every cut: thesis eq. 3-1 to 3-4, times in ms and energy in J."""
    net = problem.network
    if net is None:
        raise PartitionError("the mobile-cloud split needs a network", code="usage")
    n = problem.n
    power = problem.power.get(problem.units[mobile])
    crossing = [0] * (n + 2)  # crossing[p]: bytes a cut before op p sends up
    for t in problem.tensors:
        if t.dsts:
            lo = 0 if t.src is None else t.src + 1
            crossing[lo] += t.bytes
            crossing[max(t.dsts) + 1] -= t.bytes
    mobile_us = [problem.latency_us[i][mobile] for i in range(n)]
    cloud_us = [problem.latency_us[i][cloud] for i in range(n)]
    prefix_m, suffix_c = [0.0], [0.0]
    for i in range(n):
        prefix_m.append(prefix_m[-1] + (mobile_us[i] if mobile_us[i] is not None else float("inf")))
        j = n - 1 - i
        suffix_c.append(suffix_c[-1] + (cloud_us[j] if cloud_us[j] is not None else float("inf")))
    curve, sent = [], 0
    for p in range(n + 1):
        sent += crossing[p]
        t_m, t_c = prefix_m[p] / 1e3, suffix_c[n - p] / 1e3
        t_t = net.upload_s(sent) * 1e3 if p < n else 0.0
        e_t = net.upload_j(sent) if p < n else 0.0
        e_m = t_m / 1e3 * (power.active_w - power.idle_w) if power else None
        feasible = math.isfinite(t_m + t_c)
        curve.append(
            {
                "cut": "input" if p == 0 else "output" if p == n else problem.ops[p - 1].name,
                "position": p,
                "feasible": feasible,
                "bytes": sent if p < n else 0,
                "mobile_ms": t_m if feasible else None,
                "transfer_ms": t_t,
                "cloud_ms": t_c if feasible else None,
                "latency_ms": t_m + t_t + t_c if feasible else None,
                "energy_j": None if e_m is None or e_t is None or not feasible else e_m + e_t,
                "transfer_j": e_t,
            }
        )
    return curve


@register("mobile-cloud")
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
    feasible = [c for c in curve if c["feasible"]]
    if options.objective == "energy" and any(c["energy_j"] is None for c in feasible):
        raise PartitionError(
            f"energy-first needs the power of unit '{problem.units[mobile]}' and the radio "
            f"power of network '{problem.network.name}'",
            code="usage",
        )
    first, second = (
        ("energy_j", "latency_ms") if options.objective == "energy" else ("latency_ms", "energy_j")
    )
    best = min(feasible, key=lambda c: (c[first], c[second] or 0.0, -c["position"]))
    p = best["position"]
    placement = tuple(mobile if i < p else cloud for i in range(problem.n))
    return Plan(
        placement,
        tuple(range(problem.n)),
        details={
            "network": problem.network.name,
            "objective": options.objective,
            "mobile_unit": problem.units[mobile],
            "cloud_unit": problem.cloud_unit,
            "best_cut": best,
            "curve": curve,
        },
    )


def _mobile_unit(problem: PartitionProblem, options: PartitionOptions, cloud: int) -> int:
    if options.mobile_unit is not None:
        if options.mobile_unit not in problem.unit_index:
            raise PartitionError(f"unknown unit '{options.mobile_unit}'", code="usage")
        return problem.unit_index[options.mobile_unit]
    makespans = single_unit_makespans(problem)
    full = [u for u in problem.full_units if u != cloud]
    if not full:
        raise PartitionError("no mobile unit runs every op", code="unplaceable")
    return min(full, key=lambda u: (makespans[problem.units[u]], u))
