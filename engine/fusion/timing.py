"""Per-kernel and whole-model timing of a compiled model on this machine.

Per kernel: the Relax VM calls an instrument before and after every packed call
(``vm.set_instrument``); the time between the two for each of our kernels is that
launch's time. Calls of one kernel are told apart by their order within a run, so the
k-th call of ``fused_conv2d_add_relu`` is the k-th call site of that kernel in ``main``.
Whole model: median wall time of repeated runs after a warm-up, the same rule for TVM
and onnxruntime, with the same thread count, in the same process.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

WARMUP_RUNS = 2


@dataclass(frozen=True)
class TimingConfig:
    min_runs: int = 5
    max_runs: int = 200
    window_s: float = 2.0  # keep repeating until this much time has passed


def time_calls(run: Callable[[], object], config: TimingConfig) -> dict[str, float]:
    """Median, p90 and min wall time of ``run()`` in milliseconds, after a warm-up."""
    for _ in range(WARMUP_RUNS):
        run()
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < config.max_runs:
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e3)
        if len(samples) >= config.min_runs and time.perf_counter() - started >= config.window_s:
            break
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "min": ordered[0],
        "runs": len(ordered),
    }


def kernel_times_us(vm, run: Callable[[], object], kernels: set[str], runs: int = 3) -> dict:
    """Median time of each kernel call in microseconds: ``{(symbol, occurrence): us}``."""
    samples = kernel_samples_us(vm, run, kernels, TimingConfig(min_runs=runs, max_runs=runs))
    return {key: statistics.median(values) for key, values in samples.items()}


def kernel_samples_us(
    vm, run: Callable[[], object], kernels: set[str], config: TimingConfig
) -> dict[tuple[str, int], list[float]]:
    """Every timed call of each kernel in microseconds, ``{(symbol, occurrence): [us]}``:
    one warm-up run, then runs until ``config.min_runs`` are done and ``config.window_s``
    has passed (at most ``config.max_runs``), as for whole-model timing."""
    from tvm.runtime.vm import VMInstrumentReturnKind

    samples: dict[tuple[str, int], list[float]] = defaultdict(list)
    seen: dict[str, int] = defaultdict(int)
    started: dict[str, float] = {}

    def instrument(func, symbol, before, ret, *args):
        if symbol in kernels:
            if before:
                started[symbol] = time.perf_counter_ns()
            else:
                key = (symbol, seen[symbol])
                seen[symbol] += 1
                samples[key].append((time.perf_counter_ns() - started[symbol]) / 1e3)
        return VMInstrumentReturnKind.NO_OP

    run()  # warm-up without the instrument
    vm.set_instrument(instrument)
    begun, runs = time.perf_counter(), 0
    try:
        while runs < config.max_runs:
            seen.clear()
            run()
            runs += 1
            if runs >= config.min_runs and time.perf_counter() - begun >= config.window_s:
                break
    finally:
        vm.set_instrument(None)
    return dict(samples)


def set_threads(threads: int) -> None:
    """Size TVM's runtime thread pool (0: leave as it is)."""
    import tvm

    if threads > 0:
        config = tvm.get_global_func("runtime.config_threadpool", True)
        if config is not None:
            config(1, threads)  # 1: big cores first, then the count
