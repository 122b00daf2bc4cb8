"""Mobile-GPU delegate analysis of a modeled GPU unit: what a model designer should change
before deploying on a phone GPU.

From Lee et al., "On-Device Neural Net Inference with Mobile GPUs" (arXiv:1907.01989, the
TFLite GPU delegate; ``reference/papers/tflite_gpu.md``): the delegate runs the ops it
supports as "delegate nodes", maximal GPU sub-graphs, and leaves the rest on the CPU (L123,
Fig. 1); every CPU<->GPU crossing is a sync the paper says to avoid "at all cost" (L171).
Tensors live as PHWC4 (channels padded to 4, L216) and every shader is dispatched on a grid
rounded up to multiples of 4 (L239). Nothing here is measured: every number follows from
the graph's shapes and those layout rules (``BASIS``).

What differs here: partitions are formed as TFLite's partitioner does, in epochs of ready
nodes of one kind, and both starting kinds are tried (the fewer GPU partitions win); a
node whose shape is unknown is counted on the CPU and listed as unknown.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field

from engine.graph.ir import Graph
from engine.graph.tensors import dtype_bits
from engine.options import OptionsError
from engine.profiling.gpu_findings import find_gpu_issues
from engine.profiling.gpu_support import (
    APIS,
    DEFAULT_API,
    SOURCES,
    Delegation,
    delegate_node,
    support_table,
)
from engine.profiling.phwc4 import PAPER_WORK_GROUP, compute_grid, phwc4_layout, to_bhwc
from engine.profiling.predicted import constant_nodes
from engine.targets.profile import TargetProfile, Unit

BASIS = "predicted (layout rules of the TFLite GPU delegate, Lee et al. 2019)"
_HEAVY = frozenset(
    {"CONVOLUTION_2D", "DEPTHWISE_CONVOLUTION", "CONVOLUTION_TRANSPOSED", "FULLY_CONNECTED"}
)
_ACTIVATIONS = frozenset({"RELU", "PRELU", "SIGMOID", "TANH", "HARD_SWISH", "ELU"})
_FOLDED = frozenset({"BatchNormalization"})  # folded into the weights by TFLite's converter


@dataclass
class NodeRow:
    """One node: where it runs, and for GPU nodes its partition (numbered from 1) and the
    kernel it runs in (``fused_into``: the convolution an activation fuses into, L186)."""

    name: str
    op_type: str
    status: str
    gpu_op: str | None
    reason: str | None
    partition: int | None = None
    fused_into: str | None = None


@dataclass
class Transfer:
    """A tensor crossing between the CPU and a GPU partition. ``direction`` is ``gpu->cpu``
    or ``cpu->gpu`` for a boundary, ``input``/``output`` for the model's own I/O (converted
    to and from PHWC4 once per inference, L159); ``bytes`` is None when unknown."""

    tensor: str
    direction: str
    partition: int
    producer: str | None
    consumers: list[str]
    bytes: int | None


@dataclass
class MobileGpuAnalysis:
    """Result of :func:`analyze_mobile_gpu`; ``to_dict()`` is the profile's ``mobile_gpu``."""

    unit: str
    api: str
    nodes: list[NodeRow]
    partitions: list[dict]
    boundaries: list[Transfer]
    io: list[Transfer]
    tensors: list[dict]
    kernels: list[dict]
    work_group: tuple[int, int, int] = PAPER_WORK_GROUP
    findings: list[dict] = field(default_factory=list)

    def summary(self) -> dict:
        by_status: dict[str, int] = {}
        for row in self.nodes:
            by_status[row.status] = by_status.get(row.status, 0) + 1
        sizes = [b.bytes for b in self.boundaries]
        known = [t["layout"] for t in self.tensors if t["layout"]]
        padded = sum(t["padded_bytes"] for t in known)
        kernels = [k["grid"] for k in self.kernels if k["grid"]]
        threads = sum(g["threads"] for g in kernels)
        stubs = sum(g["stub_threads"] for g in kernels)
        return {
            "nodes": by_status,
            "gpu_partitions": len(self.partitions),
            "fully_delegated": len(self.partitions) == 1
            and not by_status.get("cpu")
            and not by_status.get("unknown"),
            "boundaries": len(self.boundaries),
            "boundary_bytes": None if None in sizes else sum(sizes),
            "boundary_bytes_unknown": sizes.count(None),
            "tensor_bytes": sum(t["bytes"] for t in known),
            "padded_bytes": padded,
            "waste_bytes": sum(t["waste_bytes"] for t in known),
            "waste_fraction": sum(t["waste_bytes"] for t in known) / padded if padded else None,
            "tensors_unknown": len(self.tensors) - len(known),
            "kernels": len(self.kernels),
            "threads": threads,
            "stub_threads": stubs,
            "stub_fraction": stubs / threads if threads else None,
        }

    def to_dict(self) -> dict:
        return {
            "unit": self.unit,
            "api": self.api,
            "apis": list(APIS),
            "basis": BASIS,
            "support_source": SOURCES[self.api],
            "work_group": list(self.work_group),
            "work_group_source": "the paper's Fig. 3 example; its tuned Adreno table "
            "(Table 2) is not in the source text",
            "summary": self.summary(),
            "nodes": [asdict(n) for n in self.nodes],
            "partitions": self.partitions,
            "boundaries": [asdict(b) for b in self.boundaries],
            "io": [asdict(b) for b in self.io],
            "tensors": self.tensors,
            "kernels": self.kernels,
            "findings": self.findings,
            "support": support_table(),
        }


