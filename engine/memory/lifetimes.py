"""Tensor usage records from an execution order, and the lower bound they imply.

As in tflite_gpu section 2.7.1: for an execution order of the nodes, each planned tensor
lives from the step of its producer to the step of its last consumer, both included; two
tensors whose intervals share a step must not share memory. Graph inputs, graph outputs
and weights are kept apart by TFLite; here each is planned or not by option (a planned
input lives from step 0, a planned output to the last step, a planned weight throughout).

With ``in_place`` an elementwise or view op's output joins the buffer of a same-sized
input that dies at that op (see :mod:`engine.memory.inplace`); planners then place
*buffers*, each a chain of one or more tensors with touching lifetimes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from engine.errors import EngineError
from engine.graph.ir import Graph
from engine.memory.inplace import may_write_in_place


@dataclass(frozen=True)
class LifetimeOptions:
    """Which tensors are planned, and whether in-place reuse is allowed."""

    plan_inputs: bool = False
    plan_outputs: bool = False
    plan_params: bool = False
    in_place: bool = False


@dataclass(frozen=True)
class TensorUse:
    """One planned tensor: ``size`` bytes, live from step ``first`` to ``last`` inclusive."""

    name: str
    size: int
    first: int
    last: int
    producer: str | None = None
    consumers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Buffer:
    """What a planner places: one tensor, or an in-place chain of same-sized tensors."""

    size: int
    first: int
    last: int
    tensors: tuple[str, ...]


@dataclass
class Lifetimes:
    """Usage records of one execution order (``order`` holds indices into ``graph.nodes``)."""

    order: list[int]
    uses: dict[str, TensorUse]
    buffers: list[Buffer]
    aliases: list[tuple[str, str]] = field(default_factory=list)
    """``(input, output)`` pairs where the output overwrites the input in place."""
    unsized: list[str] = field(default_factory=list)
    """Tensors that should be planned but whose size is unknown (left out)."""

    @property
    def steps(self) -> int:
        return len(self.order)

    def live_bytes(self) -> list[int]:
        """Bytes live at each step (a buffer counts once however many tensors it holds)."""
        return live_bytes(self.buffers, self.steps)

    def lower_bound(self) -> int:
        """The peak of :meth:`live_bytes`: no plan of these buffers can use less."""
        return max(self.live_bytes(), default=0)


class OrderError(EngineError):
    """An execution order that is not a permutation of the nodes in dependency order."""

    code = "invalid_order"


def live_bytes(buffers: Sequence[Buffer], steps: int) -> list[int]:
    """Bytes live at each of ``steps`` steps."""
    delta = [0] * (steps + 1)
    for b in buffers:
        delta[b.first] += b.size
        delta[b.last + 1] -= b.size
    return list(accumulate(delta[:steps]))


def build_lifetimes(
    graph: Graph, order: Sequence[int] | None = None, options: LifetimeOptions = LifetimeOptions()
) -> Lifetimes:
    """Usage records of ``graph`` run in ``order`` (default: the graph's own node order).

    Raises :class:`OrderError` when ``order`` is not a topological order of all nodes.
    """
    return UsageTable(graph, options).lifetimes(order)


class UsageTable:
    """What does not depend on the order, computed once: which tensors are planned, their
    sizes, producers and readers as node indices, and the in-place candidates.

    :meth:`peak` scores an order without building records, for the order search.
    """

    # How a tensor's lifetime follows from the order.
    _NORMAL, _INPUT, _OUTPUT, _WHOLE = range(4)

    def __init__(self, graph: Graph, options: LifetimeOptions = LifetimeOptions()) -> None:
        self.graph, self.options = graph, options
        self.n_nodes = len(graph.nodes)
        index_of = {n.name: i for i, n in enumerate(graph.nodes)}
        inputs, outputs = set(graph.inputs), set(graph.outputs)
        self.names: list[str] = []
        self.sizes: list[int] = []
        self.kinds: list[int] = []
        self.producers: list[int] = []  # node index, -1 for none
        self.readers: list[list[int]] = []  # node indices, each once
        self.unsized: list[str] = []
        self.read_before_write: list[tuple[int, list[int], str]] = []
        for t in graph.tensors.values():
            if t.is_param or (t.producer is None and t.name not in inputs):
                planned, kind = options.plan_params, self._WHOLE
            elif t.name in inputs:
                planned, kind = options.plan_inputs, self._INPUT
            elif t.name in outputs:
                planned, kind = options.plan_outputs, self._OUTPUT
            else:
                planned, kind = True, self._NORMAL
            readers = [index_of[c] for c in dict.fromkeys(t.consumers)]
            producer = -1 if t.producer is None else index_of[t.producer]
            if producer >= 0 and readers:  # every order must keep these dependencies
                self.read_before_write.append((producer, readers, t.name))
            if not planned:
                continue
            if t.bytes is None:
                self.unsized.append(t.name)
            elif t.bytes > 0:
                self.names.append(t.name)
                self.sizes.append(t.bytes)
                self.kinds.append(kind)
                self.producers.append(producer)
                self.readers.append(readers)
        self._in_outputs = [name in outputs for name in self.names]
        self._in_place = self._in_place_candidates() if options.in_place else []

    def freed_by_readers(self, k: int) -> bool:
        """True when tensor ``k``'s lifetime ends at its last reader (not at the end)."""
        kind = self.kinds[k]
        return kind == self._NORMAL or (kind == self._INPUT and not self._in_outputs[k])

    def _in_place_candidates(self) -> list[tuple[int, int, list[int]]]:
        """``(node, output tensor, input tensors)`` for ops that may write in place."""
        position = {name: k for k, name in enumerate(self.names)}
        found = []
        for i, node in enumerate(self.graph.nodes):
            out = position.get(node.outputs[0]) if node.outputs else None
            if out is None or self.kinds[out] not in (self._NORMAL, self._OUTPUT):
                continue
            if not may_write_in_place(node.op_type, node.domain):
                continue
            # Only intermediates: graph inputs belong to the caller, weights to everyone.
            ins = [
                position[n]
                for n in dict.fromkeys(n for n in node.inputs if n)
                if n in position and self.kinds[position[n]] == self._NORMAL
            ]
            if ins:
                found.append((i, out, ins))
        return found

    def spans(self, order: Sequence[int] | None = None) -> tuple[list[int], list[int], list[int]]:
        """``(order, first, last)``: per planned tensor its first and last step."""
        order = list(range(self.n_nodes)) if order is None else list(order)
        step = [-1] * self.n_nodes
        for s, i in enumerate(order):
            if not 0 <= i < self.n_nodes or step[i] >= 0:
                break
            step[i] = s
        if len(order) != self.n_nodes or -1 in step:
            raise OrderError("the execution order must list every node exactly once")
        for producer, readers, name in self.read_before_write:
            if min(step[r] for r in readers) <= step[producer]:
                node = self.graph.nodes[producer].name
                raise OrderError(f"tensor '{name}' is read before node '{node}' writes it")
        end = max(self.n_nodes - 1, 0)
        first, last = [], []
        for kind, producer, readers, is_output in zip(
            self.kinds, self.producers, self.readers, self._in_outputs, strict=True
        ):
            if kind == self._WHOLE:
                f, la = 0, end
            elif kind == self._INPUT:
                f, la = 0, end if is_output else max((step[r] for r in readers), default=0)
            else:
                f = step[producer]
                la = end if kind == self._OUTPUT else max((step[r] for r in readers), default=f)
            first.append(f)
            last.append(la)
        return order, first, last

    def _aliases(self, order, first: list[int], last: list[int]) -> list[tuple[int, int]]:
        step = {i: s for s, i in enumerate(order)}
        pairs = []
        for node, out, ins in self._in_place:
            s = step[node]
            for k in ins:
                if last[k] == s and self.sizes[k] == self.sizes[out]:
                    pairs.append((k, out))
                    break
        pairs.sort(key=lambda p: first[p[1]])
        return pairs

    def _chains(self, aliases: list[tuple[int, int]]) -> list[list[int]]:
        after = dict(aliases)
        joined = set(after.values())
        chains = []
        for k in range(len(self.names)):
            if k in joined:
                continue
            chain = [k]
            while chain[-1] in after:
                chain.append(after[chain[-1]])
            chains.append(chain)
        return chains

    def peak(self, order: Sequence[int]) -> int:
        """The lower bound of ``order`` (what :meth:`Lifetimes.lower_bound` would give)."""
        order, first, last = self.spans(order)
        delta = [0] * (len(order) + 1)
        for chain in self._chains(self._aliases(order, first, last)):
            size = self.sizes[chain[0]]
            delta[first[chain[0]]] += size
            delta[last[chain[-1]] + 1] -= size
        return max(accumulate(delta[: len(order)]), default=0)

    def lifetimes(self, order: Sequence[int] | None = None) -> Lifetimes:
        """The usage records of ``order``."""
        order, first, last = self.spans(order)
        names, graph = self.names, self.graph
        uses = {}
        for k, name in enumerate(names):
            producer = self.producers[k]
            uses[name] = TensorUse(
                name,
                self.sizes[k],
                first[k],
                last[k],
                None if producer < 0 else graph.nodes[producer].name,
                tuple(graph.nodes[r].name for r in self.readers[k]),
            )
        aliases = self._aliases(order, first, last)
        buffers = [
            Buffer(self.sizes[c[0]], first[c[0]], last[c[-1]], tuple(names[k] for k in c))
            for c in self._chains(aliases)
        ]
        buffers.sort(key=lambda b: (b.first, b.last, b.tensors[0]))
        named = [(names[a], names[b]) for a, b in aliases]
        return Lifetimes(order, uses, buffers, named, list(self.unsized))
