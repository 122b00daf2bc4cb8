"""Profiling on a remote device: the TVM build of the prepared model, run and timed on
the device through its RPC tracker, each kernel timed alone there.

onnxruntime does not run on such a device, so the per-op figures come from the TVM
kernels: a kernel's time is given to the ONNX nodes fused into it in proportion to their
FLOPs (evenly where a node's FLOPs are unknown, and the row says so). The result has the
measured profile's layout so the same views read it; ``measured_on`` names the device.
"""

from __future__ import annotations

import tempfile

from engine.errors import ProgressFn
from engine.fusion.compile import CompileConfig
from engine.fusion.on_device import compile_on_device
from engine.graph.costs import cost_node
from engine.graph.prepared import PreparedModel
from engine.profiling.options import ProfileOptions
from engine.targets.schema import TargetProfile


def profile_on_device(
    prepared: PreparedModel, target: TargetProfile, options: ProfileOptions, progress: ProgressFn
) -> dict:
    """The measured profile of ``prepared`` on ``target``'s device (see the module)."""
    with tempfile.TemporaryDirectory(prefix="workbench-remote-profile-") as scratch:
        config = CompileConfig(
            out_dir=scratch,
            threads=options.threads,
            input_shapes=prepared.input_shapes,
            timing_window_s=options.window_s,
            kernel_timing_runs=5,
        )
        built = compile_on_device(prepared.model, target.remote, config, progress)
    device = built["measured_on"]
    timing = built["timing"]
    reported = device["reported"]
    where = f"device '{device['key']}' at {device['address']} ({reported.get('cpu') or '?'})"
    kernels = [_kernel_row(k) for k in built["kernels"]]
    kernel_sum = sum(k["median_us"] or 0.0 for k in kernels)
    for k in kernels:
        k["share_pct"] = 100.0 * k["median_us"] / kernel_sum if k["median_us"] else None
    ops = _ops(prepared, built["kernels"], kernel_sum)
    latency = {
        "median": timing["latency_ms"],
        "p90": timing["p90_ms"],
        "min": timing["min_ms"],
        "runs": timing["runs"],
    }
    return {
        "target": target.name,
        "unit": target.units[0].name if target.units else "device",
        "method": timing["method"],
        "runs": timing["runs"],
        "window_s": options.window_s,
        "threads": built["threads"],
        "latency": latency,
        "kernel_sum_ms": kernel_sum / 1e3,
        "ops": ops,
        "measured_on": device,
        "environment": {
            "machine": {"cpu_model": where, "triple": reported.get("triple")},
            "intra_op_threads": built["threads"],
            "device": device,
        },
        "tvm_kernels": {
            "method": "each kernel alone on the device (TVM time_evaluator over RPC)",
            "runs": 5,
            "threads": built["threads"],
            "target": built["target"]["target"],
            "latency_ms": built["latency_ms"],
            "onnxruntime_latency_ms": None,
            "kernel_sum_ms": kernel_sum / 1e3,
            "kernels": kernels,
            "fallback_nodes": built["fallback_nodes"],
        },
        "outputs_match": built["outputs_match"],
        "max_abs_error": built["max_abs_error"],
        "profiled_model": "the prepared model, built with TVM for the device",
        "sweeps": [],
        "findings": [],
        "warnings": [
            "onnxruntime does not run on a device reached over TVM RPC: per-op times are "
            "the TVM kernels', shared among the nodes fused into each by FLOPs"
        ],
    }


def _kernel_row(kernel: dict) -> dict:
    return {
        "id": kernel["id"],
        "func": kernel["func"],
        "segment": kernel["segment"],
        "nodes": kernel["nodes"],
        "op_types": kernel["op_types"],
        "pattern": kernel["pattern"],
        "intensity": kernel["intensity"],
        "flops": kernel["flops"],
        "global_bytes": kernel["global_bytes"],
        "median_us": kernel["time_us"],
        "p90_us": None,
        "spread_pct": None,
        "runs": 5 if kernel["time_us"] is not None else 0,
        "onnxruntime_us": None,
    }


def _ops(prepared: PreparedModel, kernels: list[dict], total_us: float) -> list[dict]:
    """One row per node of the prepared graph, its share of its kernel's time."""
    costs = {n.name: cost_node(n, prepared.graph) for n in prepared.graph.nodes}
    kernel_of: dict[str, dict] = {}
    for kernel in kernels:
        for node in kernel["nodes"]:
            kernel_of.setdefault(node, kernel)
    rows = []
    for node in prepared.graph.nodes:
        cost, kernel = costs.get(node.name), kernel_of.get(node.name)
        latency, status = None, "unmapped"
        if kernel is not None and kernel["time_us"] is not None:
            members = [costs.get(n) for n in kernel["nodes"]]
            known = [c.flops for c in members if c is not None]
            if cost is not None and len(known) == len(members) and sum(known) > 0:
                latency = kernel["time_us"] * cost.flops / sum(known)
            else:
                latency = kernel["time_us"] / len(members)
            status = "measured" if len(members) == 1 else "fused"
        elif kernel is not None:
            status = "not timed"
        row = {
            "name": node.name,
            "op_type": node.op_type,
            "variant": None,
            "status": status,
            "kernel": kernel["id"] if kernel else None,
            "latency_us": latency,
            "p90_us": None,
            "spread_pct": None,
            "typical_us": latency,
            "share_pct": 100.0 * latency / total_us if latency and total_us else None,
            "flops": cost.flops if cost else None,
            "bytes": cost.bytes_read + cost.bytes_written if cost else None,
            "dtype": "",
            "intensity": cost.intensity if cost else None,
        }
        users = prepared.user_nodes.get(node.name)
        if users is not None and users != (node.name,):
            row["user_names"] = list(users)
        rows.append(row)
    return rows