def analyze_mobile_gpu(
    graph: Graph, unit: Unit, api: str = DEFAULT_API, opset: int | None = None
) -> MobileGpuAnalysis:
    """The delegate partition, PHWC4 layouts, grids and design findings of ``graph`` on the
    GPU ``unit`` through the ``api`` backend (one of :data:`APIS`); ``opset`` is the
    model's default-domain opset (None: 13 or later)."""
    if api not in APIS:
        raise OptionsError({"gpu_api": f"'{api}' is not one of {', '.join(APIS)}"})
    constant = constant_nodes(graph)
    inputs = set(graph.inputs)
    static = {  # weights, and every initializer (int64 shapes are not weights)
        t.name
        for t in graph.tensors.values()
        if t.is_param or not t.producer and t.name not in inputs
    }
    static.update(o for n in graph.nodes if n.name in constant for o in n.outputs if o)
    rows: dict[str, NodeRow] = {}
    for node in graph.nodes:
        found = Delegation("constant") if node.name in constant else None
        found = found or delegate_node(node, graph, api, unit, static, opset)
        rows[node.name] = NodeRow(node.name, node.op_type, found.status, found.gpu_op, found.reason)
    runtime = _runtime_edges(graph, rows)
    partitions = _partition(graph, rows, runtime)
    boundaries, io = _transfers(graph, rows, runtime)
    _fuse(graph, rows, runtime)
    analysis = MobileGpuAnalysis(
        unit=unit.name,
        api=api,
        nodes=list(rows.values()),
        partitions=partitions,
        boundaries=boundaries,
        io=io,
        tensors=_layouts(graph, rows, runtime),
        kernels=_kernels(graph, rows),
    )
    analysis.findings = find_gpu_issues(analysis, graph)
    return analysis


def analyze_target_gpu(
    graph: Graph, target: TargetProfile, unit: str | None, api: str, opset: int | None
) -> dict:
    """The ``mobile_gpu`` section of a predicted profile: the analysis of ``unit`` when it
    is a GPU, of the target's first GPU unit when no unit was chosen; otherwise
    ``available`` is False and ``reason`` says why."""
    if unit is not None:
        chosen = target.unit(unit)
        if chosen.kind != "gpu":
            return {"available": False, "reason": f"unit '{unit}' is a {chosen.kind}, not a GPU"}
    else:
        chosen = next((u for u in target.units if u.kind == "gpu"), None)
        if chosen is None:
            return {"available": False, "reason": f"target '{target.name}' has no GPU unit"}
    return {"available": True, **analyze_mobile_gpu(graph, chosen, api, opset).to_dict()}


def _runtime_edges(graph: Graph, rows: dict[str, NodeRow]) -> dict[str, list[str]]:
    """Tensor -> the non-constant nodes reading it, for every tensor computed per inference
    (weights and load-time constants cross nothing)."""
    edges = {}
    for name, tensor in graph.tensors.items():
        producer = rows.get(tensor.producer) if tensor.producer else None
        if tensor.is_param or (producer is not None and producer.status == "constant"):
            continue
        if producer is None and name not in graph.inputs:
            continue
        edges[name] = [c for c in dict.fromkeys(tensor.consumers) if rows[c].status != "constant"]
    return edges


def _side(row: NodeRow) -> str:
    return {"gpu": "gpu", "removed": "any"}.get(row.status, "cpu")


def _partition(graph: Graph, rows: dict[str, NodeRow], runtime: dict[str, list[str]]) -> list:
    """Number each GPU node's partition; return the partitions in execution order."""
    order = [n.name for n in graph.nodes if rows[n.name].status != "constant"]
    succs: dict[str, set[str]] = {n: set() for n in order}
    preds: dict[str, set[str]] = {n: set() for n in order}
    for tensor, consumers in runtime.items():
        producer = graph.tensors[tensor].producer
        if producer in succs:
            for c in consumers:
                succs[producer].add(c)
                preds[c].add(producer)
    candidates = [_epochs(order, rows, preds, succs, start) for start in ("gpu", "cpu")]
    segments = min(candidates, key=lambda s: (sum(k == "gpu" for k, _ in s), len(s)))
    partitions = []
    for kind, members in segments:
        if kind != "gpu" or not any(rows[n].status == "gpu" for n in members):
            continue
        index = len(partitions) + 1
        for n in members:
            rows[n].partition = index
        partitions.append({"index": index, "nodes": members, "size": len(members)})
    return partitions


