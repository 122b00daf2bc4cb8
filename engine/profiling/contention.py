"""Whether other processes competed for memory bandwidth while a profile ran.

On a shared machine (a cloud VM, a desktop with a browser open) another process's memory
traffic slows the memory-bound kernels (elementwise Add, Concat, pooling, a batch-1 Gemm)
for seconds at a time, while the compute-bound ones (Conv, a large MatMul) hardly move. The
whole run changes by a few percent, inside the whole-run stability check's tolerance, while
single memory-bound ops change by half. Seen on this project's 2-core VM: within one
minute, the median of ResNet-50's residual Add over 3-second stretches went from 139 to
242 us and back, in all three profiled sessions at once, following the bandwidth of a
32 MiB copy timed between runs (correlation -0.81); the whole run moved by 4%.

So the kernels are split by the arithmetic intensity of the nodes they ran, and the
memory-bound kernels' time per run is compared block by block. When it moves more than the
tolerance, the profile says so: its memory-bound ops' figures hold for the traffic of that
moment, not for a quiet machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from engine.profiling.attribution import KernelProfile, OpProfile
from engine.profiling.latency import agree, block_medians
from engine.profiling.trace import Trace

MEMORY_BOUND_FLOPS_PER_BYTE = 1.0
"""A kernel whose nodes do fewer FLOPs per byte moved than this is memory-bound on any CPU:
fp32 ridge points are several FLOPs per byte. Add is 0.08, Concat 0, BatchNormalization
about 0.3, a batch-1 Gemm 0.5, a 3x3 Conv tens to hundreds."""
TOLERANCE_PCT = 10.0
"""Memory-bound time per run may move this much between blocks before the profile warns
(the figure the issue holds repeated per-op medians to)."""


@dataclass(frozen=True)
class Contention:
    """The memory-bound and compute-bound kernels' time per run (ms), median per block of
    ``block_runs`` runs over every recorded run, and how far apart the blocks were."""

    memory_kernels: int
    compute_kernels: int
    memory_share_pct: float
    block_runs: int
    memory_block_ms: list[float]
    compute_block_ms: list[float]
    memory_spread_pct: float
    compute_spread_pct: float
    memory_op_types: list[str]
    contended: bool

    def to_dict(self) -> dict:
        return asdict(self)

    def warning(self) -> str:
        types = ", ".join(self.memory_op_types[:4])
        return (
            f"other processes competed for memory bandwidth while profiling: the "
            f"{self.memory_kernels} memory-bound kernels ({types}; "
            f"{self.memory_share_pct:.0f}% of the kernel time) took "
            f"{min(self.memory_block_ms):.3f} to {max(self.memory_block_ms):.3f} ms per run "
            f"from block to block ({self.memory_spread_pct:.0f}% apart), the compute-bound "
            f"ones {self.compute_spread_pct:.0f}%. Memory-bound ops' figures depend on that "
            "traffic: a longer window averages over it, a quieter machine removes it."
        )


def memory_bound_kernels(kernels: Sequence[KernelProfile], ops: Sequence[OpProfile]) -> set[str]:
    """Names of the kernels whose nodes, together, move more bytes than
    ``1 / MEMORY_BOUND_FLOPS_PER_BYTE`` per FLOP. Kernels without costed nodes are left out
    of both groups."""
    by_name = {op.name: op for op in ops}
    found = set()
    for kernel in kernels:
        costed = [by_name[n] for n in kernel.nodes if by_name[n].bytes]
        moved = sum(op.bytes or 0 for op in costed)
        if moved and sum(op.flops or 0 for op in costed) / moved < MEMORY_BOUND_FLOPS_PER_BYTE:
            found.add(kernel.name)
    return found


def memory_contention(
    trace: Trace,
    kernels: Sequence[KernelProfile],
    ops: Sequence[OpProfile],
    block_runs: int,
    tolerance_pct: float = TOLERANCE_PCT,
) -> Contention | None:
    """Compare the memory-bound kernels' time per run across blocks of ``trace`` (every
    recorded run); ``None`` when the model has no memory-bound or no compute-bound kernel,
    or fewer than two blocks were recorded."""
    memory = memory_bound_kernels(kernels, ops)
    costed = {op.name for op in ops if op.bytes}
    compute = {k.name for k in kernels if k.name not in memory and costed.intersection(k.nodes)}
    runs = len(trace.runs_us)
    if not memory or not compute or block_runs < 1 or runs < 2 * block_runs:
        return None
    memory_ms, compute_ms = [0.0] * runs, [0.0] * runs
    for samples in trace.kernels:
        if samples.name in memory:
            target = memory_ms
        elif samples.name in compute:
            target = compute_ms
        else:
            continue
        for t, r in zip(samples.samples_us, samples.runs, strict=True):
            target[r] += t / 1e3
    memory_blocks = block_medians(memory_ms, block_runs)
    compute_blocks = block_medians(compute_ms, block_runs)
    total = sum(k.latency_us for k in kernels) or 1.0
    types: dict[str, float] = {}
    for k in kernels:
        if k.name in memory:
            types[k.op_type] = types.get(k.op_type, 0.0) + k.latency_us
    return Contention(
        memory_kernels=len(memory),
        compute_kernels=len(compute),
        memory_share_pct=100.0 * sum(k.latency_us for k in kernels if k.name in memory) / total,
        block_runs=block_runs,
        memory_block_ms=[round(m, 4) for m in memory_blocks],
        compute_block_ms=[round(m, 4) for m in compute_blocks],
        memory_spread_pct=_spread(memory_blocks),
        compute_spread_pct=_spread(compute_blocks),
        memory_op_types=sorted(types, key=lambda t: -types[t]),
        contended=not agree(memory_blocks, tolerance_pct),
    )


def _spread(medians: list[float]) -> float:
    low = min(medians)
    return 100.0 * (max(medians) / low - 1.0) if low > 0 else 0.0
