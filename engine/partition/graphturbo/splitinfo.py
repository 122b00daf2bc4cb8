"""SplitInfo and BestSplit (GraphTurbo, OSDI '23, section 3.1, Algorithm 1 and Eq. 1).

A subgraph is split along one dimension of its output into ``f`` instances; the split is
propagated backwards through its nodes (batch and spatial axes pass through convs and
pools with their halos, channels stop at a conv, whose input is then read whole). For
each output dimension, outermost first, the first factor ``v`` in ``1, 2, 4, 8..size``
that divides the split tensors and makes one core's share of an instance's peak fit the
local buffer wins; BestSplit is the lexmax of ``(n_d, -f_d, -d)``: split the most ops,
then the smallest factor (fuller buffer), then the outermost dimension.

What differs from the paper: an instance runs across the cores of a cluster bound by
Algorithm 4's plain strategy (factors 8, 4, 2, 1 that divide the extents, outer to
inner), and "fits" means its peak divided by the cores it is bound to fits one core's
local buffer; weights are not in the peak (they get small fixed slots, section 3).
As in Algorithm 1's test ``ceil(peak / v) <= LB``, a split tensor counts ``1/v`` of its
bytes: the halo rows a window op re-reads at an instance's edge are recomputation, which
:mod:`engine.partition.graphturbo.instances` counts and reports (the summary does not
describe the paper's recompute guard, so none limits it here). A tensor the split does
not reach (a conv's input when its output channels are split) counts whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.partition.graphturbo.view import DsaGraph

BINDING_FACTORS = (8, 4, 2, 1)
_PASS_ALL = frozenset(
    {
        "Relu", "BatchNormalization", "Add", "Sum", "Mul", "Sub", "Div", "Clip", "Sigmoid",
        "Tanh", "LeakyRelu", "HardSwish", "HardSigmoid", "Identity", "Dropout", "Cast", "Max",
        "Min", "Mean", "Erf", "Sqrt", "Exp", "Neg", "Abs", "PRelu", "Elu", "Gelu", "Softplus",
    }
)  # fmt: skip
_WINDOWED = frozenset({"Conv", "MaxPool", "AveragePool"})

Interval = tuple[int, int, int]  # (axis, lo, hi)


@dataclass(frozen=True)
class SplitTuple:
    """One row of SplitInfo: split output dimension ``dim`` into ``factor`` instances, which
    cuts ``n_ops`` ops; an instance peaks at ``peak_bytes``, ``core_peak_bytes`` per core
    under ``binding`` (cores per output dimension)."""

    dim: int
    factor: int
    n_ops: int
    peak_bytes: int
    core_peak_bytes: int
    binding: tuple[int, ...]

    def key(self) -> tuple[int, int, int]:
        """Eq. 1: lexmax of (n_d, -f_d, -d)."""
        return (self.n_ops, -self.factor, -self.dim)

    def to_dict(self) -> dict:
        return {
            "dim": self.dim,
            "factor": self.factor,
            "n_ops": self.n_ops,
            "peak_bytes": self.peak_bytes,
            "core_peak_bytes": self.core_peak_bytes,
            "binding": list(self.binding),
        }


def best_split(rows: Sequence[SplitTuple]) -> SplitTuple | None:
    """BestSplit (Eq. 1); ``None`` when no dimension fits."""
    return max(rows, key=SplitTuple.key, default=None)


def output_of(view: DsaGraph, members: Sequence[int]) -> str:
    """The subgraph's output that defines its tiling: the last one it writes for use
    outside (or for the graph), else its last node's first output."""
    inside = set(members)
    outs = set(view.graph.outputs)
    for i in sorted(members, reverse=True):
        for t in view.writes[i]:
            if t in outs or any(c not in inside for c in view.consumers.get(t, [])):
                return t
    return view.writes[max(members)][0]


def needed(view: DsaGraph, members: Sequence[int], out: str, axis: int, lo: int, hi: int):
    """The slice of every tensor an instance writing ``out[axis][lo:hi]`` touches: tensor ->
    ``(axis, lo, hi)``, or ``None`` when it needs the whole tensor."""
    region: dict[str, Interval | None] = {out: (axis, lo, hi)}
    for i in sorted(members, reverse=True):
        node = view.nodes[i]
        got = [region[t] for t in view.writes[i] if t in region]
        if not got:
            continue
        want = got[0] if all(g == got[0] for g in got) else None
        for t in view.reads[i]:
            mine = _through(view, node, t, want)
            if t in region and region[t] != mine:
                mine = _union(region[t], mine)
            region[t] = mine
    return region