def _epochs(order, rows, preds, succs, start: str) -> list[tuple[str, list[str]]]:
    """TFLite's partitioning: take every ready node of the current kind (and every ready
    node the clean-up removes), then switch kinds; each run of one kind is a segment."""
    position = {n: i for i, n in enumerate(order)}
    waiting = {n: len(preds[n]) for n in order}
    ready: dict[str, list] = {"gpu": [], "cpu": []}
    for n in order:
        if not waiting[n]:
            side = _side(rows[n])
            heapq.heappush(ready[start if side == "any" else side], (position[n], n))
    kind, segments, done = start, [], 0
    while done < len(order):
        members = []
        while ready[kind]:
            _, n = heapq.heappop(ready[kind])
            members.append(n)
            for s in succs[n]:
                waiting[s] -= 1
                if not waiting[s]:
                    side = _side(rows[s])
                    heapq.heappush(ready[kind if side == "any" else side], (position[s], s))
        done += len(members)
        if members:
            segments.append((kind, sorted(members, key=position.__getitem__)))
        elif not ready["gpu"] and not ready["cpu"]:
            break  # a cycle: the IR refuses those, so this only guards the loop
        kind = "cpu" if kind == "gpu" else "gpu"
    return segments


def _transfers(graph, rows, runtime) -> tuple[list[Transfer], list[Transfer]]:
    boundaries, io = [], []
    outputs = set(graph.outputs)
    for name, consumers in runtime.items():
        tensor = graph.tensors[name]
        producer = tensor.producer
        source = rows[producer].partition if producer else None
        places = {rows[c].partition for c in consumers}
        outside = [c for c in consumers if rows[c].partition != source]
        if source is not None and outside:
            boundaries.append(Transfer(name, "gpu->cpu", source, producer, outside, tensor.bytes))
        if source is not None and name in outputs:
            io.append(Transfer(name, "output", source, producer, [], tensor.bytes))
        for place in sorted(p for p in places if p is not None and p != source):
            readers = [c for c in consumers if rows[c].partition == place]
            kind = "input" if producer is None else "cpu->gpu"
            (io if kind == "input" else boundaries).append(
                Transfer(name, kind, place, producer, readers, tensor.bytes)
            )
    return boundaries, io


def _fuse(graph: Graph, rows: dict[str, NodeRow], runtime: dict[str, list[str]]) -> None:
    """An activation right after a convolution or fully-connected op in the same partition,
    its only reader, runs in that op's shader (L186); so does a batch norm, which the
    converter folds into the weights, and an activation after it."""
    for node in graph.nodes:
        row = rows[node.name]
        if row.status != "gpu" or not (row.gpu_op in _ACTIVATIONS or node.op_type in _FOLDED):
            continue
        source = graph.tensors[node.inputs[0]]
        producer = rows.get(source.producer) if source.producer else None
        if producer is None or producer.partition != row.partition:
            continue
        root = producer.fused_into or (producer.name if producer.gpu_op in _HEAVY else None)
        if root and runtime.get(source.name) == [node.name]:
            row.fused_into = root


def _layouts(graph: Graph, rows: dict[str, NodeRow], runtime: dict[str, list[str]]) -> list:
    """PHWC4 storage of every tensor a GPU node reads or writes."""
    names: dict[str, None] = {}
    for node in graph.nodes:
        if rows[node.name].status == "gpu":
            names.update((n, None) for n in (*node.inputs, *node.outputs) if n in runtime)
    tensors = []
    for name in names:
        tensor = graph.tensors[name]
        row = {"name": name, "producer": tensor.producer, "shape": None, "layout": None}
        bits = dtype_bits(tensor.dtype)
        if tensor.static_shape is None or bits is None:
            row["reason"] = "shape unknown" if tensor.static_shape is None else "dtype unknown"
        else:
            row["shape"] = list(tensor.static_shape)
            bhwc = to_bhwc(tensor.static_shape)
            if bhwc is None:
                row["reason"] = "more than 4-D"
            else:
                row["layout"] = phwc4_layout(bhwc, bits / 8).to_dict()
        tensors.append(row)
    return tensors


def _kernels(graph: Graph, rows: dict[str, NodeRow]) -> list[dict]:
    """One shader per GPU node not fused into another, its grid from its output (L239)."""
    fused: dict[str, list[str]] = {}
    for row in rows.values():
        if row.fused_into:
            fused.setdefault(row.fused_into, []).append(row.name)
    kernels = []
    for node in graph.nodes:
        row = rows[node.name]
        if row.status != "gpu" or row.fused_into:
            continue
        output = graph.tensors[node.outputs[0]]
        kernel = {
            "node": node.name,
            "op_type": node.op_type,
            "gpu_op": row.gpu_op,
            "partition": row.partition,
            "fused": fused.get(node.name, []),
            "tensor": output.name,
            "grid": None,
        }
        bhwc = to_bhwc(output.static_shape) if output.static_shape is not None else None
        if bhwc is None:
            kernel["reason"] = "the output's shape is unknown"
        else:
            kernel["grid"] = compute_grid(bhwc).to_dict()
        kernels.append(kernel)
    return kernels
