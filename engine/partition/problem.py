"""The partitioning problem: ops, the tensors between them, compute units and links.

A :class:`PartitionProblem` is what every algorithm in this package reads, whatever built it
(the analyzed ONNX graph and a target's cost model, or a synthetic DAG for tests). It follows
HOPE's formalization (thesis 3.6, section 4.2 of the summary): ``latency_us[op][unit]`` is
``cl_{i,j}``, ``None`` where the unit cannot run the op (``+inf`` in the thesis), and moving a
tensor of ``b`` bytes from unit ``a`` to unit ``c`` costs ``latency_us + b / bandwidth`` of the
link ``a -> c``. Units without a link share memory: moving between them is free (big and
LITTLE cores).

What differs from the thesis: a transfer is per tensor and destination unit (a tensor read
by three ops on the GPU is copied once), graph inputs start on the ``home`` unit and graph
outputs must end there, and weights are resident on every unit (constant subgraphs are not
ops of the problem).

Unknown stays unknown (ARCHITECTURE 5): a tensor whose size is not known has ``bytes=None``,
never 0. Moving it over a link cannot be priced, so a problem in which some plan could do
that (:attr:`PartitionProblem.unpriced`) is refused by every algorithm but the mobile-cloud
split, which only leaves out the cuts that would send it. Moving it between units that
share memory is free whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from engine.errors import EngineError
from engine.graph.ir import Graph, Node


class PartitionError(EngineError):
    """A partitioning problem or option the engine cannot work with."""

    code = "partition_error"


@dataclass(frozen=True)
class Op:
    """One schedulable operator (a graph node, or several merged into a super-op)."""

    name: str
    op_type: str = ""


@dataclass(frozen=True)
class Tensor:
    """A value between ops. ``src`` is ``None`` for a graph input (it starts on the home unit);
    ``is_output`` marks a graph output (it must reach the home unit). ``bytes`` is ``None``
    when the size is unknown."""

    name: str
    bytes: int | None
    src: int | None
    dsts: tuple[int, ...]
    is_output: bool = False


@dataclass(frozen=True)
class Link:
    """Moving ``b`` bytes from ``src`` to ``dst`` takes ``latency_us + b / (gbps * 1e3)`` us.

    ``gbps`` is in gigabytes per second, like a unit's ``mem_bw_gbps``.
    """

    src: str
    dst: str
    latency_us: float
    gbps: float

    def transfer_us(self, nbytes: int) -> float:
        return self.latency_us + nbytes / (self.gbps * 1e3)


@dataclass(frozen=True)
class UnitPower:
    """Power draw of a unit in watts; energy-first objectives use ``active_w - idle_w``."""

    active_w: float
    idle_w: float = 0.0


@dataclass(frozen=True)
class Network:
    """A mobile-to-cloud network (thesis 3.5): round trip, bandwidths in megabits per second
    and radio power. An unknown ``down_mbps`` makes downloading the result free, as the
    thesis's cost model has it (the round trip stands in for it)."""

    name: str
    rtt_ms: float
    up_mbps: float
    down_mbps: float | None
    radio_w: float | None

    def upload_s(self, nbytes: int) -> float:
        """``T_t = T_ttl + v_p / b`` (thesis eq. 3-1), in seconds."""
        return self.rtt_ms / 1e3 + nbytes * 8 / (self.up_mbps * 1e6)

    def upload_j(self, nbytes: int) -> float | None:
        """``E_t = w * T_t`` (thesis eq. 3-2), in joules; ``None`` without the radio power."""
        return None if self.radio_w is None else self.radio_w * self.upload_s(nbytes)


@dataclass(frozen=True)
class Edge:
    """A dependency ``src -> dst`` carrying tensor ``tensor`` (an index into ``tensors``)."""

    src: int
    dst: int
    bytes: int | None
    tensor: int


