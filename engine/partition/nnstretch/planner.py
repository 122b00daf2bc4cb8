"""NN-Stretch (Wei et al., MobiSys '23): a sequential CNN stretched into short, wide
branches, one per processor of a phone SoC, run at once.

One call runs the design-time pipeline on the prepared model: stages and meeting-point
candidates (:mod:`.structure`), the constrained design space and its final grid
(:mod:`.search`), the branched model of every design in the grid replayed by the shared
simulator (:mod:`.export`, :mod:`.schedule`), the fastest kept and exported as ONNX. The
predicted speedup is over the best single processor running the original model. The
branched model is not trained here: it must be retrained before its accuracy means
anything (the paper's accuracy gate is a training job), and the result says so.

On a measured target (the worker's CPU) the processors are core groups; the branched
model then also runs in onnxruntime with its branches in parallel, and the measured
speedup stands next to the predicted one (:mod:`.measure`). On every target the branched
model runs once in onnxruntime to check it gives the original's output shapes.
"""

from __future__ import annotations

import time
from pathlib import Path

import onnx

from engine.errors import ProgressFn
from engine.graph.ir import Graph
from engine.partition.nnstretch.branch import Branched
from engine.partition.nnstretch.export import WEIGHTS_NOTE, assemble, to_onnx
from engine.partition.nnstretch.pricing import HostPricer, Pricer, TargetPricer, host_flops
from engine.partition.nnstretch.schedule import simulate_branched, single_units
from engine.partition.nnstretch.search import Design, SearchResult, StretchOptions, run_search
from engine.partition.nnstretch.structure import NotBranchable, StretchStructure, detect_stages
from engine.partition.problem import PartitionError
from engine.partition.registry import NoPlan, PartitionOptions, register_graph_planner
from engine.targets.profile import TargetProfile

ALGORITHM = "nn-stretch"
RETRAIN_NOTE = (
    "The branched model must be retrained (the original recipe, or distillation) before its "
    "accuracy means anything: its weights are initialised, not trained."
)


