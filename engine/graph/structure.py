"""Structure of a graph that later stages partition by: stages, key-op blocks, chains.

- **Stages** (NN-Stretch, MobiSys 2023, section 1 "G_seq" and the structure-preserving
  meeting points of section 2): runs of nodes working at one spatial resolution. A
  tensor is spatial when it is an image-like graph input (rank 4 or 5) or when a
  convolution, pooling, normalization, elementwise op and the like (``SPATIAL_OPS``)
  writes it from a spatial input of the same rank; Reshape, Transpose, Flatten, Gemm,
  MatMul and global pools leave the spatial layout. A node writing a spatial tensor at a
  new resolution starts a stage (or joins the later stage already at that resolution,
  as the parallel stride-2 branches of a reduction block do); every other node joins
  the latest stage among its inputs' producers. (NN-Stretch further splits a stage into
  blocks, one stride-2 conv then stride-1 ones; only the stages are reported here.)
- **Blocks** (hsa_cnn_partition, Algorithm 2 "SplitGraph"): the execution order cut
  after each key op (MaxPool, Concat by default). Where the paper leaves branch handling
  and residual blocks open, this cuts only where the key op's outputs are the only
  activations still live, so each block hands exactly one tensor to the next and a
  MaxPool inside a parallel branch does not split its module. ``branches`` lists a
  block's parallel paths (its nodes before the closing key op, split into connected
  components) when there is more than one.
- **Chains** (GraphTurbo, section 3 "layer"): maximal straight lines in which each node
  is its predecessor's only consumer and reads no other activation, with at most one
  parameterized op (Conv, Gemm, MatMul with a weight, recurrent and quantized products);
  Conv + BatchNormalization + Relu is one chain. Chains partition the graph.

Nodes that compute only from weights and constants (the light models' ConstantOfShape
fills, folded shape arithmetic) join the stage, block and chain of their first consumer.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Collection
from dataclasses import dataclass, field

from engine.graph.ir import Graph, Node, collector_paused

KEY_OPS = frozenset({"MaxPool", "Concat"})
"""hsa_cnn_partition's key operators: they end repeated blocks or join branches."""

SPATIAL_OPS = frozenset(
    {
        "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool",
        "LpPool", "MaxUnpool", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Pad",
        "BatchNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
        "Concat", "Split", "Slice", "Identity", "Dropout", "Cast", "Clip",
        "QuantizeLinear", "DequantizeLinear", "Sum", "Max", "Min", "Mean", "Where",
        "Abs", "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Relu", "LeakyRelu", "PRelu",
        "Elu", "Selu", "Celu", "Gelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
        "Softplus", "Softsign", "Mish", "Exp", "Log", "Sqrt", "Erf", "Reciprocal",
    }
)  # fmt: skip
"""Ops whose output keeps the NC<spatial> layout of a same-rank spatial input."""

PARAMETERIZED_OPS = frozenset(
    {
        "Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "LSTM", "GRU", "RNN",
        "ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul", "Attention",
    }
)  # fmt: skip
"""Ops that count as GraphTurbo's one learned op of a layer when they read a weight.

Normalization scales and bias adds fold into it and do not count."""


@dataclass(frozen=True)
class Stage:
    """Nodes at one spatial resolution; ``resolution`` is ``None`` for non-spatial models."""

    index: int
    resolution: tuple[int, ...] | None
    nodes: list[str]

    def to_dict(self) -> dict:
        resolution = None if self.resolution is None else list(self.resolution)
        return {"index": self.index, "resolution": resolution, "nodes": self.nodes}


