"""What an op costs on each processor NN-Stretch branches for, and what a meeting point
costs between them: the numbers every constraint and the simulator read.

Two sources, each named in the result (``model``):

- a **modeled target** (the phone preset): the target's cost model
  (:class:`engine.targets.CostModel`, roofline with per-op-type efficiency) per op and
  unit, and its links as the partition stage prices them
  (:func:`engine.partition.targets.problem_for_target`, whose unknown links get the
  documented assumption, about 1 ms per CPU-GPU transfer after NN-Stretch itself);
- a **measured target** (``host``): its CPU is split into core groups, the processors
  the branches run on (NN-Stretch's big and LITTLE clusters are such groups). The whole
  model is timed here in onnxruntime on one group's threads, and that time is spread over
  the ops in proportion to their FLOPs (``flops-proportional``): a calibrated model with
  one measured number. The groups share memory, so a meeting point moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.graph.costs import cost_node
from engine.graph.ir import Graph, Node
from engine.partition.problem import (
    PartitionError,
    PartitionProblem,
    constant_nodes,
    problem_from_graph,
)
from engine.partition.targets import problem_for_target
from engine.targets import CostModel, TargetProfile
from engine.targets.costmodel import MODEL_NAME, VIEW_OPS, op_dtype, op_variant

HOST_MODEL = "flops-proportional, calibrated on one onnxruntime run of the whole model here"


@dataclass
class Pricer:
    """Units the branches may use, op latency on each, transfers between them.

    ``units`` are the processors (in the target's order), ``home`` the one holding the
    inputs and running head, meeting points and tail, ``kinds`` each unit's kind (cpu,
    gpu, dsp), ``unusable`` the target's units left out and why."""

    units: tuple[str, ...]
    home: str
    kinds: dict[str, str]
    model: str
    notes: list[str] = field(default_factory=list)
    unusable: dict[str, str] = field(default_factory=dict)

    def op_us(self, node: Node, graph: Graph, unit: str) -> float | None:
        raise NotImplementedError

    def transfer_us(self, nbytes: int, src: str, dst: str) -> float:
        raise NotImplementedError

    def problem(self, graph: Graph) -> PartitionProblem:
        raise NotImplementedError


class TargetPricer(Pricer):
    """A modeled target's cost model and links (see the module docstring)."""

    def __init__(self, target: TargetProfile, graph: Graph):
        self.target = target
        self.cost = CostModel(target)
        reference = problem_for_target(graph, target)
        self._links = {(link.src, link.dst): link for link in reference.links}
        units = tuple(u for u in reference.units)
        dropped = [u.name for u in target.units if u.name not in units]
        super().__init__(
            units=units,
            home=reference.home_unit or units[0],
            kinds={u.name: u.kind for u in target.units},
            model=f"{MODEL_NAME} ({target.name})",
            notes=list(reference.notes),
            unusable={u: "runs none of the model's ops (its dtype or op set)" for u in dropped},
        )

    def op_us(self, node: Node, graph: Graph, unit: str) -> float | None:
        dtype = op_dtype(node, graph)
        if dtype.startswith(("fp", "bf")) and dtype not in self.cost.unit(unit).peak_gflops:
            return None
        estimate = self.cost.estimate(
            cost_node(node, graph), node.op_type, unit, dtype, op_variant(node, graph)
        )
        return estimate.latency_us

    def transfer_us(self, nbytes: int, src: str, dst: str) -> float:
        if src == dst:
            return 0.0
        link = self._links.get((src, dst))
        return 0.0 if link is None else link.transfer_us(nbytes)  # no link: shared memory

    def problem(self, graph: Graph) -> PartitionProblem:
        return problem_for_target(graph, self.target)


class HostPricer(Pricer):
    """Core groups of a measured CPU, priced flops-proportionally (module docstring)."""

    def __init__(self, groups: int, threads: int, flops: int, measured_ms: float):
        units = tuple(f"cores{k}" for k in range(groups))
        self.rate = flops / (measured_ms * 1e3)  # FLOP per us on one group
        self.threads = threads
        self.measured_ms = measured_ms
        super().__init__(
            units=units,
            home=units[0],
            kinds=dict.fromkeys(units, "cpu"),
            model=HOST_MODEL,
            notes=[
                f"the host's CPU is split into {groups} core groups of {threads} thread(s) "
                "each; the groups share memory, so meeting points move no data (onnxruntime's "
                "own synchronisation between its inter-op threads is not modelled)",
                f"op latency: the whole model took {measured_ms:.3f} ms here on {threads} "
                "thread(s), spread over the ops in proportion to their FLOPs",
            ],
        )

    def op_us(self, node: Node, graph: Graph, unit: str) -> float | None:
        cost = cost_node(node, graph)
        if cost is None:
            return None
        if node.op_type in VIEW_OPS:
            return 0.0
        return cost.flops / self.rate

    def transfer_us(self, nbytes: int, src: str, dst: str) -> float:
        return 0.0

    def problem(self, graph: Graph) -> PartitionProblem:
        return problem_from_graph(
            graph,
            self.units,
            lambda n, u: self.op_us(n, graph, u),
            home_unit=self.home,
            notes=self.notes,
        )


def host_flops(graph: Graph) -> int:
    """FLOPs of every op the model runs (what the measured time is spread over)."""
    total = 0
    constant = constant_nodes(graph)
    for node in graph.nodes:
        if node.name in constant:
            continue
        cost = cost_node(node, graph)
        if cost is not None and node.op_type not in VIEW_OPS:
            total += cost.flops
    if not total:
        raise PartitionError("the model's work could not be counted", code="unknown_cost")
    return total
