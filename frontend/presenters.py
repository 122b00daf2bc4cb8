"""How each stage's result appears on a run page: a template and its figures.

A new stage registers a Presenter here; the run page needs no change."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.stages import STAGES
from frontend.figures.accuracy import (
    error_by_layer,
    error_histogram,
    fp16_variant_table,
    layer_errors_by_node,
    metric_table,
    verdict_card,
)
from frontend.figures.analysis import analysis_figures
from frontend.figures.graph import Metric, StageGraph
from frontend.figures.graphturbo import graphturbo_figures
from frontend.figures.kernels import (
    fusion_stages,
    kernel_table,
    kernel_times,
    kernels_vs_onnxruntime,
)
from frontend.figures.memory import live_bytes_curve, memory_timeline, planners_bar, tvm_bar
from frontend.figures.mobile_gpu import (
    kernel_rows,
    partition_rows,
    phwc4_waste_bars,
    support_rows,
)
from frontend.figures.nnstretch import design_rows, nnstretch_figures
from frontend.figures.partition import algorithm_comparison, cut_cost_curve, schedule_gantt
from frontend.figures.partition_energy import trade_off_curve
from frontend.figures.profile import profile_figures, sweep_chart


@dataclass(frozen=True)
class Presenter:
    template: str
    figures: Callable[[dict], dict[str, dict]] = field(default=lambda result: {})
    # Extra template context from the result and the run's other results (by stage).
    context: Callable[[dict, dict], dict] = field(default=lambda result, results: {})


def _top_nodes(analysis: dict, results: dict, n: int = 15) -> dict:
    nodes = [node for node in analysis.get("node_list", []) if node.get("flops")]
    return {"top_nodes": sorted(nodes, key=lambda node: -node["flops"])[:n]}


def _memory_figures(report: dict) -> dict[str, dict]:
    return {
        "timeline": memory_timeline(report),
        "live": live_bytes_curve(report),
        "planners": planners_bar(report),
        **(
            {"tvm": tvm_bar(report["tvm"])} if report.get("tvm", {}).get("tvm_static_bytes") else {}
        ),
    }


def _memory_rows(report: dict, results: dict) -> dict:
    rows = [
        {
            "name": name,
            "arena_bytes": arena,
            "ratio": report.get("ratios", {}).get(name),
            "time_s": report.get("planner_time_s", {}).get(name),
            "kind": report.get("planner_kinds", {}).get(name),
            "best": name == report.get("best"),
        }
        for name, arena in sorted(report.get("planners", {}).items(), key=lambda kv: kv[1])
    ]
    return {"planner_rows": rows}


def _partition_figures(report: dict) -> dict[str, dict]:
    results = report.get("results", {})
    if report.get("planned_on_graph"):  # GraphTurbo, NN-Stretch: no placement to draw
        figures = {}
        for name, r in results.items():
            draw = nnstretch_figures if name == "nn-stretch" else graphturbo_figures
            figures.update(draw(r))
        return figures
    figures = {"compare": algorithm_comparison(report)}
    if report.get("best"):
        figures["gantt"] = schedule_gantt(results[report["best"]])
    if "mobile-cloud" in results:
        figures["cuts"] = cut_cost_curve(results["mobile-cloud"])
    trade = trade_off_curve(report)
    if trade is not None:
        figures["trade_off"] = trade
    return figures


def _partition_context(report: dict, results: dict) -> dict:
    if report.get("planned_on_graph"):
        results = report.get("results", {})
        if "nn-stretch" in results or "nn-stretch" in report.get("failed", {}):
            plan = results.get("nn-stretch")
            return {"nnstretch": plan, "ns_rows": design_rows(plan) if plan else []}
        return {"graphturbo": results.get("graphturbo")}
    rows = sorted(report.get("algorithms", {}).items(), key=lambda kv: kv[1]["makespan_ms"] or 0)
    context = {"rows": rows}
    analysis, best = results.get("analyze"), report.get("best")
    if analysis and best:
        placement = report["results"][best]["placement"]
        unit = Metric(
            f"compute unit ({best})", kind="categorical", values=placement, aggregate="mode"
        )
        context["graph"] = StageGraph(analysis, {"unit": unit}, "unit")
    return context


def _accuracy_context(report: dict, results: dict) -> dict:
    context = {"card": verdict_card(report), "table": metric_table(report)}
    context["fp16_variants"] = fp16_variant_table(report)
    analysis, by_node = results.get("analyze"), layer_errors_by_node(report)
    if analysis and by_node and "partition" not in results:  # one graph view per page
        snr = Metric(
            "error: SNR of the layer (dB)",
            values={node: e["snr_db"] for node, e in by_node.items()},
            unit="dB",
            scale="linear",
            aggregate="min",
        )
        context["graph"] = StageGraph(analysis, {"snr_db": snr}, "snr_db")
    return context


def _profile_figures(result: dict) -> dict[str, dict]:
    figures = profile_figures(result, result.get("roofs"))
    for sweep in result.get("sweeps", []):
        figures[f"sweep_{sweep['kind']}"] = sweep_chart(sweep)
    if result.get("tvm_kernels", {}).get("kernels"):
        figures["tvm_kernels"] = kernels_vs_onnxruntime(result["tvm_kernels"])
    if result.get("mobile_gpu", {}).get("available"):
        figures["mobile_gpu_waste"] = phwc4_waste_bars(result["mobile_gpu"])
    return figures


def _profile_context(result: dict, results: dict) -> dict:
    """Per-op rows (measured, or predicted on the fastest unit) and the graph by latency."""
    unit = result.get("best_unit")
    rows = []
    for op in result.get("ops", []):
        if result.get("measured"):
            rows.append(op)
        else:
            rows.append(
                {**op, "latency_us": op["latency_us"].get(unit), "status": op["status"].get(unit)}
            )
    context = {"op_rows": rows, "tvm_kernel_rows": _tvm_kernel_rows(result)}
    section = result.get("mobile_gpu", {})
    if section.get("available"):
        context["gpu_partition_rows"] = partition_rows(section)
        context["gpu_kernel_rows"] = kernel_rows(section)
        context["gpu_support_rows"] = support_rows(section)
    analysis = results.get("analyze")
    if analysis:
        label = (
            "latency, measured (µs)"
            if result.get("measured")
            else f"latency on {unit}, predicted (µs)"
        )
        latency = Metric(label, values={r["name"]: r["latency_us"] for r in rows}, unit="µs")
        context["graph"] = StageGraph(analysis, {"latency_us": latency}, "latency_us")
    return context


def _tvm_kernel_rows(result: dict) -> list[dict]:
    rows = []
    for k in result.get("tvm_kernels", {}).get("kernels", []):
        tvm, ort = k.get("median_us"), k.get("onnxruntime_us")
        speed = ort / tvm if tvm and ort else None
        rows.append({**k, "ops": " + ".join(k["op_types"]), "speed": speed})
    return rows


def _compile_context(result: dict, results: dict) -> dict:
    timings = (result.get("timing") or {}).get("timings") or []
    context = {
        "kernel_rows": kernel_table(result),
        # each timing's median of its rounds' own speeds, where it has one
        "round_speeds": [t["round_speed"] for t in timings if t.get("round_speed") is not None],
    }
    analysis = results.get("analyze")
    if analysis:
        kernel_of = {node: k["id"] for k in result.get("kernels", []) for node in k["nodes"]}
        kernel = Metric("kernel", kind="categorical", values=kernel_of, aggregate="mode")
        context["graph"] = StageGraph(analysis, {"kernel": kernel}, "kernel")
    return context


PRESENTERS: dict[str, Presenter] = {
    "analyze": Presenter("workbench/stages/analyze.html", analysis_figures, _top_nodes),
    "profile": Presenter("workbench/stages/profile.html", _profile_figures, _profile_context),
    "memory": Presenter("workbench/stages/memory.html", _memory_figures, _memory_rows),
    "partition": Presenter(
        "workbench/stages/partition.html", _partition_figures, _partition_context
    ),
    "compile": Presenter(
        "workbench/stages/compile.html",
        lambda r: {"times": kernel_times(r), "stages": fusion_stages(r)},
        _compile_context,
    ),
    "accuracy": Presenter(
        "workbench/stages/accuracy.html",
        lambda r: {"layers": error_by_layer(r), "histogram": error_histogram(r)},
        _accuracy_context,
    ),
}


def present(stage: str, result: dict | None, results: dict | None = None) -> dict | None:
    """Template, figures and extra context for one stage result (None if nothing to show);
    ``results`` holds the run's results by stage, for views that combine them."""
    presenter = PRESENTERS.get(stage)
    if presenter is None or not result:
        return None
    return {
        "stage": stage,
        "label": STAGES[stage].label if stage in STAGES else stage,
        "template": presenter.template,
        "result": result,
        "figures": presenter.figures(result),
        **presenter.context(result, results or {}),
    }
