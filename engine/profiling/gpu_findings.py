"""Design findings for a mobile GPU, in plain words, each naming its node or tensor.

The rules are the paper's section 7 advice to network designers (Lee et al.,
arXiv:1907.01989; ``reference/papers/tflite_gpu.md`` section 5): use only ops the GPU runs,
so the graph is one delegate node with no CPU/GPU sync (L123, L171); avoid reshapes, which
re-lay PHWC4 data (L455); size channels in multiples of 4, since C=5 costs what C=8 does
(L459); prefer RGBA to RGB (L458); leave no artifact ops for the clean-up to remove
(L136-139). Every number is predicted from shapes, never measured.
"""

from __future__ import annotations

from collections import defaultdict

from engine.graph.ir import Graph
from engine.profiling.findings import Finding
from engine.profiling.gpu_support import RESHAPES
from engine.profiling.phwc4 import to_bhwc

_LIST = 5
"""Names listed per finding before '+N more'."""
_PADDED = frozenset({"CONVOLUTION_2D", "DEPTHWISE_CONVOLUTION", "POOLING_2D"})
"""Ops with a padding of their own, into which a separate Pad folds (L136)."""


def find_gpu_issues(analysis, graph: Graph) -> list[dict]:
    """The findings of a :class:`engine.profiling.mobile_gpu.MobileGpuAnalysis`, most
    costly first within each rule."""
    rows = {row.name: row for row in analysis.nodes}
    findings = [
        *_delegate(analysis, rows),
        *_splits(analysis, rows, graph),
        *_reshapes(rows, graph),
        *_channels(analysis.tensors),
        *_rgb_inputs(analysis.tensors, graph),
        *_artifacts(rows, graph),
    ]
    return [f.to_dict() for f in findings]


def _finding(kind: str, text: str, severity: str = "warning", **data) -> Finding:
    return Finding(kind, severity, text, "predicted", data)


def _names(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:_LIST])
    return shown + (f" (+{len(names) - _LIST} more)" if len(names) > _LIST else "")


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _size(n: int | None) -> str:
    if n is None:
        return "an unknown number of bytes"
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n:,} B"


def _delegate(analysis, rows) -> list[Finding]:
    count, crossings = len(analysis.partitions), len(analysis.boundaries)
    unknown = [r.name for r in rows.values() if r.status == "unknown"]
    found = []
    if unknown:
        found.append(
            _finding(
                "gpu_unknown",
                f"{len(unknown)} nodes cannot be placed because a shape is unknown: "
                f"{_names(unknown)}; they are counted on the CPU.",
                nodes=unknown,
            )
        )
    if not any(r.status == "gpu" for r in rows.values()):
        found.append(_finding("gpu_none", f"Nothing runs on the GPU through {analysis.api}."))
    elif count == 1 and not crossings and not unknown:
        found.append(
            _finding(
                "gpu_one_delegate",
                f"The whole graph is one GPU delegate node through {analysis.api}: the "
                "paper's best case, no CPU/GPU sync inside an inference (L123, L171).",
                "info",
            )
        )
    elif crossings:
        found.append(
            _finding(
                "gpu_partitions",
                f"The GPU runs {_count(count, 'partition')} with "
                f"{_count(crossings, 'CPU<->GPU boundary', 'CPU<->GPU boundaries')}: each "
                "is a CPU/GPU sync and a PHWC4 conversion the paper says to avoid (L171).",
                partitions=count,
                boundaries=crossings,
            )
        )
    return found


def _splits(analysis, rows, graph: Graph) -> list[Finding]:
    """A CPU node with GPU partitions on both sides splits the delegate."""
    crossing: dict[str, list] = defaultdict(list)
    for b in analysis.boundaries:
        for node in (b.producer, *b.consumers):
            crossing[node].append(b)
    found = []
    for node in graph.nodes:
        row = rows[node.name]
        if row.status not in ("cpu", "unknown"):
            continue
        producers = [graph.tensors[t].producer for t in node.inputs if t]
        consumers = [c for o in node.outputs if o for c in graph.tensors[o].consumers]
        before, after = _partitions(producers, rows), _partitions(consumers, rows)
        if not before or not after:
            continue
        sizes = [b.bytes for b in crossing[node.name]]
        moved = _size(None if None in sizes else sum(sizes))
        sides = f"GPU partition {_join(before)} to partition {_join(after)}"
        if node.op_type in RESHAPES:
            text = (
                f"This {node.op_type} '{node.name}' forces a CPU round-trip ({row.reason}): "
                f"data goes from {sides} through the CPU, {moved} per inference."
            )
        else:
            text = (
                f"'{node.name}' ({node.op_type}) runs on the CPU ({row.reason}) mid-chain "
                f"and splits the delegate: {sides}, {moved} cross per inference."
            )
        found.append(_finding("gpu_split", text, nodes=[node.name], bytes=sizes))
    return found