@dataclass(frozen=True)
class PartitionProblem:
    """Ops in topological order, their latency per unit, the tensors and the links.

    ``latency_us[i][u]`` is op ``i`` on unit ``units[u]`` in microseconds, or ``None`` when
    the unit does not support it. ``home_unit`` holds the graph inputs and must receive the
    outputs (default: the first unit). ``network`` and ``cloud_unit`` describe a mobile-cloud
    setup: the links between every other unit and the cloud then come from the network.
    """

    ops: tuple[Op, ...]
    units: tuple[str, ...]
    latency_us: tuple[tuple[float | None, ...], ...]
    tensors: tuple[Tensor, ...] = ()
    links: tuple[Link, ...] = ()
    home_unit: str | None = None
    power: Mapping[str, UnitPower] = field(default_factory=dict)
    network: Network | None = None
    cloud_unit: str | None = None
    notes: tuple[str, ...] = ()
    """Assumptions made building the problem (unknown numbers replaced), shown to users."""

    def __post_init__(self) -> None:
        n, names = len(self.ops), set(self.units)
        if len(names) != len(self.units) or not self.units:
            raise PartitionError("units must be non-empty and unique")
        if len(self.latency_us) != n or any(len(row) != len(self.units) for row in self.latency_us):
            raise PartitionError("latency_us must have one row per op and one entry per unit")
        for i, row in enumerate(self.latency_us):
            if all(v is None for v in row):
                raise PartitionError(
                    f"no unit can run op '{self.ops[i].name}' ({self.ops[i].op_type})",
                    code="unplaceable",
                )
            if any(v is not None and (v < 0 or not math.isfinite(v)) for v in row):
                raise PartitionError(f"op '{self.ops[i].name}' has a negative or infinite latency")
        for t in self.tensors:
            if t.bytes is not None and t.bytes < 0:
                raise PartitionError(f"tensor '{t.name}' has a negative size")
            if t.src is not None and not 0 <= t.src < n:
                raise PartitionError(f"tensor '{t.name}' has an unknown producer")
            if any(not 0 <= d < n or (t.src is not None and d <= t.src) for d in t.dsts):
                raise PartitionError(f"tensor '{t.name}' breaks the topological order of ops")
        for link in self.links:
            if link.src not in names or link.dst not in names or link.gbps <= 0:
                raise PartitionError(f"bad link {link.src} -> {link.dst}")
        for unit in (self.home_unit, self.cloud_unit):
            if unit is not None and unit not in names:
                raise PartitionError(f"unknown unit '{unit}'")
        if (self.network is None) != (self.cloud_unit is None):
            raise PartitionError("a mobile-cloud problem needs both a network and a cloud unit")

    # -- derived views, computed once -------------------------------------------------------

    @property
    def n(self) -> int:
        return len(self.ops)

    @cached_property
    def unit_index(self) -> dict[str, int]:
        return {u: i for i, u in enumerate(self.units)}

    @cached_property
    def home(self) -> int:
        """Index of the unit that holds graph inputs and receives outputs."""
        return self.unit_index[self.home_unit] if self.home_unit else 0

    @cached_property
    def edges(self) -> tuple[Edge, ...]:
        return tuple(
            Edge(t.src, d, t.bytes, k)
            for k, t in enumerate(self.tensors)
            if t.src is not None
            for d in t.dsts
        )

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        """Distinct predecessor ops of each op, ascending."""
        found: list[set[int]] = [set() for _ in self.ops]
        for e in self.edges:
            found[e.dst].add(e.src)
        return tuple(tuple(sorted(p)) for p in found)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        found: list[set[int]] = [set() for _ in self.ops]
        for e in self.edges:
            found[e.src].add(e.dst)
        return tuple(tuple(sorted(s)) for s in found)

    @cached_property
    def in_tensors(self) -> tuple[tuple[int, ...], ...]:
        """Tensors each op reads, graph inputs included."""
        found: list[list[int]] = [[] for _ in self.ops]
        for k, t in enumerate(self.tensors):
            for d in dict.fromkeys(t.dsts):
                found[d].append(k)
        return tuple(tuple(f) for f in found)

    @cached_property
    def supported(self) -> tuple[tuple[int, ...], ...]:
        """Unit indices that can run each op."""
        return tuple(
            tuple(u for u, v in enumerate(row) if v is not None) for row in self.latency_us
        )

    @cached_property
    def link_table(self) -> tuple[tuple[Link | None, ...], ...]:
        """``link_table[a][b]``: the link from unit ``a`` to ``b``; ``None``: shared memory."""
        table: list[list[Link | None]] = [[None] * len(self.units) for _ in self.units]
        for link in self.links:
            table[self.unit_index[link.src]][self.unit_index[link.dst]] = link
        if self.network is not None and self.cloud_unit is not None:
            net, cloud = self.network, self.unit_index[self.cloud_unit]
            for u, name in enumerate(self.units):
                if u != cloud:
                    table[u][cloud] = Link(
                        name, self.cloud_unit, net.rtt_ms * 1e3, net.up_mbps / 8e3
                    )
                    down = net.down_mbps
                    table[cloud][u] = Link(self.cloud_unit, name, 0.0, down / 8e3) if down else None
        return tuple(tuple(row) for row in table)

    def transfer_us(self, nbytes: int | None, a: int, b: int) -> float:
        """Time to move ``nbytes`` from unit ``a`` to unit ``b`` (0 on shared memory, whatever
        the size). Raises :class:`PartitionError` for an unknown size over a link: callers
        work on problems without :attr:`unpriced` tensors, or check the move first."""
        link = self.link_table[a][b] if a != b else None
        if link is None:
            return 0.0
        if nbytes is None:
            raise PartitionError(
                f"moving a tensor of unknown size from {self.units[a]} to "
                f"{self.units[b]} cannot be priced"
            )
        return link.transfer_us(nbytes)

    def _linked(self, sources: Sequence[int], targets: Sequence[int]) -> bool:
        table = self.link_table
        return any(a != b and table[a][b] is not None for a in sources for b in targets)

    def _source_units(self, t: Tensor) -> tuple[int, ...]:
        return (self.home,) if t.src is None else self.supported[t.src]

    @cached_property
    def unpriced(self) -> tuple[int, ...]:
        """Tensors of unknown size that some plan would move over a link: from a unit that
        can hold them to a unit that can read them, or (graph outputs) back home."""
        found = []
        for k, t in enumerate(self.tensors):
            if t.bytes is not None:
                continue
            sources = self._source_units(t)
            if any(self._linked(sources, self.supported[d]) for d in t.dsts) or (
                t.is_output and t.src is not None and self._linked(sources, (self.home,))
            ):
                found.append(k)
        return tuple(found)

    def unpriced_moves(self, placement: Sequence[int]) -> list[int]:
        """Tensors of unknown size that ``placement`` moves over a link."""
        found = []
        for k in self.unpriced:
            t = self.tensors[k]
            src = self.home if t.src is None else placement[t.src]
            targets = [placement[d] for d in t.dsts] + ([self.home] if t.is_output else [])
            if self._linked((src,), targets):
                found.append(k)
        return found

    def require_priced(self) -> None:
        """Raise :class:`PartitionError` naming the tensors in :attr:`unpriced`."""
        if not self.unpriced:
            return
        raise PartitionError(
            "cannot price the transfers between units: "
            + describe_tensors(self, self.unpriced)
            + " may cross units but the size is unknown",
            code="unknown_size",
            hint="Give the inputs' shapes, or simplify the model so that every tensor has a "
            "known shape and type.",
        )

    @cached_property
    def release_us(self) -> tuple[tuple[float, ...], ...]:
        """Earliest start of each op on each unit: its graph inputs moved from home."""
        home = self.home
        rows = []
        for reads in self.in_tensors:
            inputs = [self.tensors[k] for k in reads if self.tensors[k].src is None]
            rows.append(
                tuple(
                    max((self.transfer_us(t.bytes, home, u) for t in inputs), default=0.0)
                    for u in range(len(self.units))
                )
            )
        return tuple(rows)

    @cached_property
    def output_us(self) -> tuple[tuple[float, ...], ...]:
        """Time after an op finishes on each unit until its graph outputs reach home."""
        home = self.home
        rows = [[0.0] * len(self.units) for _ in self.ops]
        for t in self.tensors:
            if t.is_output and t.src is not None:
                for u in range(len(self.units)):
                    rows[t.src][u] = max(rows[t.src][u], self.transfer_us(t.bytes, u, home))
        return tuple(tuple(r) for r in rows)

    @cached_property
    def full_units(self) -> tuple[int, ...]:
        """Units that support every op (candidates for a single-unit baseline)."""
        return tuple(
            u for u in range(len(self.units)) if all(row[u] is not None for row in self.latency_us)
        )

    def min_latency(self, i: int) -> float:
        return min(v for v in self.latency_us[i] if v is not None)


