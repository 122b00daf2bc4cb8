"""Predicted energy of a plan: what the units draw while its schedule runs.

The thesis (DNNTune, 3.4.1, eq. "3-1" of L786) prices an operator as its latency times the
unit's power above idle, ``E = T x (P_active - P_idle)``. A whole schedule also keeps every
unit powered while it runs, so here a plan's energy is

    E = sum over units u of  idle_w(u) x makespan  +  (active_w(u) - idle_w(u)) x busy(u)
        + radio_w x (time of every upload over the mobile-cloud network)

that is, each unit draws its active power while it computes and its idle power the rest of
the makespan. Transfers between units of the SoC have no power figure in the target
profiles: they cost only the idle draw of the units while they wait (the makespan term).
An upload to the cloud costs the radio's power for its duration (thesis eq. 3-2,
``E_t = w x T_t``); downloading the result and the cloud's own energy are left out, as
in the thesis (L544). All of it is predicted from the profile's power figures and the
cost model's latencies, not measured.

Unknown stays unknown: a unit of the problem without both power figures (the cloud unit
aside), or an upload without the radio's power, makes the energy ``None`` and
:func:`missing_power` names what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.partition.problem import PartitionProblem

MODEL = "predicted: busy time x (active - idle) + makespan x idle power of each unit"


def missing_power(problem: PartitionProblem) -> list[str]:
    """Units of ``problem`` whose energy cannot be priced: no power figures (the cloud unit,
    whose energy is not the phone's, is never counted), and the network's radio power."""
    missing = [u for u in problem.units if u != problem.cloud_unit and problem.power.get(u) is None]
    if problem.network is not None and problem.network.radio_w is None:
        missing.append(f"radio of network {problem.network.name}")
    return missing


def energy_unknown_reason(problem: PartitionProblem) -> str | None:
    """Why no plan of ``problem`` has an energy, or ``None`` when every plan has one."""
    missing = missing_power(problem)
    if not missing:
        return None
    return f"no power figures (active and idle watts) for: {', '.join(missing)}"


def op_energy_uj(problem: PartitionProblem) -> list[list[float | None]]:
    """``[op][unit]``: the energy in microjoules an op draws above its unit's idle power
    (``latency x (active - idle)``); 0 on the cloud unit, ``None`` where the op cannot run
    or the unit's power is unknown."""
    rows = []
    for row in problem.latency_us:
        out: list[float | None] = []
        for u, lat in enumerate(row):
            name = problem.units[u]
            power = problem.power.get(name)
            if lat is None:
                out.append(None)
            elif name == problem.cloud_unit:
                out.append(0.0)
            elif power is None:
                out.append(None)
            else:
                out.append(lat * (power.active_w - power.idle_w))
        rows.append(out)
    return rows


def idle_w(problem: PartitionProblem) -> float:
    """Sum of the idle power of the problem's units (the cloud's not counted)."""
    return sum(p.idle_w for name, p in problem.power.items() if name in problem.unit_index)


def upload_w(problem: PartitionProblem, src: int, dst: int) -> float:
    """Power drawn while a tensor moves from unit ``src`` to ``dst``: the radio's for an
    upload to the cloud, else 0 (no power figure for on-chip links; see the module)."""
    net, cloud = problem.network, problem.cloud_unit
    if net is None or cloud is None or src == dst:
        return 0.0
    if problem.units[dst] != cloud or problem.units[src] == cloud:
        return 0.0
    return net.radio_w or 0.0  # missing_power() already made the energy unknown


@dataclass(frozen=True)
class PlanEnergy:
    """Energy of one schedule in millijoules, with its parts; ``None`` and ``reason``
    when a power figure is missing."""

    energy_mj: float | None
    active_mj: float | None = None
    idle_mj: float | None = None
    transfer_mj: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return {
            "energy_mj": _round(self.energy_mj),
            "active_mj": _round(self.active_mj),
            "idle_mj": _round(self.idle_mj),
            "transfer_mj": _round(self.transfer_mj),
            "reason": self.reason,
            "model": MODEL,
        }


def plan_energy(
    problem: PartitionProblem,
    placement,
    makespan_us: float,
    transfers,
) -> PlanEnergy:
    """Energy of a simulated plan (``transfers`` as the simulator made them)."""
    reason = energy_unknown_reason(problem)
    if reason is not None:
        return PlanEnergy(None, reason=reason)
    above = [
        0.0
        if name == problem.cloud_unit
        else problem.power[name].active_w - problem.power[name].idle_w
        for name in problem.units
    ]
    active = sum(problem.latency_us[i][u] * above[u] for i, u in enumerate(placement))
    idle = idle_w(problem) * makespan_us
    moved = sum(
        upload_w(problem, t.src_unit, t.dst_unit) * (t.finish_us - t.start_us) for t in transfers
    )
    return PlanEnergy(
        (active + idle + moved) / 1e3, active / 1e3, idle / 1e3, moved / 1e3, reason=None
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
