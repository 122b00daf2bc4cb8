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

from collections.abc import Collection
from dataclasses import dataclass, field

from engine.graph.ir import Graph, Node

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
    view = _View(graph)
    return GraphStructure(
        stages=_stages(view), blocks=_blocks(view, frozenset(key_ops)), chains=_chains(view)
    )


class _View:
    """Node indices, activation edges and constant nodes, computed once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes = nodes = graph.nodes
        count = len(nodes)
        producer = {out: i for i, node in enumerate(nodes) for out in node.outputs if out}
        inputs = set(graph.inputs)
        self.reads: list[list[str]] = []  # distinct activation tensors each node reads
        self.sources: list[list[int]] = []  # distinct non-constant producers of those
        self.constant = constant = [False] * count
        self.consumers: list[list[int]] = [[] for _ in range(count)]
        users: list[list[int]] = [[] for _ in range(count)]  # every consumer, constant or not
        for i, node in enumerate(nodes):
            reads: list[str] = []
            sources: list[int] = []
            for name in dict.fromkeys((*node.inputs, *node.implicit_inputs)):
                p = producer.get(name)
                if p is not None:
                    users[p].append(i)
                    if not constant[p]:
                        reads.append(name)
                        if p not in sources:
                            sources.append(p)
                            self.consumers[p].append(i)
                elif name in inputs:
                    reads.append(name)
            constant[i] = not reads
            self.reads.append(reads)
            self.sources.append(sources)
        self.home = home = list(range(count))
        for i in reversed(range(count)):
            if constant[i] and users[i]:
                home[i] = min(home[c] for c in users[i])
        self.main = [i for i in range(count) if home[i] == i]

    def grouped(self, group_of: list[int], groups: int) -> list[list[str]]:
        """Node names per group, constants placed with their home node, in order."""
        members: list[list[str]] = [[] for _ in range(groups)]
        for i, node in enumerate(self.nodes):
            members[group_of[self.home[i]]].append(node.name)
        return members


def _stages(view: _View) -> list[Stage]:
    tensors = view.graph.tensors
    spatial: dict[str, tuple[int, ...]] = {}
    for name in view.graph.inputs:
        shape = tensors[name].static_shape
        if shape is not None and len(shape) in (4, 5) and tensors[name].dtype.startswith("float"):
            spatial[name] = shape[2:]
    resolutions: list[tuple[int, ...] | None] = [None]
    stage_of = [0] * len(view.nodes)
    for i in view.main:
        node = view.nodes[i]
        start = max((stage_of[p] for p in view.sources[i]), default=0)
        resolution = _spatial_output(node, view.reads[i], spatial, tensors)
        stage = start
        if resolution is not None and resolutions[start] is None:
            resolutions[start] = resolution
        elif resolution is not None and resolution != resolutions[start]:
            later = [k for k in range(start + 1, len(resolutions)) if resolutions[k] == resolution]
            if later:
                stage = later[0]
            else:
                stage = len(resolutions)
                resolutions.append(resolution)
        stage_of[i] = stage
    members = view.grouped(stage_of, len(resolutions))
    return [Stage(k, resolutions[k], members[k]) for k in range(len(resolutions))]


def _spatial_output(node: Node, reads: list[str], spatial: dict, tensors) -> tuple | None:
    """The resolution of the node's output if it stays spatial (marking its outputs)."""
    if node.op_type not in SPATIAL_OPS or not node.outputs or not node.outputs[0]:
        return None
    out = tensors[node.outputs[0]].static_shape
    if out is None or len(out) < 3:
        return None
    resolution = out[2:]
    if not any(len(spatial.get(t, ())) == len(resolution) for t in reads):
        return None
    for name in node.outputs:
        shape = tensors[name].static_shape if name else None
        if shape is not None and len(shape) == len(out):
            spatial[name] = shape[2:]
    return resolution


def _blocks(view: _View, key_ops: frozenset[str]) -> list[Block]:
    graph = view.graph
    end = len(view.nodes)
    last_use: dict[str, int] = {name: end for name in graph.outputs}
    for i in view.main:
        for name in view.reads[i]:
            last_use[name] = max(last_use.get(name, -1), i)
    live = sum(1 for name in graph.inputs if name in last_use)
    block_of = [0] * end
    ends: list[str | None] = []
    block = 0
    for i in view.main:
        node = view.nodes[i]
        block_of[i] = block
        for name in view.reads[i]:
            if last_use[name] == i:
                live -= 1
        outputs = 0
        for name in node.outputs:
            if last_use.get(name, -1) > i:
                outputs += 1
        live += outputs
        if node.op_type in key_ops and live == outputs and i != view.main[-1]:
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

    closing = {k: -1 for k in range(blocks)}
    for i in view.main:
        closing[block_of[i]] = i
    for i in view.main:
        if i == closing[block_of[i]] and view.nodes[i].op_type in key_ops:
            continue
        for p in view.sources[i]:
            if block_of[p] == block_of[i]:
                parent[find(p)] = find(i)
    components: list[dict[int, list[str]]] = [{} for _ in range(blocks)]
    for i, node in enumerate(view.nodes):
        home = view.home[i]
        if home == closing[block_of[home]] and view.nodes[home].op_type in key_ops:
            continue
        components[block_of[home]].setdefault(find(home), []).append(node.name)
    return [list(c.values()) if len(c) > 1 else [] for c in components]


def _chains(view: _View) -> list[Chain]:
    tensors = view.graph.tensors
    outputs = set(view.graph.outputs)
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
            and view.consumers[previous] == [i]
            and not outputs.intersection(view.nodes[previous].outputs)
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
        Chain(k, view.nodes[anchors[k] if anchors[k] is not None else last[k]].name, members[k])
        for k in range(len(anchors))
    ]
