"""Mapping onnxruntime's kernels back to the model's nodes.

onnxruntime times kernels, not the model's nodes: it folds constants and fuses nodes
(BatchNormalization and Relu into the preceding Conv, for example). Each node is mapped back
to the kernel that ran it: by name (onnxruntime keeps a node's name, or a name that starts
with it, at optimization levels up to ``extended``), else to the nearest producer (or
consumer) that has a kernel. A kernel's time is split among the nodes it ran in proportion
to their roofline work (FLOPs and bytes; only FLOPs for the nodes fused in, whose tensors
never reach memory). At level ``all`` the layout pass renames most kernels, so their nodes
stay unmapped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from engine.graph import ModelAnalysis
from engine.graph.ir import Graph, Node
from engine.profiling.predicted import constant_nodes
from engine.profiling.session import summarize
from engine.profiling.trace import KernelSamples
from engine.targets.costmodel import op_variant

_ATTRIBUTION_FLOPS_PER_BYTE = 10.0
"""Ridge point used only to weigh FLOPs against bytes when a fused kernel's time is split."""
_SEARCH_DEPTH = 3
_MAX_COVERED = 32
_SEPARATORS = "/_-.: "


@dataclass
class OpProfile:
    """One node of the model. ``status``: measured (its own kernel), fused (ran inside
    another node's kernel; ``latency_us`` is its share), folded (a constant computed at load
    time, 0 per inference) or unmapped (no kernel could be matched)."""

    name: str
    op_type: str
    variant: str | None
    status: str
    kernel: str | None
    latency_us: float | None
    p90_us: float | None
    spread_pct: float | None
    typical_us: float | None
    share_pct: float | None
    flops: int | None
    bytes: int | None
    dtype: str
    intensity: float | None


@dataclass
class KernelProfile:
    """One kernel onnxruntime executed, with the nodes it ran (empty: not mapped)."""

    name: str
    op_type: str
    nodes: list[str]
    latency_us: float
    p90_us: float
    spread_pct: float
    typical_us: float
    runs: int


def attribute_kernels(
    samples: list[KernelSamples],
    analysis: ModelAnalysis,
    central: set[int],
    fused: Mapping[str, tuple[Sequence[str], Sequence[str]]] | None = None,
) -> tuple[list[KernelProfile], list[OpProfile]]:
    """Kernel statistics with the nodes each ran, and per-node latencies (see module doc).

    ``typical_us`` is the mean over the ``central`` runs (see
    :func:`engine.profiling.trace.central_runs`): unlike medians, these add up to a typical
    whole run."""
    graph = analysis.graph
    assert graph is not None
    names = [n.name for n in graph.nodes]
    name_set = set(names)
    own = {}  # node -> the kernel named after it
    for k in samples:
        node = _node_named(k.name, name_set)
        if node is not None and node not in own:
            own[node] = k.name
    folded = constant_nodes(graph) - own.keys()
    host = dict(own)
    nodes_by_name = {n.name: n for n in graph.nodes}
    named, owned = set(own.values()), set(own)
    for k in samples:
        if k.name not in named and fused and k.name in fused:
            inputs, outputs = fused[k.name]
            for node in covered_nodes(graph, nodes_by_name, inputs, outputs, owned):
                host.setdefault(node, k.name)
    for node in graph.nodes:
        if node.name not in host and node.name not in folded:
            kernel = _nearest_kernel(node.name, graph, nodes_by_name, own)
            if kernel is not None:
                host[node.name] = kernel
    by_name = {n.name: n for n in analysis.node_list}
    members: dict[str, list[str]] = {k.name: [] for k in samples}
    for name in names:
        if name in host:
            members[host[name]].append(name)
    stats = {
        k.name: {**summarize(k.samples_us), "median": k.median_us()} if k.samples_us else None
        for k in samples
    }
    typical_by_kernel = {k.name: k.mean_over(central) for k in samples}
    kernels = [
        KernelProfile(
            k.name,
            k.op_type,
            members[k.name],
            stats[k.name]["median"],
            stats[k.name]["p90"],
            stats[k.name]["spread_pct"],
            typical_by_kernel[k.name],
            len(k.samples_us),
        )
        for k in samples
        if stats[k.name] is not None
    ]
    shares = {}
    for kernel, nodes in members.items():
        weights = [_weight(by_name[n], own.get(n) == kernel) for n in nodes]
        total = sum(weights)
        for node, weight in zip(nodes, weights, strict=True):
            if total:
                shares[node] = weight / total
            else:  # nothing costed: the kernel's namesake takes the time
                shares[node] = 1.0 if own.get(node) == kernel or len(nodes) == 1 else 0.0
    dtypes = {n.name: _dtype(n, graph) for n in graph.nodes}
    ops = []
    for name in names:
        node = by_name[name]
        cost = node.cost
        kernel = host.get(name)
        kstats = stats.get(kernel) if kernel else None
        if name in folded:
            status, latency, p90, spread, typical = "folded", 0.0, 0.0, None, 0.0
        elif kstats is None:
            status, latency, p90, spread, typical = "unmapped", None, None, None, None
        else:
            share = shares[name]
            status = "measured" if own.get(name) == kernel else "fused"
            latency, p90, spread = (
                share * kstats["median"],
                share * kstats["p90"],
                kstats["spread_pct"],
            )
            typical = share * typical_by_kernel[kernel]
        ops.append(
            OpProfile(
                name=name,
                op_type=node.op_type,
                variant=op_variant(nodes_by_name[name], graph),
                status=status,
                kernel=kernel,
                latency_us=latency,
                p90_us=p90,
                spread_pct=spread,
                typical_us=typical,
                share_pct=None,
                flops=cost.flops if cost else None,
                bytes=cost.bytes_read + cost.bytes_written if cost else None,
                dtype=dtypes[name],
                intensity=cost.intensity if cost else None,
            )
        )
    total_us = sum(k.latency_us for k in kernels) or 1.0
    for op in ops:
        if op.latency_us is not None:
            op.share_pct = 100.0 * op.latency_us / total_us
    return kernels, ops


