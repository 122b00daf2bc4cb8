"""The branched model in onnxruntime on this machine: that it runs and gives the original's
output shapes (every target), and on a measured target how long it takes with its branches
in parallel against the original (NN-Stretch's measured speedup).

Timing: one session per configuration, ``warmup`` runs, then ``reps`` timed runs; the
median is reported with the machine, the repetitions and the threads. The branched model
runs with onnxruntime's parallel executor (``ORT_PARALLEL``), one inter-op thread per
branch and the group's threads inside each op; the original runs sequentially on one
group's threads (the "single processor" the prediction compares with) and on all the
cores (what a user would otherwise do). Every session's pool threads block when idle
instead of spinning (``allow_spinning`` 0): a spinning thread holds the core another
branch needs. The load average before and after is kept with the figures: on a busy
machine the parallel branches are the first to suffer.
"""

from __future__ import annotations

import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort

from engine.graph.ir import Graph
from engine.targets.host import describe_host


def feeds_for(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs of the prepared model's bound shapes."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name in graph.inputs:
        t = graph.tensors[name]
        dtype = np.dtype(t.dtype) if t.dtype != "?" else np.float32
        if np.issubdtype(dtype, np.floating):
            feeds[name] = rng.standard_normal(t.static_shape).astype(dtype)
        else:
            feeds[name] = rng.integers(0, 2, t.static_shape).astype(dtype)
    return feeds


def session(model: onnx.ModelProto | bytes, *, intra: int, inter: int = 1, parallel: bool = False):
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra
    options.inter_op_num_threads = inter
    options.execution_mode = (
        ort.ExecutionMode.ORT_PARALLEL if parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    )
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def check_runs(original: onnx.ModelProto | bytes, branched: onnx.ModelProto | bytes,
               feeds: dict) -> dict:  # fmt: skip
    """Run both models once; the branched one must give every output at the original's
    shape (its values differ: its weights are not trained)."""
    expected = session(original, intra=1).run(None, feeds)
    got_session = session(branched, intra=1)
    got = got_session.run(None, feeds)
    names = [o.name for o in got_session.get_outputs()]
    outputs = [
        {"name": n, "shape": list(g.shape), "expected_shape": list(e.shape),
         "match": g.shape == e.shape and bool(np.all(np.isfinite(g)))}
        for n, g, e in zip(names, got, expected, strict=True)
    ]  # fmt: skip
    return {
        "ran": True,
        "outputs": outputs,
        "shapes_match": all(o["match"] for o in outputs),
        "where": "this worker's CPU, onnxruntime " + ort.__version__,
    }


def time_model(model, feeds: dict, *, intra: int, inter: int = 1, parallel: bool = False,
               reps: int = 20, warmup: int = 3) -> dict:  # fmt: skip
    """Median wall time of one inference (ms) over ``reps`` runs after ``warmup``."""
    s = session(model, intra=intra, inter=inter, parallel=parallel)
    for _ in range(warmup):
        s.run(None, feeds)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        s.run(None, feeds)
        samples.append((time.perf_counter() - t0) * 1e3)
    return {
        "median_ms": round(statistics.median(samples), 4),
        "min_ms": round(min(samples), 4),
        "reps": reps,
        "warmup": warmup,
        "intra_op_threads": intra,
        "inter_op_threads": inter,
        "execution_mode": "parallel" if parallel else "sequential",
    }


def machine() -> dict:
    host = describe_host()
    return {
        "hostname": host["hostname"],
        "cpu_model": host["cpu_model"],
        "usable_cores": host["usable_cores"] or host["logical_cores"],
        "onnxruntime": ort.__version__,
    }


def load_average() -> float | None:
    """The one-minute load average (``None`` where the OS does not say)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None
