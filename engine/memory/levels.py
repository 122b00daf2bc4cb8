"""Which tensors stay in a core's local buffer, and what goes off-core (GraphTurbo).

GraphTurbo (graphturbo sections 2.6 and 4) groups ops into subgraphs whose tensors are
exchanged inside a core's local buffer (LB) instead of through the global buffer (GB) or
DRAM, and when the live tensors exceed the LB it spills the one with the longest
lifetime, to the GB and, once that is full, to DRAM ("largest first" is the prior work's
policy, kept as an option). Its memory allocation walks the tasks in order: allocate the
outputs, free what died, then spill while the LB overflows.

We replay that on the execution order with one LB:

- a tensor read by a node of its producer's group is kept in the LB (if it can ever fit)
  until its last reader in the group;
- a tensor read outside its producer's group (or a graph output) is written off-core
  once, and read back by every reader that finds it off-core;
- graph inputs start in DRAM; weights are left out (both schemes stream them, and
  GraphTurbo hides that behind compute).

"Before" is the same replay with one node per group: a per-layer compiler (the paper's
TVM baseline) that sends every tensor off-core. Off-core bytes count both directions.
The paper also splits subgraphs into batch instances to fit the LB; that is the fusion
stage's business and not modelled here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import EngineError
from engine.graph.ir import Graph
from engine.memory.lifetimes import Lifetimes

SPILL_POLICIES = ("longest-lifetime", "largest")
LOCAL, GLOBAL, DRAM = "local", "global", "dram"


@dataclass(frozen=True)
class LevelConfig:
    """A unit's buffers; ``groups`` are node-name lists (default: straight chains)."""

    local_buffer_bytes: int
    global_buffer_bytes: int | None = None
    groups: tuple[tuple[str, ...], ...] | None = None
    spill: str = "longest-lifetime"

    def __post_init__(self) -> None:
        if self.local_buffer_bytes <= 0:
            raise EngineError("the local buffer must hold at least one byte", code="bad_config")
        if self.spill not in SPILL_POLICIES:
            raise EngineError(
                f"unknown spill policy '{self.spill}'",
                code="bad_config",
                hint=f"Use one of {', '.join(SPILL_POLICIES)}.",
            )


@dataclass(frozen=True)
class GroupFit:
    nodes: tuple[str, ...]
    peak_bytes: int
    """Most LB bytes the group's tensors wanted at once (after frees, before spilling)."""
    fits: bool
    spilled: tuple[str, ...]


@dataclass
class LevelFit:
    """Where each activation ends up, and the off-core traffic before and after."""

    config: LevelConfig
    groups: list[GroupFit]
    placement: dict[str, str]
    """Tensor -> ``local`` (never left the core), ``global`` or ``dram``."""
    offcore_bytes_before: int
    offcore_bytes_after: int

    def to_dict(self) -> dict:
        counts = {level: 0 for level in (LOCAL, GLOBAL, DRAM)}
        for level in self.placement.values():
            counts[level] += 1
        return {
            "local_buffer_bytes": self.config.local_buffer_bytes,
            "global_buffer_bytes": self.config.global_buffer_bytes,
            "spill": self.config.spill,
            "offcore_bytes_before": self.offcore_bytes_before,
            "offcore_bytes_after": self.offcore_bytes_after,
            "tensors_by_level": counts,
            "placement": dict(self.placement),
            "groups": [
                {
                    "nodes": list(g.nodes),
                    "peak_bytes": g.peak_bytes,
                    "fits": g.fits,
                    "spilled": list(g.spilled),
                }
                for g in self.groups
            ],
        }


def straight_chains(graph: Graph, order: Sequence[int]) -> list[list[str]]:
    """GraphTurbo's straight merges: runs where one node is the only reader of the
    previous one's outputs and the previous one is its only producer."""
    index_of = {n.name: i for i, n in enumerate(graph.nodes)}
    groups: list[list[str]] = []
    group_of: dict[str, int] = {}
    for index in order:
        node = graph.nodes[index]
        producers = {
            graph.tensors[t].producer
            for t in node.inputs
            if t and graph.tensors[t].producer and not graph.tensors[t].is_param
        }
        if len(producers) == 1:
            (producer,) = producers
            readers = {
                c
                for o in graph.nodes[index_of[producer]].outputs
                if o
                for c in graph.tensors[o].consumers
            }
            if readers == {node.name}:
                group_of[node.name] = group_of[producer]
                groups[group_of[node.name]].append(node.name)
                continue
        group_of[node.name] = len(groups)
        groups.append([node.name])
    return groups