@dataclass(frozen=True)
class Block:
    """A run of the execution order ending at key op ``end`` (``None`` for the tail)."""

    index: int
    end: str | None
    nodes: list[str]
    branches: list[list[str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "end": self.end,
            "nodes": self.nodes,
            "branches": self.branches,
        }


@dataclass(frozen=True)
class Chain:
    """A straight line of nodes; ``anchor`` is its parameterized op, else its last node."""

    index: int
    anchor: str
    nodes: list[str]

    def to_dict(self) -> dict:
        return {"index": self.index, "anchor": self.anchor, "nodes": self.nodes}


@dataclass(frozen=True)
class GraphStructure:
    """Result of :func:`detect_structure`; node names throughout."""

    stages: list[Stage]
    blocks: list[Block]
    chains: list[Chain]

    def to_dict(self) -> dict:
        return {
            "stages": [s.to_dict() for s in self.stages],
            "blocks": [b.to_dict() for b in self.blocks],
            "chains": [c.to_dict() for c in self.chains],
        }


def detect_structure(graph: Graph, key_ops: Collection[str] = KEY_OPS) -> GraphStructure:
    """Find the stages, key-op blocks and chains of a graph (see the module docstring)."""
    with collector_paused():
        view = _View(graph)
        return GraphStructure(
            stages=_stages(view), blocks=_blocks(view, frozenset(key_ops)), chains=_chains(view)
        )


class _View:
    """Node indices, activation edges and constant nodes, computed once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes = nodes = graph.nodes
        self.names = [node.name for node in nodes]
        count = len(nodes)
        self.producer = producer = {
            out: i for i, node in enumerate(nodes) for out in node.outputs if out
        }
        inputs = set(graph.inputs)
        self.reads: list[list[str]] = []  # distinct activation tensors each node reads
        self.sources: list[list[int]] = []  # distinct non-constant producers of those
        # Non-constant consumers of each node: how many, and the first one.
        self.consumer_count = consumer_count = [0] * count
        self.first_consumer = first_consumer = [-1] * count
        self.constant = constant = [False] * count
        users: dict[int, list[int]] = {}  # every consumer of a constant node
        add_reads, add_sources = self.reads.append, self.sources.append
        for i, node in enumerate(nodes):
            names = node.inputs
            if node.implicit_inputs:
                names = dict.fromkeys((*names, *node.implicit_inputs))
            elif len(names) > 1:
                names = dict.fromkeys(names)
            reads: list[str] = []
            sources: list[int] = []
            for name in names:
                p = producer.get(name)
                if p is None:
                    if name in inputs:
                        reads.append(name)
                elif constant[p]:
                    users.setdefault(p, []).append(i)
                else:
                    reads.append(name)
                    if p not in sources:
                        sources.append(p)
                        if not consumer_count[p]:
                            first_consumer[p] = i
                        consumer_count[p] += 1
            constant[i] = not reads
            add_reads(reads)
            add_sources(sources)
        self.home = home = list(range(count))
        for i in sorted(users, reverse=True):
            home[i] = min(home[c] for c in users[i])
        self.main = [i for i in range(count) if home[i] == i]

    def grouped(self, group_of: list[int], groups: int) -> list[list[str]]:
        """Node names per group, constants placed with their home node, in order."""
        members: list[list[str]] = [[] for _ in range(groups)]
        for name, home in zip(self.names, self.home, strict=True):
            members[group_of[home]].append(name)
        return members


def _stages(view: _View) -> list[Stage]:
    tensors = view.graph.tensors
    # The number of spatial axes of each spatial tensor.
    spatial: dict[str, int] = {}
    for name in view.graph.inputs:
        shape = tensors[name].static_shape
        if shape is not None and len(shape) in (4, 5) and tensors[name].dtype.startswith("float"):
            spatial[name] = len(shape) - 2
    resolutions: list[tuple[int, ...] | None] = [None]
    at_resolution: dict[tuple[int, ...], list[int]] = {}  # stage indices, ascending
    nodes, reads, all_sources = view.nodes, view.reads, view.sources
    stage_of = [0] * len(nodes)
    for i in view.main:
        sources = all_sources[i]
        if not sources:
            start = 0
        elif len(sources) == 1:
            start = stage_of[sources[0]]
        else:
            start = max(stage_of[p] for p in sources)
        node = nodes[i]
        resolution = None
        if node.op_type in SPATIAL_OPS:
            resolution = _spatial_output(node, reads[i], spatial, tensors)
        stage = start
        if resolution is not None and resolutions[start] is None:
            resolutions[start] = resolution
            insort(at_resolution.setdefault(resolution, []), start)
        elif resolution is not None and resolution != resolutions[start]:
            # the first later stage already at this resolution, else a new one
            same = at_resolution.setdefault(resolution, [])
            k = bisect_right(same, start)
            if k < len(same):
                stage = same[k]
            else:
                stage = len(resolutions)
                resolutions.append(resolution)
                same.append(stage)
        stage_of[i] = stage
    members = view.grouped(stage_of, len(resolutions))
    return [Stage(k, resolutions[k], members[k]) for k in range(len(resolutions))]


def _spatial_output(node: Node, reads: list[str], spatial: dict[str, int], tensors) -> tuple | None:
    """The resolution of a spatial op's output if it stays spatial (marking its outputs)."""
    outputs = node.outputs
    if not outputs or not outputs[0]:
        return None
    out = tensors[outputs[0]].static_shape
    if out is None or len(out) < 3:
        return None
    axes = len(out) - 2
    for name in reads:
        if spatial.get(name) == axes:
            break
    else:
        return None
    for name in outputs:
        shape = tensors[name].static_shape if name else None
        if shape is not None and len(shape) == len(out):
            spatial[name] = axes
    return out[2:]


def _blocks(view: _View, key_ops: frozenset[str]) -> list[Block]:
    graph = view.graph
    end = len(view.nodes)
    last_use: dict[str, int] = {name: end for name in graph.outputs}
    for i in view.main:  # ascending: a later read replaces an earlier one
        for name in view.reads[i]:
            if last_use.get(name) != end:
                last_use[name] = i
    live = sum(1 for name in graph.inputs if name in last_use)
    block_of = [0] * end
    ends: list[str | None] = []
    block = 0
    last = view.main[-1] if view.main else -1
    nodes, reads = view.nodes, view.reads
    for i in view.main:
        node = nodes[i]
        block_of[i] = block
        for name in reads[i]:
            if last_use[name] == i:
                live -= 1
        outputs = 0
        for name in node.outputs:
            if last_use.get(name, -1) > i:
                outputs += 1
        live += outputs
        if live == outputs and node.op_type in key_ops and i != last:
            ends.append(node.name)
            block += 1
    ends.append(None)
    members = view.grouped(block_of, block + 1)
    branches = _branches(view, block_of, block + 1, key_ops)
    return [Block(k, ends[k], members[k], branches[k]) for k in range(block + 1)]


def _branches(
    view: _View, block_of: list[int], blocks: int, key_ops: frozenset[str]
) -> list[list[list[str]]]:
    """Connected components of each block's nodes before its closing key op."""
    parent = list(range(len(view.nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    closing = [-1] * blocks
    for i in view.main:
        closing[block_of[i]] = i
    # a block's closing key op joins its branches and is left out of them
    closer = [c >= 0 and view.nodes[c].op_type in key_ops for c in closing]
    for i in view.main:
        block = block_of[i]
        if closer[block] and i == closing[block]:
            continue
        for p in view.sources[i]:
            if block_of[p] == block:
                parent[find(p)] = find(i)
    components: list[dict[int, list[str]]] = [{} for _ in range(blocks)]
    for name, home in zip(view.names, view.home, strict=True):
        block = block_of[home]
        if closer[block] and home == closing[block]:
            continue
        components[block].setdefault(find(home), []).append(name)
    return [list(c.values()) if len(c) > 1 else [] for c in components]


def _chains(view: _View) -> list[Chain]:
    tensors = view.graph.tensors
    # nodes writing a graph output end their chain
    exits = {view.producer[o] for o in view.graph.outputs if o in view.producer}
    chain_of = [0] * len(view.nodes)
    anchors: list[int | None] = []
    last: list[int] = []
    for i in view.main:
        node = view.nodes[i]
        weighted = node.op_type in PARAMETERIZED_OPS and any(
            tensors[t].is_param for t in node.inputs if t
        )
        sources = view.sources[i]
        previous = sources[0] if len(sources) == 1 and len(view.reads[i]) == 1 else None
        if (
            previous is not None
            and view.consumer_count[previous] == 1
            and view.first_consumer[previous] == i
            and previous not in exits
            and not (weighted and anchors[chain_of[previous]] is not None)
        ):
            chain = chain_of[previous]
        else:
            chain = len(anchors)
            anchors.append(None)
            last.append(i)
        chain_of[i] = chain
        last[chain] = i
        if weighted:
            anchors[chain] = i
    members = view.grouped(chain_of, len(anchors))
    return [
        Chain(k, view.names[anchors[k] if anchors[k] is not None else last[k]], members[k])
        for k in range(len(anchors))
    ]
