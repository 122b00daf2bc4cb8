"""Instances, their edges and their order (GraphTurbo, OSDI '23, section 3.3, Algorithm 3).

Each subgraph splits into ``f`` isomorphic instances along its BestSplit dimension. An
edge between a producer instance and a consumer instance is kept only when the slice the
consumer reads (halo included) overlaps the slice the producer writes; the others are
redundant and removed. Instances are ordered breadth-first (subgraph by subgraph) and
depth-first (Algorithm 3: the last ready instance first), and the order whose consumers
find more of their input bytes still in the local buffer is kept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.partition.graphturbo.splitinfo import SplitTuple, needed, output_of, sliced_bytes
from engine.partition.graphturbo.view import DsaGraph


@dataclass
class Instance:
    """Slice ``index`` of subgraph ``group``: what it reads, writes, loads and computes."""

    group: int
    index: int
    out_bytes: int
    weight_bytes: int
    flops: float
    graph_input_bytes: int
    graph_output: bool
    binding: tuple[int, ...]
    core_peak_bytes: int
    inputs: dict[int, int] = field(default_factory=dict)  # producer instance -> bytes


@dataclass
class InstanceGraph:
    """Instances in subgraph order, with ``edges_total`` before and ``edges_kept`` after
    removing redundant edges, and ``recompute_pct`` of extra halo work per subgraph."""

    instances: list[Instance]
    edges_total: int
    edges_kept: int
    recompute_pct: list[float]

    def consumers(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.instances]
        for q, inst in enumerate(self.instances):
            for p in inst.inputs:
                out[p].append(q)
        return out


def build_instances(
    view: DsaGraph, groups: list[list[int]], best: list[SplitTuple]
) -> InstanceGraph:
    """Split every subgraph into its instances and connect them (see the module docstring)."""
    group_of = {i: g for g, members in enumerate(groups) for i in members}
    first: list[int] = []
    regions: list[list[dict]] = []
    instances: list[Instance] = []
    recompute = []
    graph_inputs, graph_outputs = set(view.graph.inputs), set(view.graph.outputs)
    for g, (members, split) in enumerate(zip(groups, best, strict=True)):
        out = output_of(view, members)
        size = view.graph.tensors[out].static_shape[split.dim]
        step = size // split.factor
        first.append(len(instances))
        per = [needed(view, members, out, split.dim, k * step, (k + 1) * step)
               for k in range(split.factor)]  # fmt: skip
        regions.append(per)
        written = {t for i in members for t in view.writes[i]}
        full = sum(view.tensor_bytes[t] for t in written)
        done = sum(sliced_bytes(view, t, r.get(t)) for r in per for t in written)
        recompute.append(round(100.0 * (done - full) / full, 2) if full else 0.0)
        exported = [t for t in written if _leaves(view, t, set(members))]
        for k, region in enumerate(per):
            instances.append(
                Instance(
                    group=g,
                    index=k,
                    out_bytes=sum(sliced_bytes(view, t, region.get(t)) for t in exported),
                    weight_bytes=sum(view.weight_bytes[i] for i in members),
                    flops=sum(view.flops[i] for i in members) / split.factor,
                    graph_input_bytes=sum(
                        sliced_bytes(view, t, region.get(t))
                        for i in members
                        for t in view.reads[i]
                        if t in graph_inputs
                    ),  # fmt: skip
                    graph_output=any(t in graph_outputs for t in exported),
                    binding=split.binding,
                    core_peak_bytes=split.core_peak_bytes,
                )
            )
    total = kept = 0
    for g, members in enumerate(groups):
        inside = set(members)
        for i in members:
            for t in view.reads[i]:
                p = view.producer.get(t)
                if p is None or p in inside:
                    continue
                pg = group_of[p]
                for q_k, q_region in enumerate(regions[g]):
                    q = instances[first[g] + q_k]
                    for p_k, p_region in enumerate(regions[pg]):
                        total += 1
                        share = _overlap(view, t, p_region.get(t), q_region.get(t))
                        if share:
                            kept += 1
                            key = first[pg] + p_k
                            q.inputs[key] = q.inputs.get(key, 0) + share
    return InstanceGraph(instances, total, kept, recompute)


def _leaves(view: DsaGraph, t: str, inside: set[int]) -> bool:
    return t in view.graph.outputs or any(c not in inside for c in view.consumers.get(t, []))


def _overlap(view: DsaGraph, t: str, wrote, reads) -> int:
    """Bytes of ``t`` the consumer slice reads from the producer slice (0: no edge)."""
    if wrote is None:
        return sliced_bytes(view, t, reads)
    if reads is None:
        return sliced_bytes(view, t, wrote)
    if wrote[0] != reads[0]:
        return (
            sliced_bytes(view, t, wrote)
            * (reads[2] - reads[1])
            // max(1, view.graph.tensors[t].static_shape[reads[0]])
            or 1
        )
    lo, hi = max(wrote[1], reads[1]), min(wrote[2], reads[2])
    return sliced_bytes(view, t, (wrote[0], lo, hi)) if hi > lo else 0


def breadth_first(graph: InstanceGraph) -> list[int]:
    """Kahn's order, oldest ready instance first: subgraph after subgraph."""
    return _kahn(graph, lifo=False)


def depth_first(graph: InstanceGraph) -> list[int]:
    """Algorithm 3: the most recently readied instance first, so a consumer runs while its
    producer's slice is still in the local buffer."""
    return _kahn(graph, lifo=True)


def _kahn(graph: InstanceGraph, *, lifo: bool) -> list[int]:
    consumers = graph.consumers()
    indegree = [len(inst.inputs) for inst in graph.instances]
    ready = deque(i for i, d in enumerate(indegree) if d == 0)
    order = []
    while ready:
        x = ready.pop() if lifo else ready.popleft()
        order.append(x)
        freed = []
        for y in consumers[x]:
            indegree[y] -= 1
            if indegree[y] == 0:
                freed.append(y)
        # LIFO pops the last pushed: push in reverse so the lowest index runs first.
        ready.extend(reversed(freed) if lifo else freed)
    return order