def plan_nnstretch(
    graph: Graph,
    model: onnx.ModelProto,
    target: TargetProfile,
    options: StretchOptions | None = None,
    *,
    measure: bool = True,
    reps: int = 20,
    workdir: str | None = None,
    progress: ProgressFn | None = None,
) -> dict:
    """Plan ``model`` (prepared; ``graph`` its IR) for ``target``; the result JSON
    (``valid``, ``candidates``, ``speedup``, ``design``...). A model or target NN-Stretch
    does not apply to, or constraints nothing satisfies, give ``valid: false`` and the
    reason. With ``workdir``, the branched ONNX is written there (``_artifacts``)."""
    report = progress or (lambda f, m: None)
    options = options or StretchOptions()
    started = time.perf_counter()
    base = {"algorithm": ALGORITHM, "target": target.name, "options": options.to_dict()}
    try:
        structure = detect_stages(graph)
        base["structure"] = structure.to_dict()
        report(0.02, f"NN-Stretch: {len(structure.stages)} stages; pricing the processors")
        original_bytes = model.SerializeToString()  # once: onnxruntime sessions read bytes
        pricer, measured_base, feeds = _pricer(
            graph, original_bytes, target, options, measure, reps
        )
        search = run_search(structure, graph, pricer, options, progress=_scaled(report, 0.05, 0.6))
    except (NoPlan, NotBranchable) as e:
        return {
            **base,
            "valid": False,
            "reason": e.message,
            **({"candidate_counts": e.details.get("candidate_counts")} if isinstance(e, NoPlan)
               else {}),
        }  # fmt: skip
    report(0.6, f"NN-Stretch: replaying {len(search.grid)} designs in the simulator")
    singles = single_units(graph, pricer)
    best_unit = min(singles, key=singles.__getitem__)
    replays = []
    for k, design in enumerate(search.grid):
        branched = assemble(graph, structure, design, pricer.home)
        replays.append((design, branched, simulate_branched(branched, pricer)))
        report(0.6 + 0.25 * (k + 1) / len(search.grid), f"design {k + 1}/{len(search.grid)}")
    design, branched, schedule = min(replays, key=lambda r: (r[2]["makespan_ms"], r[0].rank))
    summary = _design(design, structure, search, schedule, options)
    report(0.88, "NN-Stretch: exporting the branched model")
    exported = to_onnx(branched, model, graph, structure.constants, _metadata(summary), seed=0)
    planning_s = time.perf_counter() - started
    exported_bytes = exported.SerializeToString()
    check = _check(original_bytes, exported_bytes, feeds)
    measured = None
    if measured_base is not None:
        report(0.92, "NN-Stretch: timing the branches in onnxruntime")
        measured = _measure(original_bytes, exported_bytes, feeds, pricer, measured_base, reps)
    speedup = singles[best_unit] / schedule["makespan_ms"] if schedule["makespan_ms"] else None
    artifacts = {}
    file_name = f"{graph_name(model)}-nnstretch.onnx"
    if workdir:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        path = Path(workdir) / file_name
        path.write_bytes(exported_bytes)
        artifacts["optimized_onnx"] = str(path)
    result = {
        **base,
        "valid": True,
        "reason": None,
        "predicted": True,
        "model": pricer.model,
        "units": list(pricer.units),
        "home": pricer.home,
        "unusable": dict(pricer.unusable),
        "notes": list(pricer.notes) + [RETRAIN_NOTE],
        "candidate_counts": search.steps,
        "candidates": len(search.grid),
        "combinations": search.combos,
        "grid": [
            {
                "rank": d.rank,
                "units": list(d.units),
                "meeting_points": [c.segment.output for c in d.segments],
                "model_ms": round(d.predicted_us / 1e3, 6),
                "simulated_ms": s["makespan_ms"],
                "speedup": round(singles[best_unit] / s["makespan_ms"], 4),
                "chosen": d is design,
            }
            for d, _, s in replays
        ],
        "design": summary,
        "schedule": schedule,
        "latency_ms": schedule["makespan_ms"],
        "makespan_ms": schedule["makespan_ms"],  # as placement plans name it (compare page)
        "unit_busy_us": {u: round(ms * 1e3, 3) for u, ms in schedule["unit_busy_ms"].items()},
        "single_unit_ms": {u: round(v, 6) for u, v in singles.items()},
        "best_single_unit": best_unit,
        "best_single_unit_ms": round(singles[best_unit], 6),
        "speedup": None if speedup is None else round(speedup, 4),
        "measured": measured,
        "execution_check": check,
        "branched_model": {
            "file": file_name,
            "nodes": len(exported.graph.node),
            "original_nodes": len(model.graph.node),
            "params": sum(_elements(i) for i in exported.graph.initializer),
            "original_params": sum(t.elements for t in graph.params()),
            "needs_retraining": True,
            "weights": WEIGHTS_NOTE.format(seed=0),
            "annotations": [
                "nnstretch.recommended_processor",
                "nnstretch.is_meeting_point",
                "nnstretch.role",
                "nnstretch.segment",
                "nnstretch.branch",
            ],
            "valid_onnx": True,
        },  # fmt: skip
        "graph": _graph_view(branched),
        "planning_s": round(planning_s, 3),
        "total_s": round(time.perf_counter() - started, 3),
    }
    result["verdict"] = _verdict(result)
    if artifacts:
        result["_artifacts"] = artifacts
    report(1.0, "NN-Stretch: done")
    return result


def graph_name(model: onnx.ModelProto) -> str:
    name = model.graph.name or "model"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:60]


