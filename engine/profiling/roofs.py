"""The roofs of this machine's CPU, measured with onnxruntime itself.

A roofline needs a peak throughput and a memory bandwidth. Spec-sheet peaks are not what a
runtime reaches, so both roofs are measured with the runtime that is profiled: a large fp32
MatMul for the compute roof and a large elementwise Add for the bandwidth roof (each the
best of repeated runs, since a roof is an upper bound). They are "achievable" roofs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from engine.errors import ProgressFn
from engine.profiling.session import environment, load_average, open_session, run_once

METHOD = "best of repeated onnxruntime runs: fp32 MatMul (compute), elementwise Add (memory)"


@dataclass
class Roofs:
    """Measured on this machine: fp32 GFLOPS and memory GB/s reached by onnxruntime."""

    peak_gflops_fp32: float
    mem_bw_gbps: float
    matmul_n: int
    stream_bytes: int
    runs: int
    method: str
    environment: dict
    measured: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


def measure_roofs(
    threads: int = 0,
    *,
    matmul_n: int = 1024,
    stream_elements: int = 1 << 24,
    window_s: float = 1.0,
    progress: ProgressFn | None = None,
) -> Roofs:
    """Measure the compute and memory roofs of this CPU with ``threads`` intra-op threads."""
    load_before = load_average()
    report = progress or (lambda fraction, message: None)
    n = matmul_n
    report(0.0, f"timing a {n}x{n} fp32 MatMul")
    matmul_s, runs_a = _best_time(_model("MatMul", [n, n], [n, n]), threads, window_s)
    report(0.5, f"timing an Add over {stream_elements} floats")
    add_s, runs_b = _best_time(_model("Add", [stream_elements], [1]), threads, window_s)
    moved = 2 * 4 * stream_elements  # read x, write the sum (the scalar stays in cache)
    report(1.0, "roofs measured")
    return Roofs(
        peak_gflops_fp32=2 * n**3 / matmul_s / 1e9,
        mem_bw_gbps=moved / add_s / 1e9,
        matmul_n=n,
        stream_bytes=moved,
        runs=runs_a + runs_b,
        method=METHOD,
        environment=environment(threads, "all", load_before),
    )


def _model(op_type: str, a_shape: list[int], b_shape: list[int]) -> onnx.ModelProto:
    out = [a_shape[0], b_shape[1]] if op_type == "MatMul" else a_shape
    graph = helper.make_graph(
        [helper.make_node(op_type, ["a", "b"], ["y"])],
        f"roof_{op_type.lower()}",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _best_time(model: onnx.ModelProto, threads: int, window_s: float) -> tuple[float, int]:
    session = open_session(model, threads=threads, optimization="all")
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in session.get_inputs()}
    run_once(session, feeds)  # warm-up
    best, runs = float("inf"), 0
    started = time.perf_counter()
    while runs < 3 or time.perf_counter() - started < window_s:
        t0 = time.perf_counter()
        run_once(session, feeds)
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best, runs