def _through(view: DsaGraph, node, tensor: str, want: Interval | None) -> Interval | None:
    if want is None:
        return None
    axis, lo, hi = want
    shape = view.graph.tensors[tensor].static_shape
    out_shape = view.graph.tensors[node.outputs[0]].static_shape
    if shape is None or out_shape is None or len(shape) != len(out_shape):
        return None
    if node.op_type in _PASS_ALL:
        return want if shape[axis] == out_shape[axis] else None
    if node.op_type not in _WINDOWED or tensor != node.inputs[0]:
        return None
    if axis == 0 or (axis == 1 and node.op_type != "Conv"):
        return want
    if axis == 1:
        return None
    k = axis - 2
    a = node.attributes
    if node.op_type == "Conv":
        kernel = view.graph.tensors[node.inputs[1]].static_shape[axis]
    else:
        kernel = a["kernel_shape"][k]
    stride = (a.get("strides") or [1] * 8)[k]
    dilation = (a.get("dilations") or [1] * 8)[k]
    pad = (a.get("pads") or [0] * 16)[k]
    new_lo = max(0, lo * stride - pad)
    new_hi = min(shape[axis], (hi - 1) * stride - pad + (kernel - 1) * dilation + 1)
    return (axis, new_lo, new_hi)


def _union(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None or a[0] != b[0]:
        return None
    return (a[0], min(a[1], b[1]), max(a[2], b[2]))


def sliced_bytes(view: DsaGraph, tensor: str, interval: Interval | None) -> int:
    full = view.tensor_bytes[tensor]
    if interval is None:
        return full
    axis, lo, hi = interval
    return math.ceil(full * (hi - lo) / view.graph.tensors[tensor].static_shape[axis])


def fused(view: DsaGraph, tensor: str) -> bool:
    """Whether ``tensor`` never exists whole: it passes inside a layer, whose ops are fused
    loop by loop around their anchor (section 4.1), so it lives in tiles only."""
    p = view.producer.get(tensor)
    users = view.consumers.get(tensor, [])
    return (
        p is not None
        and tensor not in view.graph.outputs
        and bool(users)
        and all(view.layer[c] == view.layer[p] for c in users)
    )


def peak_bytes(view: DsaGraph, members: Sequence[int], region: dict, factor: int) -> int:
    """Most activation bytes live at once while an instance runs its nodes in order:
    inputs from outside until their last use, intermediates from write to last read,
    outputs until the end; tensors fused inside a layer take no buffer."""
    order = sorted(members)
    inside = set(order)
    last: dict[str, int] = {}
    for step, i in enumerate(order):
        for t in view.reads[i]:
            last[t] = step
    keep = set(view.graph.outputs)
    for i in order:
        for t in view.writes[i]:
            if t in keep or any(c not in inside for c in view.consumers.get(t, [])):
                last[t] = len(order)

    def share(t: str) -> int:
        full = view.tensor_bytes[t]
        return full if region.get(t) is None else math.ceil(full / factor)

    live = {t: share(t) for i in order for t in view.reads[i]}
    live = {t: b for t, b in live.items() if view.producer.get(t) not in inside}
    peak = sum(live.values())
    for step, i in enumerate(order):
        for t in view.writes[i]:
            if not fused(view, t):
                live[t] = share(t)
        peak = max(peak, sum(live.values()))
        for t in list(live):
            if last.get(t, -1) <= step:
                del live[t]
    return peak


def plain_binding(shape: Sequence[int], cores: int) -> tuple[int, ...]:
    """Algorithm 4's plain strategy: per dimension, outer to inner, the first of 8, 4, 2, 1
    that divides the extent and keeps the product within ``cores``."""
    binding, used = [], 1
    for extent in shape:
        for k in BINDING_FACTORS:
            if extent % k == 0 and used * k <= cores:
                binding.append(k)
                used *= k
                break
    return tuple(binding)


def split_info(
    view: DsaGraph, members: Sequence[int], local_bytes: int, cores: int
) -> list[SplitTuple]:
    """Algorithm 1: per output dimension, the smallest factor whose instances fit."""
    out = output_of(view, members)
    shape = view.graph.tensors[out].static_shape
    rows = []
    for dim, size in enumerate(shape):
        for v in [x for x in (1, 2, 4) if x <= size] + list(range(8, size + 1)):
            if size % v:
                continue
            k = v // 2  # an interior instance: the widest halo
            step = size // v
            region = needed(view, members, out, dim, k * step, (k + 1) * step)
            split = [t for t, r in region.items() if r is not None]
            if any(view.graph.tensors[t].static_shape[region[t][0]] % v for t in split):
                continue
            instance_shape = list(shape)
            instance_shape[dim] = step
            binding = plain_binding(instance_shape, cores)
            peak = peak_bytes(view, members, region, v)
            core_peak = math.ceil(peak / math.prod(binding))
            if core_peak <= local_bytes:
                cut = sum(1 for i in members if any(region.get(t) for t in view.writes[i]))
                rows.append(SplitTuple(dim, v, cut, peak, core_peak, binding))
                break
    return rows