def _pricer(graph, model, target: TargetProfile, options, measure: bool, reps: int):
    """The processors and their prices: a modeled target's cost model, or core groups of
    this machine timed in onnxruntime (returns the single-group timing and the feeds)."""
    from engine.partition.nnstretch.measure import feeds_for, load_average, time_model

    feeds = feeds_for(graph)
    if target.kind == "modeled":
        return TargetPricer(target, graph), None, feeds
    if target.kind != "measured" or len(target.units) != 1 or target.units[0].kind != "cpu":
        raise NoPlan(
            f"NN-Stretch plans for a phone SoC's processors (a modeled target) or this "
            f"machine's CPU split into core groups; '{target.name}' is neither"
        )
    cores = target.units[0].cores or 1
    groups = min(options.max_branches, cores)
    if groups < 2:
        raise NoPlan(f"'{target.name}' has {cores} usable core: no two core groups to branch on")
    threads = cores // groups
    if not measure:
        raise NoPlan("a measured target's processors are priced by timing the model here; "
                     "measuring is turned off")  # fmt: skip
    load_before = load_average()
    base = time_model(model, feeds, intra=threads, reps=reps)
    base["load_before"] = load_before
    return HostPricer(groups, threads, host_flops(graph), base["median_ms"]), base, feeds


def _check(model, exported, feeds) -> dict:
    """The branched model once in onnxruntime (see :func:`.measure.check_runs`); a failure
    is reported, not raised: the plan stands, its file is what onnxruntime refused."""
    from engine.partition.nnstretch.measure import check_runs

    try:
        return check_runs(model, exported, feeds)
    except Exception as e:  # onnxruntime raises its own untyped errors
        return {"ran": False, "shapes_match": False, "outputs": [], "error": str(e)[:300],
                "where": "this worker's CPU, onnxruntime"}  # fmt: skip


def _measure(model, exported, feeds, pricer: HostPricer, base: dict, reps: int) -> dict:
    from engine.partition.nnstretch.measure import load_average, machine, time_model

    groups = len(pricer.units)
    branched = time_model(
        exported, feeds, intra=pricer.threads, inter=groups, parallel=True, reps=reps
    )
    all_cores = time_model(model, feeds, intra=pricer.threads * groups, reps=reps)
    return {
        "available": True,
        "machine": machine(),
        "load_average": {"before": base.pop("load_before"), "after": load_average()},
        "reps": reps,
        "groups": groups,
        "threads_per_group": pricer.threads,
        "original_one_group": base,
        "original_all_cores": all_cores,
        "branched": branched,
        "speedup": round(base["median_ms"] / branched["median_ms"], 4),
        "speedup_vs_all_cores": round(all_cores["median_ms"] / branched["median_ms"], 4),
        "what": "median wall time of one inference in onnxruntime on this machine: the "
        f"original on one group ({pricer.threads} thread(s)) and on all cores, the branched "
        f"model with its branches in parallel ({groups} inter-op threads)",
    }


def _design(
    design: Design, structure: StretchStructure, search: SearchResult, schedule, options
) -> dict:
    segments = []
    for s, choice in enumerate(design.segments):
        seg = choice.segment
        stages = structure.body[seg.first : seg.last + 1]
        theta = search.throughput[(seg.first, seg.last)]
        total_theta = sum(theta[b.unit] for b in choice.branches)
        total_flops = sum(b.flops for b in choice.branches)
        straggler_ref = {
            b.unit: seg.fastest_us
            if options.beta_reference == "fastest"
            else seg.latency_us[b.unit]
            for b in choice.branches
        }
        segments.append(
            {
                "segment": s,
                "stages": [st.index for st in stages],
                "input": seg.input,
                "meeting_point": seg.output,
                "depth": seg.depth,
                "width": seg.width,
                "flops": seg.flops,
                "latency_ms": {u: round(v / 1e3, 6) for u, v in seg.latency_us.items()},
                "fastest_ms": round(seg.fastest_us / 1e3, 6),
                "comm_ms": round(choice.comm_us / 1e3, 6),
                "model_ms": round(choice.latency_us / 1e3, 6),
                "branches": [
                    {
                        **b.to_dict(seg),
                        "own_ms": round(seg.latency_us[b.unit] / 1e3, 6),
                        "flops_share": round(b.flops / total_flops, 4),
                        "throughput_share": round(theta[b.unit] / total_theta, 4),
                        "straggler_ratio": round(b.latency_us / straggler_ref[b.unit], 4),
                    }
                    for b in choice.branches
                ],
                "constraints": {
                    "comm_over_segment": round(choice.comm_us / seg.fastest_us, 4),
                    "capacity": round(total_flops / seg.flops, 4),
                },
            }
        )
    return {
        "units": list(design.units),
        "branches": len(design.units),
        "meeting_points": [c.segment.output for c in design.segments],
        "n_meet": len(design.segments),
        "head": {"stage": 0, "nodes": len(structure.head.nodes)},
        "tail": {"nodes": len(structure.tail)},
        "segments": segments,
        "model_ms": round(design.predicted_us / 1e3, 6),
        "simulated_ms": schedule["makespan_ms"],
    }