def _partitions(nodes: list[str | None], rows) -> set[int]:
    """The GPU partitions among ``nodes`` (graph inputs and CPU nodes have none)."""
    return {rows[n].partition for n in nodes if n in rows} - {None}


def _join(partitions: set) -> str:
    return " and ".join(f"#{p}" for p in sorted(partitions))


def _reshapes(rows, graph: Graph) -> list[Finding]:
    """A delegated reshape that changes the PHWC4 view re-lays the data on the GPU."""
    found = []
    for node in graph.nodes:
        if node.op_type not in RESHAPES or rows[node.name].status != "gpu":
            continue
        src, dst = graph.tensors[node.inputs[0]], graph.tensors[node.outputs[0]]
        if src.static_shape is None or dst.static_shape is None:
            continue
        if to_bhwc(src.static_shape) == to_bhwc(dst.static_shape):
            continue  # the same [B, H, W, C]: nothing moves
        found.append(
            _finding(
                "gpu_reshape",
                f"{node.op_type} '{node.name}' ({list(src.static_shape)} -> "
                f"{list(dst.static_shape)}) re-lays PHWC4 data on the GPU, much costlier there "
                "than on the CPU (L455): drop it if it is only there for convenience.",
                nodes=[node.name],
            )
        )
    return found


def _channels(tensors: list[dict]) -> list[Finding]:
    """Tensors whose channel count is not a multiple of 4, grouped by channel count."""
    groups: dict[int, list[dict]] = defaultdict(list)
    for t in tensors:
        layout = t["layout"]
        if layout and layout["bhwc"]["c"] % 4:
            groups[layout["bhwc"]["c"]].append(t)
    found = []
    wasted = {c: sum(t["layout"]["waste_bytes"] for t in members) for c, members in groups.items()}
    for c, members in sorted(groups.items(), key=lambda kv: -wasted[kv[0]]):
        members.sort(key=lambda t: -t["layout"]["waste_bytes"])
        waste = wasted[c]
        padded = sum(t["layout"]["padded_bytes"] for t in members)
        share = members[0]["layout"]["waste_fraction"]
        names = [t["name"] for t in members]
        found.append(
            _finding(
                "gpu_channels",
                f"C={c} wastes {100 * share:.0f}% of the buffer (padded to "
                f"{members[0]['layout']['padded_channels']} channels in PHWC4, L216): "
                f"{_names(names)}, {_size(waste)} of {_size(padded)}; a multiple of 4 "
                "costs nothing extra (L459).",
                tensors=names,
                channels=c,
                waste_bytes=waste,
            )
        )
    return found


def _rgb_inputs(tensors: list[dict], graph: Graph) -> list[Finding]:
    found = []
    for t in tensors:
        if t["name"] in graph.inputs and t["layout"] and t["layout"]["bhwc"]["c"] == 3:
            found.append(
                _finding(
                    "gpu_rgb_input",
                    f"Input '{t['name']}' is RGB (C=3): RGBA (C=4) fills the same PHWC4 "
                    "buffer and saves a conversion and copy (L458).",
                    "info",
                    tensors=[t["name"]],
                )
            )
    return found


def _artifacts(rows, graph: Graph) -> list[Finding]:
    """Ops the delegate's clean-up removes or merges, which should not be in the model."""
    found = []
    for node in graph.nodes:
        status = rows[node.name].status
        inputs = [i for i in node.inputs if i]
        why = None
        if status == "removed":
            why = "is an identity"
        elif status == "gpu" and node.op_type in ("Concat", "Sum") and len(inputs) == 1:
            why = "has a single input"
        elif status == "gpu" and node.op_type in ("Resize", "Upsample"):
            src, dst = graph.tensors[inputs[0]], graph.tensors[node.outputs[0]]
            if src.static_shape is not None and src.static_shape == dst.static_shape:
                why = "resizes by a scale of 1"
        elif status == "gpu" and node.op_type == "Pad":
            readers = graph.tensors[node.outputs[0]].consumers
            if readers and all(rows[r].gpu_op in _PADDED for r in readers):
                why = "is a separate Pad before a convolution or pool (merged into its padding)"
        if why:
            found.append(
                _finding(
                    "gpu_artifact",
                    f"'{node.name}' ({node.op_type}) {why}: the delegate's clean-up removes "
                    "it at initialization, but it should not be in the model (L136-139).",
                    "info",
                    nodes=[node.name],
                )
            )
    return found
