"""What each stage's result adds to the model graph as a colour (a ``Metric`` per node):
latency from profile, compute unit from partition, kernel from compile, tensor lifetime
from the memory plan, error from accuracy. Each label says whether its numbers are
measured, predicted or planned.

The model page's graph tab shows them all at once, from the model's latest result of each
stage; a run page's graph shows its own run's.
"""

from __future__ import annotations

from collections.abc import Callable

from frontend.figures.accuracy import layer_errors_by_node
from frontend.figures.graph import Metric


def latency(result: dict) -> dict[str, Metric]:
    unit = result.get("best_unit")
    values = {}
    for op in result.get("ops", []):
        us = op.get("latency_us")
        values[op["name"]] = us.get(unit) if isinstance(us, dict) else us
    label = (
        "latency, measured (µs)" if result.get("measured") else f"latency on {unit}, predicted (µs)"
    )
    return {"latency_us": Metric(label, values=values, unit="µs")}


def unit(result: dict) -> dict[str, Metric]:
    best = result.get("best")
    placement = (result.get("results") or {}).get(best, {}).get("placement")
    if not placement:
        return {}
    label = f"compute unit ({best}, predicted schedule)"
    return {"unit": Metric(label, kind="categorical", values=placement, aggregate="mode")}


def kernel(result: dict) -> dict[str, Metric]:
    kernel_of = {node: k["id"] for k in result.get("kernels", []) for node in k["nodes"]}
    if not kernel_of:
        return {}
    backend = {}
    for k in result.get("kernels", []):
        for node in k["nodes"]:
            backend[node] = k.get("backend")
    metrics = {"kernel": Metric("kernel", kind="categorical", values=kernel_of, aggregate="mode")}
    if any(backend.values()):
        metrics["backend"] = Metric(
            "kernel backend", kind="categorical", values=backend, aggregate="mode"
        )
    return metrics


def lifetime(result: dict) -> dict[str, Metric]:
    """How many steps of the execution order each node's output stays in memory, in the
    best planner's plan (planned from shapes, not measured)."""
    plan = (result.get("plans") or {}).get(result.get("best"), [])
    producer = {t["name"]: t.get("producer") for t in result.get("tensors", [])}
    steps: dict[str, int] = {}
    held: dict[str, int] = {}
    for entry in plan:
        node = producer.get(entry["tensor"])
        if node:
            steps[node] = max(steps.get(node, 0), entry["last"] - entry["first"] + 1)
            held[node] = held.get(node, 0) + entry["size"]
    if not steps:
        return {}
    return {
        "lifetime_steps": Metric(
            "output lifetime, planned (ops)", values=steps, scale="linear", aggregate="max"
        ),
        "held_bytes": Metric("output bytes held, planned", values=held, unit="B"),
    }


def error(result: dict) -> dict[str, Metric]:
    by_node = layer_errors_by_node(result)
    if not by_node:
        return {}
    return {
        "snr_db": Metric(
            "error: SNR of the layer, measured (dB)",
            values={node: e["snr_db"] for node, e in by_node.items()},
            unit="dB",
            scale="linear",
            aggregate="min",
        ),
        "max_abs": Metric(
            "error: max abs of the layer, measured",
            values={node: e["max_abs"] for node, e in by_node.items()},
            aggregate="max",
        ),
    }


OVERLAYS: dict[str, Callable[[dict], dict[str, Metric]]] = {
    "profile": latency,
    "partition": unit,
    "compile": kernel,
    "memory": lifetime,
    "accuracy": error,
}


def stage_overlays(results: dict[str, dict]) -> dict[str, Metric]:
    """Every overlay the results give, keyed by metric, in the stages' order."""
    metrics: dict[str, Metric] = {}
    for stage, overlay in OVERLAYS.items():
        if results.get(stage):
            metrics.update(overlay(results[stage]))
    return metrics
