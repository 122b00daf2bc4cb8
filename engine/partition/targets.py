"""A partitioning problem for a model on a target profile, priced by the cost model
(:class:`engine.targets.CostModel`: roofline with per-op efficiency, ARCHITECTURE 6).

Unknown numbers are not invented silently. Where the profile leaves a link's cost unknown,
the problem uses :class:`LinkAssumption` (about 1 ms per CPU-GPU transfer, as NN-Stretch
measured on phones, at the slower unit's memory bandwidth) and says so in
``PartitionProblem.notes``; ops the analysis could not cost take only the unit's launch
overhead, also noted. A unit that cannot compute in an op's float dtype (no entry in its
``peak_gflops``) does not run the op at all, not even its data movement, so an int8-only
DSP takes no part in a float model; units that run none of the ops are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph.costs import cost_node
from engine.graph.ir import Graph, Node
from engine.partition.problem import (
    Link,
    Network,
    PartitionError,
    PartitionProblem,
    UnitPower,
    problem_from_graph,
)
from engine.targets import CostModel, TargetProfile
from engine.targets.costmodel import op_variant, unit_dtype

CLOUD_UNIT = "cloud"


@dataclass(frozen=True)
class LinkAssumption:
    """Cost of a link whose numbers the profile leaves unknown. ``gbps=None``: the slower
    memory bandwidth of its two units (units on a SoC share DRAM)."""

    latency_us: float = 1000.0  # NN-Stretch (MobiSys'23) L16/L91: CPU-GPU about 1 ms
    gbps: float | None = None


def problem_for_target(
    graph: Graph,
    profile: TargetProfile,
    *,
    cloud: TargetProfile | None = None,
    network: str | None = None,
    assume: LinkAssumption = LinkAssumption(),
) -> PartitionProblem:
    """The problem of running ``graph`` on ``profile`` (plus ``cloud`` over ``network`` for
    the mobile-cloud split). Raises :class:`PartitionError` when some op can run nowhere."""
    notes: list[str] = []
    costs = {n.name: cost_node(n, graph) for n in graph.nodes}
    models = {u.name: CostModel(profile) for u in profile.units}
    if cloud is not None:
        if network is None:
            raise PartitionError("a cloud target needs a network (3g, 4g, wifi)", code="usage")
        models[CLOUD_UNIT] = _CloudModel(CostModel(cloud), cloud.units[0].name)
    not_costed: set[str] = set()

    def latency(node: Node, unit: str) -> float | None:
        model = models[unit]
        dtype = unit_dtype(graph.tensors[node.outputs[0]].dtype) if node.outputs else "fp32"
        if _is_float(dtype) and dtype not in model.unit(unit).peak_gflops:
            return None  # a unit that cannot compute in this dtype does not hold its tensors
        estimate = model.estimate(
            costs[node.name], node.op_type, unit, dtype, op_variant(node, graph)
        )
        if estimate.status == "not_costed":
            not_costed.add(node.op_type)
            return model.unit(unit).launch_us or 0.0
        return estimate.latency_us

    names = [u.name for u in profile.units] + ([CLOUD_UNIT] if cloud is not None else [])
    try:
        problem = problem_from_graph(graph, names, latency)
    except PartitionError as e:
        raise PartitionError(
            e.message,
            code=e.code,
            hint="The cost model has no estimate for it on any unit of "
            f"'{profile.name}' (unsupported op or dtype, or an unknown number in the profile).",
        ) from e
    used = [u for u in range(len(names)) if any(row[u] is not None for row in problem.latency_us)]
    dropped = [names[u] for u in range(len(names)) if u not in used]
    if dropped:
        notes.append(f"units that run none of the ops are left out: {', '.join(dropped)}")
    if not_costed:
        notes.append(
            "ops whose work is unknown count as launch overhead only: "
            + ", ".join(sorted(not_costed))
        )
    units = tuple(names[u] for u in used)
    home = next((u.name for u in profile.units if u.kind == "cpu" and u.name in units), units[0])
    return PartitionProblem(
        ops=problem.ops,
        units=units,
        latency_us=tuple(tuple(row[u] for u in used) for row in problem.latency_us),
        tensors=problem.tensors,
        links=_links(profile, [u for u in units if u != CLOUD_UNIT], assume, notes),
        home_unit=home,
        power={
            name: UnitPower(p.active_w, p.idle_w or 0.0)
            for name, p in profile.power.items()
            if name in units and p.active_w is not None
        },
        network=None if cloud is None else _network(profile, cloud, network),
        cloud_unit=CLOUD_UNIT if cloud is not None and CLOUD_UNIT in units else None,
        notes=tuple(notes),
    )


def _links(profile: TargetProfile, units: list[str], assume: LinkAssumption, notes: list[str]):
    by_pair = {}
    for link in profile.links:
        by_pair[(link.src, link.dst)] = link
        if link.bidirectional:
            by_pair.setdefault((link.dst, link.src), link)
    bandwidth = {u.name: u.mem_bw_gbps for u in profile.units}
    links, assumed = [], []
    for a in units:
        for b in units:
            if a == b:
                continue
            known = by_pair.get((a, b))
            if known is not None and known.zero_copy:
                continue  # shared memory and layout: free, no link
            latency = known.latency_us if known is not None else None
            gbps = known.gbps if known is not None else None
            if latency is None or gbps is None:
                assumed.append(f"{a}->{b}")
                shared = [bw for bw in (bandwidth[a], bandwidth[b]) if bw]
                latency = assume.latency_us if latency is None else latency
                gbps = gbps or assume.gbps or (min(shared) if shared else 1.0)
            links.append(Link(a, b, latency, gbps))
    if assumed:
        speed = f"{assume.gbps:g} GB/s" if assume.gbps else "the slower unit's memory bandwidth"
        notes.append(
            f"link cost unknown in the profile, assumed {assume.latency_us:g} us per transfer "
            f"plus bytes at {speed}: {', '.join(assumed)}"
        )
    return tuple(links)


def _network(profile: TargetProfile, cloud: TargetProfile, name: str | None) -> Network:
    found = [n for p in (cloud, profile) for n in p.networks if n.name == name]
    if not found:
        known = sorted({n.name for p in (cloud, profile) for n in p.networks})
        raise PartitionError(
            f"no network named '{name}'", code="usage", hint=f"known networks: {', '.join(known)}"
        )
    net = found[0]
    if net.up_mbps is None:
        raise PartitionError(f"the upload bandwidth of network '{name}' is unknown", code="usage")
    return Network(net.name, net.rtt_ms or 0.0, net.up_mbps, net.down_mbps, net.radio_w)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("fp", "bf", "tf"))


class _CloudModel:
    """The cloud target's cost model, answering for the problem's ``cloud`` unit."""

    def __init__(self, model: CostModel, unit: str):
        self._model, self._unit = model, unit

    def estimate(self, cost, op_type, unit, dtype, variant):
        return self._model.estimate(cost, op_type, self._unit, dtype, variant)

    def unit(self, unit: str):
        return self._model.unit(self._unit)
