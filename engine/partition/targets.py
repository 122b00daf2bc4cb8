"""A partitioning problem for a model on a target profile, priced by the cost model
(:class:`engine.targets.CostModel`: roofline with per-op efficiency, ARCHITECTURE 6).

Unknown numbers are not invented silently. Where the profile leaves a link's cost unknown,
the problem uses :class:`LinkAssumption` (about 1 ms per CPU-GPU transfer, as NN-Stretch
measured on phones, at the slower unit's memory bandwidth) and says so in
``PartitionProblem.notes``; so is a unit's unknown launch overhead, which the cost model
counts as 0 (its latencies are lower bounds). What cannot be priced is refused with a
:class:`PartitionError` naming the nodes and why: an op whose work the analysis could not
count (an unknown shape, no cost formula) and, unless a cloud unit joins for the
mobile-cloud split (which leaves out the cuts it cannot price), a tensor of unknown size
that may cross units. A unit that cannot compute in an op's float dtype (no entry in its
``peak_gflops``) does not run the op at all, not even its data movement, so an int8-only
DSP takes no part in a float model; units that run none of the ops are left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph.costs import COST_FUNCTIONS, cost_node
from engine.graph.ir import Graph, Node
from engine.graph.shapes import explain_unknown_shapes
from engine.partition.problem import (
    Link,
    Network,
    PartitionError,
    PartitionProblem,
    UnitPower,
    constant_nodes,
    describe_tensors,
    problem_from_graph,
)
from engine.targets import CostModel, TargetProfile
from engine.targets.costmodel import op_dtype, op_variant

CLOUD_UNIT = "cloud"
_LISTED = 5  # nodes or tensors named in an error, the rest counted


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
    the mobile-cloud split). Raises :class:`PartitionError` when some op can run nowhere,
    or the problem cannot be priced (see the module docstring)."""
    notes: list[str] = []
    costs = {n.name: cost_node(n, graph) for n in graph.nodes}
    models = {u.name: CostModel(profile) for u in profile.units}
    if cloud is not None:
        if network is None:
            raise PartitionError("a cloud target needs a network (3g, 4g, wifi)", code="usage")
        models[CLOUD_UNIT] = _CloudModel(CostModel(cloud), cloud.units[0].name)
    not_costed: dict[str, Node] = {}  # by name, in graph order

    def latency(node: Node, unit: str) -> float | None:
        model = models[unit]
        dtype = op_dtype(node, graph)
        if _is_float(dtype) and dtype not in model.unit(unit).peak_gflops:
            return None  # a unit that cannot compute in this dtype does not hold its tensors
        estimate = model.estimate(
            costs[node.name], node.op_type, unit, dtype, op_variant(node, graph)
        )
        if estimate.status == "not_costed":
            not_costed.setdefault(node.name, node)
        return estimate.latency_us

    names = [u.name for u in profile.units] + ([CLOUD_UNIT] if cloud is not None else [])
    constant = constant_nodes(graph)
    rows = {n.name: [latency(n, u) for u in names] for n in graph.nodes if n.name not in constant}
    if not_costed:  # an op's work does not depend on the unit: unknown on every unit
        raise _unknown_work(graph, profile, list(not_costed.values()))
    index = {u: k for k, u in enumerate(names)}
    try:
        problem = problem_from_graph(graph, names, lambda n, u: rows[n.name][index[u]])
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
    units = tuple(names[u] for u in used)
    no_launch = [u.name for u in profile.units if u.name in units and u.launch_us is None]
    if no_launch:
        notes.append(
            "launch overhead unknown, counted as 0 (latencies are lower bounds; an op that "
            f"moves no data takes 0 us): {', '.join(no_launch)}"
        )
    home = next((u.name for u in profile.units if u.kind == "cpu" and u.name in units), units[0])
    result = PartitionProblem(
        ops=problem.ops,
        units=units,
        latency_us=tuple(tuple(row[u] for u in used) for row in problem.latency_us),
        tensors=problem.tensors,
        links=_links(profile, [u for u in units if u != CLOUD_UNIT], assume, notes),
        home_unit=home,
        power=_power(profile, units, notes),
        network=None if cloud is None else _network(profile, cloud, network, notes),
        cloud_unit=CLOUD_UNIT if cloud is not None and CLOUD_UNIT in units else None,
        notes=tuple(notes),
    )
    if result.unpriced and result.cloud_unit is None:
        raise _unknown_sizes(graph, result)
    return result