def covered_nodes(
    graph: Graph,
    nodes: Mapping[str, Node],
    inputs: Sequence[str],
    outputs: Sequence[str],
    owned: Collection[str] = (),
) -> list[str]:
    """The model's nodes a node onnxruntime made by fusion stands for: those between its
    input and output tensors, walking back from the outputs' producers (onnxruntime names
    such a node after the fusion, ``Gelu_token_0``, ``SkipLayerNormalization``, and no node
    of the model bears that name). The walk stops at the inputs and at ``owned`` nodes (they
    have kernels of their own). At most :data:`_MAX_COVERED` nodes: a walk that does not
    meet the inputs by then is not a fusion this can follow, and covers nothing."""
    stop = set(inputs)
    found: list[str] = []
    queue = deque(graph.tensors[o].producer for o in outputs if o in graph.tensors)
    seen: set[str] = set()
    while queue:
        name = queue.popleft()
        if name is None or name in seen or name in owned:
            continue
        seen.add(name)
        found.append(name)
        if len(found) > _MAX_COVERED:
            return []
        for tensor in nodes[name].inputs:
            if tensor and tensor not in stop:
                queue.append(graph.tensors[tensor].producer)
    return found


def _node_named(kernel: str, names: set[str]) -> str | None:
    """The node a kernel is named after: the same name, else the longest part of it cut at
    a separator (onnxruntime names fused nodes ``<node>_nchwc``, ``<node>/...`` or
    ``fused <node>``)."""
    if kernel in names:
        return kernel
    cuts = [i for i, c in enumerate(kernel) if c in _SEPARATORS]
    parts = [kernel[:i] for i in cuts] + [kernel[i + 1 :] for i in cuts]
    found = [part for part in parts if part in names]
    return max(found, key=len) if found else None


def _nearest_kernel(
    name: str, graph: Graph, by_name: dict[str, Node], own: dict[str, str]
) -> str | None:
    """The kernel of the closest producer with one (fusion into a preceding Conv), else of
    the closest consumer, searching a few hops."""
    for neighbours in (_producers, _consumers):
        queue = deque([(name, 0)])
        seen = {name}
        while queue:
            current, depth = queue.popleft()
            if current != name and current in own:
                return own[current]
            if depth == _SEARCH_DEPTH:
                continue
            for nxt in neighbours(by_name[current], graph):
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append((nxt, depth + 1))
    return None


def _producers(node: Node, graph: Graph) -> list[str]:
    found = (graph.tensors[i].producer for i in node.inputs if i)
    return [p for p in found if p is not None]


def _consumers(node: Node, graph: Graph) -> list[str]:
    return [c for o in node.outputs if o for c in graph.tensors[o].consumers]


def _weight(node, namesake: bool) -> float:
    """Roofline work of a node; a node fused into another's kernel moves no tensor of its
    own through memory, so only its FLOPs count."""
    cost = node.cost
    if cost is None:
        return 0.0
    compute = cost.flops / _ATTRIBUTION_FLOPS_PER_BYTE
    return max(compute, cost.bytes_read + cost.bytes_written) if namesake else compute


def _dtype(node: Node, graph: Graph) -> str:
    for name in node.outputs:
        if name:
            return graph.tensors[name].dtype
    return "?"