LatencyFn = Callable[[Node, str], "float | None"]
"""``latency_fn(node, unit_name) -> latency_us`` or ``None`` when the unit cannot run it."""


def problem_from_graph(
    graph: Graph,
    units: Sequence[str],
    latency_fn: LatencyFn,
    links: Sequence[Link] = (),
    *,
    home_unit: str | None = None,
    power: Mapping[str, UnitPower] | None = None,
    network: Network | None = None,
    cloud_unit: str | None = None,
    notes: Sequence[str] = (),
) -> PartitionProblem:
    """Build the problem from the analyzed graph IR (``analyze_model(...).graph``).

    Constant subgraphs (nodes computed from weights only, like the ``ConstantOfShape`` fills
    of the bundled light models) are weights, not ops: they are resident on every unit and
    duplicated into each sub-model by :mod:`engine.partition.export`.
    """
    constant = constant_nodes(graph)
    nodes = [n for n in graph.nodes if n.name not in constant]
    index = {n.name: i for i, n in enumerate(nodes)}
    ops = tuple(Op(n.name, n.op_type) for n in nodes)
    latency = tuple(tuple(_checked(latency_fn(n, u)) for u in units) for n in nodes)
    outputs = set(graph.outputs)
    tensors = []
    for t in graph.tensors.values():
        if t.is_param or (t.producer is not None and t.producer in constant):
            continue
        if t.producer is None and t.name not in graph.inputs:
            continue  # an initializer that is not a weight (shapes, indices): resident too
        dsts = tuple(sorted({index[c] for c in t.consumers if c in index}))
        src = index.get(t.producer) if t.producer is not None else None
        if dsts or (src is not None and t.name in outputs):
            tensors.append(Tensor(t.name, t.bytes, src, dsts, t.name in outputs))
    return PartitionProblem(
        ops=ops,
        units=tuple(units),
        latency_us=latency,
        tensors=tuple(tensors),
        links=tuple(links),
        home_unit=home_unit,
        power=dict(power or {}),
        network=network,
        cloud_unit=cloud_unit,
        notes=tuple(notes),
    )


def constant_nodes(graph: Graph) -> set[str]:
    """Names of nodes whose every input is a weight or another constant node's output."""
    known = {
        t.name for t in graph.tensors.values() if t.producer is None and t.name not in graph.inputs
    }
    constant: set[str] = set()
    for node in graph.nodes:  # topological order: producers come first
        reads = [n for n in (*node.inputs, *node.implicit_inputs) if n]
        if not node.subgraph_nodes and all(r in known for r in reads):
            constant.add(node.name)
            known.update(o for o in node.outputs if o)
    return constant


def describe_tensors(problem: PartitionProblem, indices: Sequence[int], limit: int = 5) -> str:
    """``tensor x (output of node n (Op)), ...`` for the first ``limit`` tensors."""
    parts = []
    for k in indices[:limit]:
        t = problem.tensors[k]
        made_by = (
            "a graph input"
            if t.src is None
            else f"output of node {problem.ops[t.src].name} ({problem.ops[t.src].op_type})"
        )
        parts.append(f"tensor {t.name} ({made_by})")
    if len(indices) > limit:
        parts.append(f"and {len(indices) - limit} more")
    return ", ".join(parts)


def _checked(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None
