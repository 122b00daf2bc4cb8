"""The design space of NN-Stretch and how its constraints narrow it (MobiSys '23, sections
4.2 and 4.3), to a final grid of at most ``max_grid`` designs.

A design is a processor combination (one branch per processor: N_branch = N_processor), a
set of meeting points (stage boundaries; the end of the last stage always is one) and, for
every segment between meeting points and every branch, a depth ratio ``r_d`` and a width
ratio ``r_w`` (:mod:`.branch`). The count after each step is exact (a dynamic program over
the meeting-point positions, products over branches); the steps, in order:

1. **any layer**: meeting points at any cut tensor of the body, a branch of any depth (1 to
   the segment's learned layers) and any width (1 to its channels) - the unconstrained space;
2. **stage boundaries** (accuracy: structure-preserving meeting points, section 4.3);
3. **whole blocks, eighths**: depth drops whole shape-keeping blocks, ratios on a grid of
   eighths (widths in multiples of 8 channels);
4. **ratio floor** (accuracy: capacity-guaranteed scaling; the paper's example uses 0.5):
   depth and width ratios of at least ``ratio_floor``;
5. **meeting points >= N_meet_min** (accuracy: enough feature exchange);
6. **Eq. 4, communication amortised**: a segment's communication (the slowest remote
   branch: the segment's input out to it, its share of the output back) is at most
   ``alpha`` times the segment's latency on the fastest processor;
7. **scaling direction** (section 4.2): a GPU or DSP branch is scaled more in depth than in
   width (``r_d <= r_w``, wide and shallow), a CPU branch more in width (``r_w <= r_d``);
8. **Eq. 5, straggler bound**: a branch's latency on its processor is at most ``beta``
   times the original segment's on the fastest processor (``beta_reference="fastest"``,
   the paper's definition of proc_i) or on its own (``"own"``, the other reading of the
   equation's index);
9. **Eq. 6, work in proportion to throughput**: each branch's share of the segment's FLOPs
   is within ``balance_tol`` (relative) of its processor's share of throughput (FLOPs per
   microsecond on the original segment);
10. **capacity kept**: the branches' FLOPs (restore convs included) are within
    ``capacity_tol`` of the original segment's (section 4: copy, then shrink back to the
    original size);
11. **final grid**: the ``max_grid`` designs with the least latency under the per-segment
    model (head + per segment the slowest branch with its communication + the concat +
    tail), which the shared simulator then replays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from engine.graph.costs import cost_node
from engine.graph.ir import Graph
from engine.graph.tensors import tensor_bytes
from engine.partition.nnstretch.branch import (
    Branched,
    NodeSpec,
    WidthUnsupported,
    _Original,
    build_body,
    kept_blocks,
    restore_conv,
    split_channels,
)
from engine.partition.nnstretch.pricing import Pricer
from engine.partition.nnstretch.structure import StretchStructure
from engine.partition.problem import PartitionError
from engine.partition.registry import NoPlan

GRID = tuple(k / 8 for k in range(1, 9))
ACCELERATORS = frozenset({"gpu", "dsp", "npu", "dsa", "tpu"})


@dataclass(frozen=True)
class StretchOptions:
    """The constraints' parameters (module docstring); defaults after the paper: alpha 0.1
    (L205), beta 1.1 ("usually 1.1 or 1.2", L217), ratio floor 0.5 (the Fig. 8 example)."""

    alpha: float = 0.1
    beta: float = 1.1
    beta_reference: str = "fastest"
    ratio_floor: float = 0.5
    min_meet: int = 2
    balance_tol: float = 0.25
    capacity_tol: float = 0.15
    max_grid: int = 20
    max_branches: int = 3

    def __post_init__(self) -> None:
        if not self.alpha > 0 or not self.beta > 0:
            raise PartitionError("alpha and beta must be positive", code="usage")
        if self.beta_reference not in ("fastest", "own"):
            raise PartitionError("beta_reference must be 'fastest' or 'own'", code="usage")
        if not 0 < self.ratio_floor <= 1:
            raise PartitionError("the ratio floor must be in (0, 1]", code="usage")
        if self.min_meet < 1 or self.max_grid < 1 or self.max_branches < 2:
            raise PartitionError(
                "min_meet and max_grid must be at least 1, max_branches at least 2", code="usage"
            )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Option:
    """One branch scaling of a segment: nominal ratios, what they realise, what it costs
    before its restore conv (FLOPs, microseconds per unit)."""

    depth_ratio: float
    width_ratio: float
    kept: tuple[tuple[int, ...], ...]
    out_channels: int
    flops: int
    latency_us: dict[str, float | None]

    @property
    def blocks(self) -> int:
        return sum(len(k) for k in self.kept)

    def realised(self, segment: Segment) -> tuple[float, float]:
        """``(depth, width)`` ratios it reaches: kept blocks over the segment's, output
        channels over its output width."""
        return self.blocks / segment.depth, self.out_channels / segment.width


@dataclass
class Segment:
    """Stages ``first``..``last`` (body indices, inclusive) and their original cost."""

    first: int
    last: int
    flops: int
    latency_us: dict[str, float]
    depth: int
    width: int
    input: str
    output: str
    input_bytes: int
    spatial: tuple[int, ...]
    dtype: str = "float32"
    options: list[Option] = field(default_factory=list)
    width_scalable: bool = True

    @property
    def fastest_us(self) -> float:
        return min(self.latency_us.values())


@dataclass
class BranchChoice:
    unit: str
    option: Option
    restore_channels: int
    flops: int
    latency_us: float
    comm_in_us: float
    comm_out_us: float

    def to_dict(self, segment: Segment) -> dict:
        o = self.option
        return {
            "unit": self.unit,
            "depth": o.blocks,
            "width": o.out_channels,
            "depth_ratio": round(o.blocks / segment.depth, 4),
            "width_ratio": round(o.out_channels / segment.width, 4),
            "nominal": {"depth": o.depth_ratio, "width": o.width_ratio},
            "kept_blocks": [list(k) for k in o.kept],
            "restore_channels": self.restore_channels,
            "flops": self.flops,
            "latency_ms": round(self.latency_us / 1e3, 6),
            "comm_in_ms": round(self.comm_in_us / 1e3, 6),
            "comm_out_ms": round(self.comm_out_us / 1e3, 6),
        }


@dataclass
class SegmentChoice:
    segment: Segment
    branches: list[BranchChoice]
    concat_us: float

    @property
    def comm_us(self) -> float:
        return max(b.comm_in_us + b.comm_out_us for b in self.branches)

    @property
    def latency_us(self) -> float:
        return max(b.latency_us + b.comm_in_us + b.comm_out_us for b in self.branches) + (
            self.concat_us
        )


@dataclass
class Design:
    units: tuple[str, ...]
    segments: list[SegmentChoice]
    predicted_us: float  # the per-segment model (step 11), before the simulator
    rank: int = 0


@dataclass
class SearchResult:
    steps: list[dict]
    grid: list[Design]
    segments: dict[tuple[int, int], Segment]
    head_us: float
    tail_us: float
    combos: list[dict]
    throughput: dict[tuple[int, int], dict[str, float]]


def run_search(
    structure: StretchStructure,
    graph: Graph,
    pricer: Pricer,
    options: StretchOptions,
    progress=None,
) -> SearchResult:
    """Enumerate, constrain and rank the designs (module docstring); raises
    :class:`NoPlan` with the step that emptied the space."""
    report = progress or (lambda f, m: None)
    original = _Original(graph, structure)
    body = structure.body
    n = len(body)
    nodes = {node.name: node for node in graph.nodes}
    usable, combos = _combos(structure, graph, nodes, pricer, options)
    report(0.1, f"NN-Stretch: pricing {n} stages' scalings on {', '.join(usable)}")
    segments: dict[tuple[int, int], Segment] = {}
    stage_cache: dict = {}
    for i in range(n):
        for j in range(i, n):
            segments[(i, j)] = _segment(
                original, structure, nodes, pricer, usable, i, j, options, stage_cache
            )
    home = pricer.home
    head_us = sum(pricer.op_us(nodes[x], graph, home) or 0.0 for x in structure.head.nodes)
    tail_us = sum(pricer.op_us(nodes[x], graph, home) or 0.0 for x in structure.tail)
    steps = _static_steps(structure, graph, nodes, segments, combos, options)
    report(0.4, "NN-Stretch: applying the latency constraints")
    # Throughput of each processor on each segment: FLOPs per microsecond (Eq. 6).
    throughput = {
        key: {u: seg.flops / seg.latency_us[u] for u in usable} for key, seg in segments.items()
    }
    per_combo: dict[tuple[str, ...], dict] = {
        combo: {
            key: _constrain(pricer, seg, combo, throughput[key], options, stage_cache)
            for key, seg in segments.items()
        }
        for combo in combos
    }
    emptied_by: dict[tuple[str, ...], str | None] = dict.fromkeys(combos)
    for name, kind, detail in _LATENCY_STEPS:
        total = 0
        for combo in combos:
            counts = {key: data["counts"][name] for key, data in per_combo[combo].items()}
            left = _count_partitions(n, lambda i, j, c=counts: c[(i, j - 1)], options.min_meet)
            if not left and emptied_by[combo] is None:
                emptied_by[combo] = name
            total += left
        steps.append(_step(name, kind, detail(options), total))
    report(0.6, "NN-Stretch: ranking the designs left")
    grid = []
    for combo in combos:
        grid.extend(
            _k_best(n, per_combo[combo], combo, options, head_us + tail_us, options.max_grid)
        )
    grid.sort(key=lambda d: d.predicted_us)
    grid = grid[: options.max_grid]
    for k, d in enumerate(grid):
        d.rank = k
    steps.append(
        _step(
            "final grid",
            "search",
            f"the {options.max_grid} designs with the least latency under the per-segment "
            "model, replayed by the shared simulator",
            len(grid),
        )
    )
    combos_out = [
        {
            "units": list(c),
            "designs_in_grid": sum(1 for d in grid if d.units == c),
            "emptied_by": emptied_by[c],
        }
        for c in combos
    ]
    if not grid:
        emptied = next((s for s in steps if s["count"] == 0), steps[-1])
        raise NoPlan(
            f"no branched design satisfies the constraints: none is left after "
            f"'{emptied['step']}' ({emptied['detail']})",
            details={"candidate_counts": steps, "combinations": combos_out},
        )
    return SearchResult(steps, grid, segments, head_us, tail_us, combos_out, throughput)


# -- processors ------------------------------------------------------------------------------


def _combos(structure, graph, nodes, pricer: Pricer, options: StretchOptions):
    """Units that can run every op of the body, and their combinations of 2 or more."""
    usable = []
    for unit in pricer.units:
        missing = next(
            (
                x
                for s in structure.body
                for x in s.nodes
                if pricer.op_us(nodes[x], graph, unit) is None
            ),
            None,
        )
        if missing is None:
            usable.append(unit)
        else:
            pricer.unusable[unit] = f"cannot run {missing} ({nodes[missing].op_type})"
    if len(usable) < 2:
        raise NoPlan(
            f"NN-Stretch needs two processors that run every op of the body; usable: "
            f"{', '.join(usable) or 'none'}",
            details={"unusable": dict(pricer.unusable)},
        )
    combos = [
        c
        for size in range(2, min(options.max_branches, len(usable)) + 1)
        for c in combinations(usable, size)
    ]
    return usable, combos


# -- segments and their options ------------------------------------------------------------


def _segment(original, structure, nodes, pricer, usable, i, j, options, cache) -> Segment:
    graph = original.graph
    stages = structure.body[i : j + 1]
    for k in range(i, j + 1):
        if ("original", k) not in cache:
            names = structure.body[k].nodes
            cache[("original", k)] = (
                {u: sum(pricer.op_us(nodes[x], graph, u) for x in names) for u in usable},
                sum(_flops(nodes[x], graph) for x in names),
            )
    latency = {u: sum(cache[("original", k)][0][u] for k in range(i, j + 1)) for u in usable}
    flops = sum(cache[("original", k)][1] for k in range(i, j + 1))
    first, last = stages[0], stages[-1]
    out_shape = graph.tensors[last.output].static_shape
    seg = Segment(
        first=i,
        last=j,
        flops=flops,
        latency_us=latency,
        depth=sum(s.depth for s in stages),
        width=last.width,
        input=first.input,
        output=last.output,
        input_bytes=graph.tensors[first.input].bytes,
        spatial=tuple(out_shape[2:]),
        dtype=graph.tensors[last.output].dtype,
    )
    ratios = [r for r in GRID if r >= options.ratio_floor - 1e-9]
    seen = set()
    for rd in ratios:
        kept = tuple(kept_blocks(s, rd) for s in stages)
        for rw in ratios:
            if (kept, rw) in seen:
                continue
            seen.add((kept, rw))
            try:
                option = _option(original, structure, pricer, usable, i, j, rd, rw, cache)
            except WidthUnsupported:
                seg.width_scalable = False
                continue
            seg.options.append(option)
    return seg


def _option(original, structure, pricer, usable, i, j, rd, rw, cache) -> Option:
    """Cost of the branch body of stages i..j at (rd, rw), stage by stage (cached)."""
    graph = original.graph
    channels = graph.tensors[structure.body[i].input].static_shape[1]
    flops, latency, kept = 0, dict.fromkeys(usable, 0.0), []
    for k in range(i, j + 1):
        stage = structure.body[k]
        key = (k, kept_blocks(stage, rd), rw, channels)
        if key not in cache:
            cache[key] = _price_body(original, stage, rd, rw, channels, pricer, usable)
        f, lat, out_c, kept_k = cache[key]
        flops += f
        for u in usable:
            latency[u] = None if latency[u] is None or lat[u] is None else latency[u] + lat[u]
        channels = out_c
        kept.append(kept_k)
    return Option(rd, rw, tuple(kept), channels, flops, latency)


def _price_body(original, stage, rd, rw, channels, pricer, usable):
    graph = original.graph
    body = build_body(original, [stage], rd, rw, "X", channels, ".price")
    shape = list(graph.tensors[stage.input].static_shape)
    shape[1] = channels
    ir = Branched(
        nodes=body.nodes,
        shapes={**body.shapes, "X": tuple(shape)},
        dtypes={**body.dtypes, "X": graph.tensors[stage.input].dtype},
        weights=body.weights,
        inputs=["X"],
        outputs=[body.output],
    ).to_ir()
    flops = sum(_flops(n, ir) for n in ir.nodes)
    latency = {}
    for u in usable:
        values = [pricer.op_us(n, ir, u) for n in ir.nodes]
        latency[u] = None if None in values else sum(values)
    return flops, latency, body.out_channels, body.kept[0]


def _flops(node, graph) -> int:
    cost = cost_node(node, graph)
    return 0 if cost is None else cost.flops


def _restore(pricer, seg: Segment, unit: str, in_c: int, out_c: int, cache) -> tuple[int, float]:
    key = ("restore", seg.spatial, unit, in_c, out_c)
    if key not in cache:
        spec, w, out_shape = restore_conv("r", "X", in_c, out_c, seg.spatial, seg.dtype)
        ir = Branched(
            nodes=[spec],
            shapes={"X": (1, in_c, *seg.spatial), spec.outputs[0]: out_shape},
            dtypes=dict.fromkeys(["X", spec.outputs[0]], seg.dtype),
            weights={w.name: w},
            inputs=["X"],
            outputs=spec.outputs,
        ).to_ir()
        node = ir.nodes[0]
        cache[key] = (_flops(node, ir), pricer.op_us(node, ir, unit) or 0.0)
    return cache[key]


def _concat_us(pricer, seg: Segment, shares: list[int], cache) -> float:
    key = ("concat", seg.spatial, tuple(shares))
    if key not in cache:
        names = [f"x{k}" for k in range(len(shares))]
        shapes = {x: (1, c, *seg.spatial) for x, c in zip(names, shares, strict=True)}
        shapes["y"] = (1, sum(shares), *seg.spatial)
        dtypes = dict.fromkeys(shapes, seg.dtype)
        spec = NodeSpec("c", "Concat", "", names, ["y"], {"axis": 1}, "meet")
        ir = Branched(nodes=[spec], shapes=shapes, dtypes=dtypes, inputs=names, outputs=["y"])
        ir = ir.to_ir()
        cache[key] = pricer.op_us(ir.nodes[0], ir, pricer.home) or 0.0
    return cache[key]


# -- constraints -----------------------------------------------------------------------------

_LATENCY_STEPS = (
    (
        "Eq. 4: communication amortised",
        "latency",
        lambda o: (
            f"each segment's communication <= alpha ({o.alpha:g}) x its latency on the "
            "fastest processor"
        ),
    ),
    (
        "scaling direction",
        "latency",
        lambda o: (
            "GPU/DSP branches scaled in depth (r_d <= r_w), CPU branches in width (r_w <= r_d)"
        ),
    ),
    (
        "Eq. 5: straggler bound",
        "latency",
        lambda o: (
            f"each branch's latency <= beta ({o.beta:g}) x the original segment's on the "
            + ("fastest processor" if o.beta_reference == "fastest" else "branch's own processor")
        ),
    ),
    (
        "Eq. 6: work in proportion to throughput",
        "latency",
        lambda o: (
            f"each branch's FLOPs share within {o.balance_tol:.0%} of its processor's "
            "throughput share"
        ),
    ),
    (
        "capacity kept",
        "accuracy",
        lambda o: f"the branches' FLOPs within {o.capacity_tol:.0%} of the original segment's",
    ),
)


def _constrain(pricer: Pricer, seg: Segment, combo, theta, options, cache) -> dict:
    """Filter one segment's branch options for one processor combination; the survivors'
    count after each latency step and the surviving tuples (arrays, for ranking)."""
    names = [s[0] for s in _LATENCY_STEPS]
    counts = dict.fromkeys(names, 0)
    empty = {"counts": counts, "tuples": None}
    total_theta = sum(theta[u] for u in combo)
    shares = split_channels(seg.width, [theta[u] for u in combo])
    home = pricer.home
    comm = {}
    for u, c in zip(combo, shares, strict=True):
        out_bytes = tensor_bytes((1, c, *seg.spatial), seg.dtype)
        comm[u] = (
            pricer.transfer_us(seg.input_bytes, home, u),
            pricer.transfer_us(out_bytes, u, home),
        )
    if max(a + b for a, b in comm.values()) > options.alpha * seg.fastest_us:
        return empty
    per_branch = [[o for o in seg.options if o.latency_us[u] is not None] for u in combo]
    counts[names[0]] = math.prod(len(p) for p in per_branch)
    directed = []
    for u, opts in zip(combo, per_branch, strict=True):
        accel = pricer.kinds.get(u) in ACCELERATORS
        directed.append([o for o in opts if _direction_ok(o.realised(seg), accel)])
    counts[names[1]] = math.prod(len(p) for p in directed)
    bounded = []
    data = []
    for u, opts, c in zip(combo, directed, shares, strict=True):
        ref = seg.fastest_us if options.beta_reference == "fastest" else seg.latency_us[u]
        rows = []
        for o in opts:
            rf, rl = _restore(pricer, seg, u, o.out_channels, c, cache)
            lat = o.latency_us[u] + rl
            if lat <= options.beta * ref:
                rows.append((o, o.flops + rf, lat))
        bounded.append([r[0] for r in rows])
        data.append(rows)
    counts[names[2]] = math.prod(len(p) for p in bounded)
    if not counts[names[2]]:
        return empty
    # Tuples: one option per branch, as arrays over the product grid.
    flops = np.meshgrid(*[np.array([r[1] for r in rows], dtype=float) for rows in data],
                        indexing="ij")  # fmt: skip
    lats = np.meshgrid(
        *[
            np.array([r[2] + sum(comm[u]) for r in rows], dtype=float)
            for u, rows in zip(combo, data, strict=True)
        ],
        indexing="ij",
    )
    total = sum(flops)
    balanced = np.ones(total.shape, dtype=bool)
    for u, f in zip(combo, flops, strict=True):
        target = theta[u] / total_theta
        balanced &= np.abs((f / total) / target - 1) <= options.balance_tol
    counts[names[3]] = int(balanced.sum())
    kept = balanced & (np.abs(total / seg.flops - 1) <= options.capacity_tol)
    counts[names[4]] = int(kept.sum())
    if not counts[names[4]]:
        return {"counts": counts, "tuples": None}
    concat = _concat_us(pricer, seg, shares, cache)
    latency = np.max(np.stack(lats), axis=0) + concat
    index = np.argwhere(kept)
    order = np.argsort(latency[kept], kind="stable")[: options.max_grid]
    tuples = []
    for k in order:
        pick = index[k]
        branches = []
        for b, u in enumerate(combo):
            o, f, lat = data[b][pick[b]]
            branches.append(BranchChoice(u, o, shares[b], int(f), lat, *comm[u]))
        tuples.append(SegmentChoice(seg, branches, concat))
    return {"counts": counts, "tuples": tuples}


def _direction_ok(ratios: tuple[float, float], accelerator: bool) -> bool:
    depth, width = ratios
    return depth <= width + 1e-9 if accelerator else width <= depth + 1e-9


# -- counting and ranking --------------------------------------------------------------------


def _count_partitions(n: int, g, min_segments: int) -> int:
    """Sum over the ways to cut positions 0..n into segments [i, j) (at least
    ``min_segments`` of them) of the product of ``g(i, j)``."""
    table = [[0] * (n + 1) for _ in range(n + 1)]  # table[j][m]: m segments ending at j
    table[0][0] = 1
    for j in range(1, n + 1):
        for i in range(j):
            value = g(i, j)
            if not value:
                continue
            for m in range(1, j + 1):
                if table[i][m - 1]:
                    table[j][m] += table[i][m - 1] * value
    return sum(table[n][m] for m in range(min_segments, n + 1))


def _k_best(n, data: dict, combo, options: StretchOptions, fixed_us: float, k: int):
    """The ``k`` designs of least modeled latency for one combination."""
    table: list[list[list[tuple[float, list]]]] = [[[] for _ in range(n + 1)] for _ in range(n + 1)]
    table[0][0] = [(0.0, [])]
    for j in range(1, n + 1):
        for i in range(j):
            tuples = data[(i, j - 1)]["tuples"]
            if not tuples:
                continue
            for m in range(1, j + 1):
                for base, chosen in table[i][m - 1]:
                    for t in tuples:
                        table[j][m].append((base + t.latency_us, [*chosen, t]))
            for m in range(1, j + 1):
                table[j][m] = sorted(table[j][m], key=lambda e: e[0])[:k]
    designs = []
    for m in range(options.min_meet, n + 1):
        for latency, chosen in table[n][m]:
            designs.append(Design(tuple(combo), chosen, fixed_us + latency))
    designs.sort(key=lambda d: d.predicted_us)
    return designs[:k]


def _step(name: str, kind: str, detail: str, count: int) -> dict:
    return {
        "step": name,
        "kind": kind,
        "detail": detail,
        "count": count,
        "log10": round(math.log10(count), 2) if count else None,
    }


def _static_steps(structure, graph, nodes, segments, combos, options) -> list[dict]:
    """Steps 1-5: counted from the structure, before any latency is looked at."""
    n = len(structure.body)
    sizes = [len(c) for c in combos]
    learned = _learned_prefix(structure, graph, nodes)
    # Step 1: any cut tensor of the body as a meeting point.
    cuts = list(structure.cuts)
    start = cuts.index(structure.body[0].input)
    end = cuts.index(structure.stages[-1].output)
    positions = cuts[start : end + 1]
    widths = [graph.tensors[t].static_shape[1] for t in positions]
    layer_at = [learned[t] for t in positions]

    def any_layer(i: int, j: int, size: int) -> int:
        layers = layer_at[j] - layer_at[i]
        return (max(layers, 1) * widths[j]) ** size if layers else 0

    m = len(positions) - 1
    raw = sum(_count_partitions(m, lambda i, j, s=s: any_layer(i, j, s), 1) for s in sizes)
    steps = [
        _step(
            "any layer",
            "space",
            "meeting points at any cut tensor, each branch of any depth (layers) and width "
            "(channels)",
            raw,
        )
    ]
    stage_pos = [positions.index(s.input) for s in structure.body] + [len(positions) - 1]

    def at_stages(i: int, j: int, size: int) -> int:
        a, b = stage_pos[i], stage_pos[j]
        return (max(layer_at[b] - layer_at[a], 1) * widths[b]) ** size

    steps.append(
        _step(
            "stage boundaries",
            "accuracy",
            "meeting points only where a stage hands over to the next (structure kept)",
            sum(_count_partitions(n, lambda i, j, s=s: at_stages(i, j, s), 1) for s in sizes),
        )
    )

    def grid_options(i: int, j: int, floor: float) -> int:
        seg = segments[(i, j - 1)]
        stages = structure.body[i:j]
        ratios = [r for r in GRID if r >= floor - 1e-9]
        depths = {tuple(kept_blocks(s, r) for s in stages) for r in ratios}
        widths_n = len(ratios) if seg.width_scalable else 1
        return len(depths) * widths_n

    for name, kind, detail, floor, min_seg in (
        ("whole blocks, eighths", "space",
         "depth drops whole shape-keeping blocks; ratios on a grid of eighths", 1 / 8, 1),
        ("ratio floor", "accuracy",
         f"depth and width ratios >= {options.ratio_floor:g}", options.ratio_floor, 1),
        ("meeting points >= N_meet_min", "accuracy",
         f"at least {options.min_meet} meeting point(s)", options.ratio_floor, options.min_meet),
    ):  # fmt: skip
        count = sum(
            _count_partitions(n, lambda i, j, s=s, f=floor: grid_options(i, j, f) ** s, min_seg)
            for s in sizes
        )
        steps.append(_step(name, kind, detail, count))
    return steps


def _learned_prefix(structure, graph, nodes) -> dict[str, int]:
    """For each cut tensor, the number of learned ops (convs) before it."""
    from engine.graph.structure import PARAMETERIZED_OPS

    position = {node.name: k for k, node in enumerate(graph.nodes)}
    producer = {o: node.name for node in graph.nodes for o in node.outputs}
    counts = []
    total = 0
    for node in graph.nodes:
        if node.op_type in PARAMETERIZED_OPS and any(
            graph.tensors[t].is_param for t in node.inputs if t
        ):
            total += 1
        counts.append(total)
    out = {}
    for t in structure.cuts:
        p = producer.get(t)
        out[t] = 0 if p is None else counts[position[p]]
    return out