def _why_not_costed(node: Node, graph: Graph) -> str:
    """Why the analysis could not count a node's work, in a few words."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    if (domain, node.op_type) not in COST_FUNCTIONS:
        return f"no cost formula for {node.op_type}"
    for name in node.inputs:
        if name and graph.tensors[name].static_shape is None:
            return f"shape of input {name} unknown"
    for name in node.outputs:
        tensor = graph.tensors[name] if name else None
        if tensor is not None and tensor.static_shape is None:
            return "output shape unknown"
    return "the cost formula cannot count it with these shapes and attributes"


def _what_to_do(graph: Graph) -> str:
    """The hint of a refusal: bind the symbolic inputs, if any, and fold shape arithmetic."""
    symbolic = [n for n in graph.inputs if graph.tensors[n].static_shape is None]
    steps = (
        [f"Give the shape of {', '.join(symbolic)} (--shape NAME=1x3x224x224)."] if symbolic else []
    )
    steps.append(
        "Partition the prepared (simplified) model: it folds shape arithmetic, so that every "
        "shape is known."
    )
    steps += [f"Where shapes become unknown: {o}." for o in explain_unknown_shapes(graph)[:2]]
    return " ".join(steps)


def _unknown_work(graph: Graph, profile: TargetProfile, nodes: list[Node]) -> PartitionError:
    listed = [f"node {n.name} ({n.op_type}): {_why_not_costed(n, graph)}" for n in nodes]
    more = f"; and {len(nodes) - _LISTED} more" if len(nodes) > _LISTED else ""
    return PartitionError(
        f"cannot price the model on '{profile.name}': the work of {len(nodes)} node"
        f"{'s is' if len(nodes) > 1 else ' is'} unknown: " + "; ".join(listed[:_LISTED]) + more,
        code="unknown_cost",
        hint=_what_to_do(graph),
    )


def _unknown_sizes(graph: Graph, problem: PartitionProblem) -> PartitionError:
    listed = []
    for k in problem.unpriced[:_LISTED]:
        t = problem.tensors[k]
        found = graph.tensors[t.name]
        why = (
            "shape unknown"
            if found.static_shape is None
            else f"size of element type '{found.dtype}' unknown"
        )
        listed.append(f"{describe_tensors(problem, [k])}: {why}")
    more = len(problem.unpriced) - _LISTED
    return PartitionError(
        "cannot price the transfers between units: the size of tensors that may cross units "
        "is unknown: " + "; ".join(listed) + (f"; and {more} more" if more > 0 else ""),
        code="unknown_size",
        hint=_what_to_do(graph),
    )


def _power(profile: TargetProfile, units: tuple[str, ...], notes: list[str]) -> dict:
    """Power of the units whose active and idle draw are both known (thesis: energy is
    ``T x (P_active - P_idle)``; an unknown idle is not taken as 0, as the cost model's
    energy estimate does not)."""
    power, unknown = {}, []
    for name, p in profile.power.items():
        if name not in units or p.active_w is None:
            continue
        if p.idle_w is None:
            unknown.append(name)
            continue
        power[name] = UnitPower(p.active_w, p.idle_w)
    if unknown:
        notes.append(f"idle power unknown, no energy estimate: {', '.join(unknown)}")
    return power


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
                gbps = gbps or assume.gbps or (min(shared) if shared else None)
                if gbps is None:
                    raise PartitionError(
                        f"the bandwidth of link {a} -> {b} is unknown, and so is the memory "
                        "bandwidth of both units: no transfer between them can be priced",
                        code="usage",
                        hint="Give the link's bandwidth in the target profile, or assume one "
                        "for such links (LinkAssumption.gbps).",
                    )
            links.append(Link(a, b, latency, gbps))
    if assumed:
        speed = f"{assume.gbps:g} GB/s" if assume.gbps else "the slower unit's memory bandwidth"
        notes.append(
            f"link cost unknown in the profile, assumed {assume.latency_us:g} us per transfer "
            f"plus bytes at {speed}: {', '.join(assumed)}"
        )
    return tuple(links)


def _network(
    profile: TargetProfile, cloud: TargetProfile, name: str | None, notes: list[str]
) -> Network:
    found = [n for p in (cloud, profile) for n in p.networks if n.name == name]
    if not found:
        known = sorted({n.name for p in (cloud, profile) for n in p.networks})
        raise PartitionError(
            f"no network named '{name}'", code="usage", hint=f"known networks: {', '.join(known)}"
        )
    net = found[0]
    for value, what in ((net.up_mbps, "upload bandwidth"), (net.rtt_ms, "round trip")):
        if value is None:
            raise PartitionError(
                f"the {what} of network '{name}' is unknown: no cut can be priced",
                code="usage",
                hint="Describe the network in the cloud target's profile.",
            )
    if net.down_mbps is None:
        notes.append(
            f"download bandwidth of network '{name}' unknown: downloading the result is not "
            "counted (the round trip stands in for it, as in the thesis's cost model)"
        )
    return Network(net.name, net.rtt_ms, net.up_mbps, net.down_mbps, net.radio_w)


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
