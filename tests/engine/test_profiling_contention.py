"""Telling other processes' memory traffic apart from the model: memory-bound kernels'
time per run compared block by block (engine.profiling.contention)."""

from __future__ import annotations

from engine.profiling.attribution import KernelProfile, OpProfile
from engine.profiling.contention import memory_bound_kernels, memory_contention
from engine.profiling.trace import KernelSamples, Trace


def _op(name: str, op_type: str, flops: int, moved: int) -> OpProfile:
    return OpProfile(
        name, op_type, None, "measured", name, 100.0, 110.0, 5.0, 100.0, None,
        flops, moved, "float32", flops / moved,
    )  # fmt: skip


def _kernel(name: str, op_type: str, us: float) -> KernelProfile:
    return KernelProfile(name, op_type, [name], us, us, 5.0, us, 12)


OPS = [
    _op("conv", "Conv", 200_000_000, 2_000_000),  # 100 FLOPs per byte
    _op("add", "Add", 100_000, 1_200_000),  # 0.08
    _op("concat", "Concat", 0, 800_000),
]
KERNELS = [_kernel("conv", "Conv", 1000.0), _kernel("add", "Add", 150.0),
           _kernel("concat", "Concat", 100.0)]  # fmt: skip


def _trace(add_us: list[float], conv_us: list[float]) -> Trace:
    runs = list(range(len(add_us)))
    return Trace(
        [a + c + 100.0 for a, c in zip(add_us, conv_us, strict=True)],
        [
            KernelSamples("conv", "Conv", conv_us, runs),
            KernelSamples("add", "Add", add_us, runs),
            KernelSamples("concat", "Concat", [100.0] * len(runs), runs),
        ],
    )


def test_kernels_are_split_by_arithmetic_intensity():
    assert memory_bound_kernels(KERNELS, OPS) == {"add", "concat"}


def test_memory_bound_kernels_slowed_in_one_block_are_reported_as_contention():
    # Add slowed by 60% in the last block of 4 runs, the Conv steady: the whole run moves
    # by under 10%, the memory-bound kernels by over 30%
    add = [150.0] * 8 + [240.0] * 4
    contention = memory_contention(_trace(add, [1000.0] * 12), KERNELS, OPS, block_runs=4)
    assert contention is not None and contention.contended
    assert (contention.memory_kernels, contention.compute_kernels) == (2, 1)
    assert contention.memory_block_ms == [0.25, 0.25, 0.34]
    assert round(contention.memory_spread_pct) == 36 and contention.compute_spread_pct == 0
    assert contention.memory_op_types == ["Add", "Concat"]
    text = contention.warning()
    assert "competed for memory bandwidth" in text and "0.250 to 0.340 ms" in text
    assert "(Add, Concat; 20% of the kernel time)" in text


def test_steady_memory_bound_kernels_are_not_contention():
    add = [150.0, 152.0, 149.0, 151.0] * 3
    contention = memory_contention(_trace(add, [1000.0] * 12), KERNELS, OPS, block_runs=4)
    assert contention is not None and not contention.contended


def test_no_verdict_without_both_kinds_of_kernel_or_two_blocks():
    trace = _trace([150.0] * 12, [1000.0] * 12)
    assert memory_contention(trace, KERNELS[:1], OPS, block_runs=4) is None  # no memory-bound
    assert memory_contention(trace, KERNELS[1:], OPS, block_runs=4) is None  # no compute-bound
    assert memory_contention(trace, KERNELS, OPS, block_runs=8) is None  # one block
