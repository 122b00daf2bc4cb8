"""Stages, blocks, head and tail of a sequential CNN, as NN-Stretch branches it (MobiSys '23,
section 4.3: meeting points at stage boundaries keep the expert-designed skeleton).

The graph's own stage detector (:func:`engine.graph.structure.detect_structure`) groups
nodes by spatial resolution; NN-Stretch also needs the blocks inside a stage (its depth) and
the tensor where one stage hands over to the next (its meeting point). Both come from the
tensors that are the only live activation at their point of the execution order (cut
tensors: everything before them is done with, so branches can fork and join there):

- a cut tensor ends a **block** when a residual Add/Sum writes it, when it feeds a later
  residual Add/Sum (a skip connection starts there), or when it is strictly smaller in
  bytes than the cut tensors before and after it (the narrow end of an inverted or linear
  bottleneck: MobileNetV2's and EfficientNet's projection outputs); a span with no learned
  op (a ResNet's Relu after its Add) joins the block before it;
- a block whose output shape differs from its input starts a **stage** (a stride-2 block,
  or a channel transition at one resolution: EfficientNet-B0's 80 -> 112 channels at
  14x14), the other blocks of the stage keep the shape and can be dropped (depth scaling);
  so MobileNetV2 has its paper's 7 stages (1, 2, 3, 4, 3, 3, 1 blocks) where the resolution
  detector sees 5;
- the first stage (the stem) is the **head**, everything after the last spatial block (the
  classifier) the **tail**: neither is branched (NN-Stretch section 6.2: 11% of ResNet-50's
  latency, 15% of EfficientNet's).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.graph.ir import Graph
from engine.graph.structure import PARAMETERIZED_OPS, detect_structure
from engine.partition.problem import PartitionError, constant_nodes

RESIDUAL_OPS = frozenset({"Add", "Sum"})


class NotBranchable(PartitionError):
    """The model has no stages NN-Stretch can branch (not a sequential CNN)."""

    code = "not_applicable"


@dataclass(frozen=True)
class Block:
    """Nodes from tensor ``input`` to tensor ``output`` (node names in execution order)."""

    index: int
    nodes: tuple[str, ...]
    input: str
    output: str
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    residual: bool

    @property
    def keeps_shape(self) -> bool:
        return self.in_shape == self.out_shape

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "nodes": list(self.nodes),
            "input": self.input,
            "output": self.output,
            "in_shape": list(self.in_shape),
            "out_shape": list(self.out_shape),
            "residual": self.residual,
        }


@dataclass(frozen=True)
class Stage:
    """Blocks whose first changes the shape and the others keep it. ``removable``: the
    blocks depth scaling may drop (shape-keeping, not the first)."""

    index: int
    blocks: tuple[Block, ...]
    resolution: tuple[int, ...]
    detector_stage: int

    @property
    def input(self) -> str:
        return self.blocks[0].input

    @property
    def output(self) -> str:
        return self.blocks[-1].output

    @property
    def depth(self) -> int:
        return len(self.blocks)

    @property
    def width(self) -> int:
        return self.blocks[-1].out_shape[1]

    @property
    def removable(self) -> tuple[int, ...]:
        return tuple(k for k, b in enumerate(self.blocks) if k > 0 and b.keeps_shape)

    @property
    def nodes(self) -> list[str]:
        return [n for b in self.blocks for n in b.nodes]

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "depth": self.depth,
            "width": self.width,
            "resolution": list(self.resolution),
            "detector_stage": self.detector_stage,
            "input": self.input,
            "output": self.output,
            "removable": len(self.removable),
            "blocks": [b.to_dict() for b in self.blocks],
        }


@dataclass(frozen=True)
class StretchStructure:
    """Head, the branchable stages (``stages[0]`` is the head's stage), tail and the cut
    tensors (every place a meeting point could go, before the structure constraint)."""

    stages: tuple[Stage, ...]
    tail: tuple[str, ...]
    cuts: tuple[str, ...]
    resolution_stages: int
    constants: frozenset[str]

    @property
    def head(self) -> Stage:
        return self.stages[0]

    @property
    def body(self) -> tuple[Stage, ...]:
        """The stages that branch (all but the head)."""
        return self.stages[1:]

    @property
    def boundaries(self) -> list[str]:
        """Meeting-point candidates: each body stage's input, then the last one's output."""
        return [s.input for s in self.body] + [self.stages[-1].output]

    def to_dict(self) -> dict:
        return {
            "stages": [
                {k: v for k, v in s.to_dict().items() if k != "blocks"}
                | {"blocks": [len(b.nodes) for b in s.blocks]}
                for s in self.stages
            ],
            "head": self.head.nodes,
            "tail": list(self.tail),
            "meeting_point_candidates": self.boundaries,
            "cut_tensors": len(self.cuts),
            "resolution_stages": self.resolution_stages,
        }


def detect_stages(graph: Graph) -> StretchStructure:
    """Split ``graph`` into head, stages of blocks and tail (see the module docstring).

    Raises :class:`NotBranchable` when fewer than two stages follow the head, or a tensor
    on the way has no static shape."""
    constants = constant_nodes(graph)
    main = [n for n in graph.nodes if n.name not in constants]
    resolution_of = {}
    for s in detect_structure(graph).stages:
        for name in s.nodes:
            resolution_of[name] = (s.index, s.resolution)
    cuts = _cut_tensors(graph, main, constants)
    if not cuts:
        raise NotBranchable("no tensor is ever the only live activation: nothing to branch at")
    shapes = {t: graph.tensors[t].static_shape for t, _ in cuts}
    missing = [t for t, s in shapes.items() if s is None]
    if missing:
        raise NotBranchable(f"tensor '{missing[0]}' has no static shape", code="unknown_size")
    ends = _block_ends(graph, cuts, main)
    blocks = _blocks(graph, main, cuts, ends)
    cut_names = {t for t, _ in cuts}  # the last span may end at the graph's output: tail
    spatial = [b for b in blocks if len(b.out_shape) == 4 and b.output in cut_names]
    if not spatial:
        raise NotBranchable("no 4-D (NCHW) feature map passes between blocks: not a CNN")
    last = blocks.index(spatial[-1])
    body, tail_blocks = blocks[: last + 1], blocks[last + 1 :]
    stages: list[list[Block]] = []
    for b in body:
        if not stages or not b.keeps_shape:
            stages.append([b])
        else:
            stages[-1].append(b)
    if len(stages) < 3:
        raise NotBranchable(
            f"{len(stages)} stage(s) found; NN-Stretch needs a stem and at least two stages "
            "to branch between meeting points",
            hint="NN-Stretch branches sequential CNNs (ResNet, MobileNet, EfficientNet, RegNet).",
        )
    result = []
    for k, members in enumerate(stages):
        last_node = members[-1].nodes[-1]
        detector, resolution = resolution_of.get(last_node, (0, None))
        result.append(
            Stage(k, tuple(members), tuple(resolution or members[-1].out_shape[2:]), detector)
        )
    tail = tuple(n for b in tail_blocks for n in b.nodes)
    used = {n for b in blocks for n in b.nodes}
    leftover = tuple(n.name for n in main if n.name not in used)
    return StretchStructure(
        tuple(result),
        tail + leftover,
        tuple(t for t, _ in cuts),
        len({s.detector_stage for s in result}),
        frozenset(constants),
    )


def _cut_tensors(graph: Graph, main, constants) -> list[tuple[str, int]]:
    """``(tensor, position)`` where the tensor is the only live activation after the node
    at ``position`` of ``main`` ran (the graph input counts at position -1)."""
    weights = {
        t.name for t in graph.tensors.values() if t.producer is None and t.name not in graph.inputs
    }
    weights |= {o for n in graph.nodes if n.name in constants for o in n.outputs}
    end = len(main)
    last: dict[str, int] = {t: end for t in graph.outputs}
    for i, node in enumerate(main):
        for t in node.inputs:
            if t and t not in weights and last.get(t) != end:
                last[t] = i
    live = {t for t in graph.inputs if t in last}
    cuts = [(t, -1) for t in live] if len(live) == 1 else []
    for i, node in enumerate(main):
        for t in node.inputs:
            if last.get(t) == i:
                live.discard(t)
        for t in node.outputs:
            if t and last.get(t, -1) > i:
                live.add(t)
        if len(live) == 1 and i < end - 1:
            (t,) = live
            if not cuts or cuts[-1][0] != t:
                cuts.append((t, i))
    return cuts


def _block_ends(graph: Graph, cuts, main) -> set[str]:
    """The cut tensors that end a block (see the module docstring)."""
    producer_op = {o: n.op_type for n in main for o in n.outputs}
    readers: dict[str, list[str]] = {}
    for n in main:
        for t in n.inputs:
            readers.setdefault(t, []).append(n.op_type)
    size = [graph.tensors[t].bytes or 0 for t, _ in cuts]
    ends = {cuts[0][0]}
    for t, _ in cuts:
        users = readers.get(t, [])
        residual_input = len(users) > 1 and any(op in RESIDUAL_OPS for op in users)
        if producer_op.get(t) in RESIDUAL_OPS or residual_input:
            ends.add(t)
    # Runs of equal size (a conv, its BatchNormalization) count as one: the last of a run
    # smaller than the runs on either side ends a block.
    runs: list[tuple[int, int]] = []  # (size, index of the run's last cut)
    for k, s in enumerate(size):
        if runs and runs[-1][0] == s:
            runs[-1] = (s, k)
        else:
            runs.append((s, k))
    for r in range(1, len(runs) - 1):
        if runs[r][0] < runs[r - 1][0] and runs[r][0] < runs[r + 1][0]:
            ends.add(cuts[runs[r][1]][0])
    return ends


def _blocks(graph: Graph, main, cuts, ends: set[str]) -> list[Block]:
    position = {t: i for t, i in cuts}
    boundaries = [t for t, _ in cuts if t in ends]
    spans: list[tuple[str, str, list]] = []
    for a, b in zip(boundaries, boundaries[1:], strict=False):
        nodes = main[position[a] + 1 : position[b] + 1]
        learned = any(
            n.op_type in PARAMETERIZED_OPS and any(graph.tensors[t].is_param for t in n.inputs if t)
            for n in nodes
        )
        if spans and not learned:
            start, _, previous = spans[-1]
            spans[-1] = (start, b, previous + nodes)
        else:
            spans.append((a, b, nodes))
    tail_start = position[boundaries[-1]] + 1 if boundaries else 0
    blocks = []
    for k, (a, b, nodes) in enumerate(spans):
        names = tuple(n.name for n in nodes)
        residual = any(n.op_type in RESIDUAL_OPS and a in n.inputs for n in nodes)
        blocks.append(
            Block(
                k,
                names,
                a,
                b,
                graph.tensors[a].static_shape,
                graph.tensors[b].static_shape,
                residual,
            )
        )
    rest = main[tail_start:]
    if rest:
        last = boundaries[-1]
        out = rest[-1].outputs[0]
        shape = graph.tensors[out].static_shape or ()
        blocks.append(
            Block(
                len(blocks),
                tuple(n.name for n in rest),
                last,
                out,
                graph.tensors[last].static_shape,
                shape,
                False,
            )
        )
    return blocks