def fit_levels(graph: Graph, lifetimes: Lifetimes, config: LevelConfig) -> LevelFit:
    """Replay the order with ``config``'s groups, and per node, and compare."""
    order = lifetimes.order
    groups = (
        [list(g) for g in config.groups]
        if config.groups is not None
        else straight_chains(graph, order)
    )
    known = {n.name for n in graph.nodes}
    group_of: dict[str, int] = {}
    for k, group in enumerate(groups):
        for name in group:
            if name not in known:
                raise EngineError(f"group {k} names an unknown node '{name}'", code="bad_config")
            group_of[name] = k
    for index in order:  # nodes left out of every group run on their own
        name = graph.nodes[index].name
        if name not in group_of:
            group_of[name] = len(groups)
            groups.append([name])
    after = _Replay(graph, order, config, group_of).run()
    singles = {n.name: i for i, n in enumerate(graph.nodes)}
    before = _Replay(graph, order, config, singles).run()
    fits = [
        GroupFit(
            tuple(g),
            after.peaks[k],
            after.peaks[k] <= config.local_buffer_bytes,
            tuple(after.spilled[k]),
        )
        for k, g in enumerate(groups)
    ]
    return LevelFit(config, fits, after.level, before.offcore, after.offcore)


class _Replay:
    def __init__(self, graph: Graph, order: list[int], config: LevelConfig, group_of) -> None:
        self.graph, self.order, self.config, self.group_of = graph, order, config, group_of
        self.offcore = 0
        self.level: dict[str, str] = {}
        self.peaks: dict[int, int] = {}
        self.spilled: dict[int, list[str]] = defaultdict(list)

    def run(self) -> _Replay:
        graph, lb_bytes = self.graph, self.config.local_buffer_bytes
        step_of = {graph.nodes[i].name: s for s, i in enumerate(self.order)}
        inputs, outputs = set(graph.inputs), set(graph.outputs)
        tensors = [  # activations: produced by a node or fed in; no weights or constants
            t
            for t in graph.tensors.values()
            if not t.is_param and t.bytes and (t.producer is not None or t.name in inputs)
        ]
        end = len(self.order)
        last_use = {
            t.name: end if t.name in outputs else max(map(step_of.get, t.consumers), default=-1)
            for t in tensors
        }
        first_use = {t.name: step_of[t.producer] if t.producer else 0 for t in tensors}
        sizes = {t.name: t.bytes for t in tensors}
        for t in tensors:
            if t.producer is None:
                self.level[t.name] = DRAM
        local: dict[str, int] = {}  # tensor in the LB -> step of its last reader in the group
        in_global: dict[str, int] = {}  # tensor in the GB -> its last reader overall
        global_used = 0

        def send_offcore(name: str) -> None:
            nonlocal global_used
            self.offcore += sizes[name]
            room = self.config.global_buffer_bytes
            if room is None or global_used + sizes[name] <= room:
                self.level[name] = GLOBAL
                in_global[name] = last_use[name]
                global_used += sizes[name]
            else:
                self.level[name] = DRAM

        for step, index in enumerate(self.order):
            node = graph.nodes[index]
            group = self.group_of[node.name]
            for name in dict.fromkeys(n for n in (*node.inputs, *node.implicit_inputs) if n):
                if name in sizes and name not in local:
                    self.offcore += sizes[name]
            for name in node.outputs:
                if name not in sizes:
                    continue
                t = graph.tensors[name]
                inside = [step_of[c] for c in t.consumers if self.group_of[c] == group]
                self.level[name] = LOCAL
                if inside and sizes[name] <= lb_bytes:
                    local[name] = max(inside)
                outside = len(inside) < len(t.consumers) or name in outputs
                if outside or (inside and name not in local):
                    send_offcore(name)
            for name in [n for n, last in local.items() if last <= step]:
                del local[name]
            wanted = sum(sizes[n] for n in local)
            self.peaks[group] = max(self.peaks.get(group, 0), wanted)
            for name in [n for n, last in in_global.items() if last <= step]:
                global_used -= sizes[name]
                del in_global[name]
            while wanted > lb_bytes:
                victim = max(local, key=self._spill_key(sizes, first_use, last_use))
                del local[victim]
                wanted -= sizes[victim]
                self.spilled[group].append(victim)
                if self.level[victim] == LOCAL:
                    send_offcore(victim)
        return self

    def _spill_key(self, sizes, first_use, last_use):
        if self.config.spill == "largest":
            return lambda n: (sizes[n], n)
        return lambda n: (last_use[n] - first_use[n], sizes[n], n)