def _metadata(summary: dict) -> dict:
    """The design as the ONNX file keeps it (short)."""
    return {
        "units": summary["units"],
        "meeting_points": summary["meeting_points"],
        "segments": [
            {
                "stages": s["stages"],
                "branches": [
                    {k: b[k] for k in ("unit", "depth", "width", "restore_channels")}
                    for b in s["branches"]
                ],
            }
            for s in summary["segments"]
        ],
    }


def _graph_view(branched: Branched) -> dict:
    """The branched graph for its figure: nodes with their level (longest path from an
    input), unit, role, segment and branch, and the edges between them."""
    producer = {}
    level = []
    edges = []
    for k, spec in enumerate(branched.nodes):
        preds = {producer[t] for t in spec.inputs if t in producer}
        level.append(1 + max((level[p] for p in preds), default=-1))
        edges.extend([p, k] for p in sorted(preds))
        for t in spec.outputs:
            producer[t] = k
    return {
        "name": [s.name for s in branched.nodes],
        "op_type": [s.op_type for s in branched.nodes],
        "unit": [s.unit for s in branched.nodes],
        "role": [s.role for s in branched.nodes],
        "segment": [s.segment for s in branched.nodes],
        "branch": [s.branch for s in branched.nodes],
        "level": level,
        "edges": edges,
    }


def _verdict(r: dict) -> str:
    d = r["design"]
    first = r["candidate_counts"][0]
    text = (
        f"NN-Stretch: {d['branches']} branches on {' + '.join(d['units'])}, "
        f"{d['n_meet']} meeting points; predicted {r['latency_ms']:.3f} ms against "
        f"{r['best_single_unit_ms']:.3f} ms on {r['best_single_unit']} alone "
        f"({r['speedup']:.2f}x, {r['model']}); {r['candidates']} designs in the final grid "
        f"of 10^{first['log10']:.0f}"
    )
    m = r.get("measured")
    if m:
        text += (
            f"; measured here {m['branched']['median_ms']:.3f} ms against "
            f"{m['original_one_group']['median_ms']:.3f} ms on one core group "
            f"({m['speedup']:.2f}x; {m['reps']} runs)"
        )
    return text + ". " + RETRAIN_NOTE


def _elements(initializer) -> int:
    n = 1
    for d in initializer.dims:
        n *= d
    return n


def _scaled(report, start: float, end: float):
    return lambda f, m: report(start + (end - start) * f, m)


@register_graph_planner(ALGORITHM, uses_model=True)
def _nnstretch(
    graph: Graph, target: TargetProfile, options: PartitionOptions, progress, *, model, workdir
) -> dict:
    stretch = StretchOptions(
        alpha=options.stretch_alpha,
        beta=options.stretch_beta,
        ratio_floor=options.stretch_ratio_floor,
        min_meet=options.stretch_min_meet,
    )
    if model is None:
        raise PartitionError("NN-Stretch needs the prepared ONNX model", code="usage")
    return plan_nnstretch(
        graph,
        model,
        target,
        stretch,
        measure=options.stretch_measure,
        workdir=workdir,
        progress=progress,
    )


__all__ = ["ALGORITHM", "Pricer", "plan_nnstretch"]
