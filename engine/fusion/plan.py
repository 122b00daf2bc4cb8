"""The fusion plan shown to the user: kernels, their class, traffic, and why each cut.

Classes follow Souffle (thesis ch.4 section 2.3): a kernel whose blocks have no
reduction axis is *one-relies-on-one* (each output element needs one element of each
input); one with a reduction is *one-relies-on-many*. Compute- vs memory-intensive is
Souffle's ratio of work to data: FLOPs per element moved through global memory, below
2 is memory-intensive. Global-memory bytes of a kernel are its inputs (weights
included) plus its outputs; intermediates inside a kernel are assumed to stay on chip.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from engine.fusion.lowering import (
    BROADCAST,
    ELEMWISE,
    INJECTIVE,
    OPAQUE,
    OUT_EWISE,
    PATTERN_NAMES,
    REDUCE,
    KernelCall,
)

MEMORY_BOUND_RATIO = 2.0  # Souffle's empirical threshold (thesis L1230)
_FUSABLE_EPILOGUE = (ELEMWISE, BROADCAST)


@dataclass
class Kernel:
    """One kernel launch of the compiled model."""

    id: str
    func: str
    segment: int
    ops: list[str]
    nodes: list[str]
    op_types: list[str]
    pattern: str
    souffle_class: str  # "one-relies-on-one" | "one-relies-on-many"
    intensity: str  # "compute" | "memory"
    flops: int
    bytes_in: int
    bytes_out: int
    param_bytes: int
    global_bytes: int
    schedule: str = "default"
    time_us: float | None = None
    share: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Boundary:
    """A tensor passing between two kernels through global memory, and why it is cut."""

    producer: str
    consumer: str
    bytes: int
    rule: str
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FusionStage:
    """Kernel count and traffic after one step: unfused, FuseOps, then each of our rules."""

    name: str
    kernels: int
    traffic_bytes: int
    accepted: bool = True
    rewrites: int = 0
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class FusionPlan:
    kernels: list[Kernel] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)
    stages: list[FusionStage] = field(default_factory=list)
    rewrites: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        fuseops = next((s for s in self.stages if s.name == "fuseops"), None)
        final = self.stages[-1] if self.stages else None
        return {
            "stages": [s.to_dict() for s in self.stages],
            "kernel_count_fuseops": fuseops.kernels if fuseops else None,
            "traffic_bytes_fuseops": fuseops.traffic_bytes if fuseops else None,
            "kernel_count": final.kernels if final else len(self.kernels),
            "traffic_bytes": final.traffic_bytes if final else None,
            "boundaries": [b.to_dict() for b in self.boundaries],
            "cut_rules": _count(b.rule for b in self.boundaries),
            "rewrites": list(self.rewrites),
            "classes": _count(k.souffle_class for k in self.kernels),
            "intensity": _count(k.intensity for k in self.kernels),
        }


def traffic(calls: list[KernelCall]) -> int:
    """Estimated global-memory bytes of a list of kernels."""
    return sum(c.bytes_in + c.bytes_out for c in calls)


def make_kernels(
    calls: list[KernelCall], segment: int, op_types: dict[str, str], origin: dict[str, list[str]]
) -> list[Kernel]:
    """User-facing kernels; ``origin`` maps rewritten node names back to the model's."""
    kernels = []
    for c in calls:
        nodes = list(dict.fromkeys(n for name in c.nodes for n in origin.get(name, [name])))
        moved = c.bytes_in + c.bytes_out
        elements = max(moved // 4, 1)
        kernels.append(
            Kernel(
                id=kernel_id(segment, c),
                func=c.func,
                segment=segment,
                ops=list(c.prims),
                nodes=nodes,
                op_types=list(dict.fromkeys(op_types.get(n, "?") for n in nodes)),
                pattern=PATTERN_NAMES.get(c.pattern, str(c.pattern)),
                souffle_class="one-relies-on-many" if c.reduce_extent > 1 else "one-relies-on-one",
                intensity="memory" if c.flops / elements < MEMORY_BOUND_RATIO else "compute",
                flops=c.flops,
                bytes_in=c.bytes_in,
                bytes_out=c.bytes_out,
                param_bytes=c.param_bytes,
                global_bytes=moved,
            )
        )
    return kernels


def kernel_id(segment: int, call: KernelCall) -> str:
    return f"s{segment}k{call.index}"


def boundaries(calls: list[KernelCall], segment: int) -> list[Boundary]:
    """Every producer -> consumer edge between kernels, with the FuseOps rule that cut it."""
    by_var = {c.var: c for c in calls}
    readers: dict[str, list[KernelCall]] = defaultdict(list)
    for c in calls:
        for a in dict.fromkeys(c.args):
            if a in by_var:
                readers[a].append(c)
    found = []
    for var, consumers in readers.items():
        producer = by_var[var]
        for consumer in consumers:
            rule, reason = _cut_reason(producer, consumer, len(consumers))
            found.append(
                Boundary(
                    kernel_id(segment, producer),
                    kernel_id(segment, consumer),
                    producer.bytes_out,
                    rule,
                    reason,
                )
            )
    return found


def _cut_reason(producer: KernelCall, consumer: KernelCall, fanout: int) -> tuple[str, str]:
    p, c = producer.pattern, consumer.pattern
    if p == OPAQUE or c == OPAQUE:
        which = producer if p == OPAQUE else consumer
        return "opaque", f"{which.func} is opaque to FuseOps (not expressible as one loop nest)"
    if p == OUT_EWISE and c == OUT_EWISE:
        return "two-anchors", "two conv/matmul/pool anchors never share a kernel in FuseOps"
    if p == REDUCE and c <= INJECTIVE:
        return (
            "after-reduction",
            "a reduction ends its kernel: FuseOps fuses producers into a reduction, "
            "not the reduction into its consumers",
        )
    if fanout > 1:
        return "fan-out", f"the tensor is read by {fanout} kernels; fusing would recompute it"
    if c in (OUT_EWISE, REDUCE) and p not in _FUSABLE_EPILOGUE:
        return "anchor-input", "FuseOps does not fuse injective producers into an anchor's input"
    if p == OUT_EWISE and c > BROADCAST:
        return (
            "non-elementwise-epilogue",
            "only elementwise/broadcast consumers fuse into a conv/matmul epilogue",
        )
    if c == OUT_EWISE:
        return "anchor-input", "a conv/matmul starts a new kernel; its inputs come from memory"
    return "dominator", "the consumer does not post-dominate the producer (FuseOps' rule)"


def _count(values) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for v in values:
        counts[v] += 1
    return dict(counts)
