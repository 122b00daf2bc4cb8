"""Accelerator-aware planning: GraphTurbo on the DSA preset and NN-Stretch on the phone SoC
preset (and on this machine's CPU, measured), per model.

Per model and planner: the predicted gain, the kernel counts and off-core bytes against
the planner's baseline, and the planning time (wall clock, on the prepared model; the
prepared-model build is not counted).

- ``graphturbo`` (target ``dsa-graphturbo``): kernels (subgraphs) and instances against one
  kernel per layer, off-core bytes (local<->global plus global<->DRAM) against the
  per-layer baseline, predicted latency and speedup over it (``graphturbo-roofline-v1``);
- ``nnstretch`` (target ``phone-snapdragon835``): speedup over the best single processor
  (simulated, roofline cost model), the design (processors, meeting points), the candidate
  count after each constraint, the ops and parameters of the branched model against the
  original's, and the bytes that cross a link between processors at the meeting points
  (none between big and LITTLE cores, which share memory);
  ``nnstretch_relaxed`` the same with alpha 1 and one meeting point, where GPU branches
  survive Eq. 4 under the preset's 1 ms-per-transfer link assumption;
- ``nnstretch_host``: NN-Stretch on this machine's CPU (core groups), its predicted speedup
  (flops-proportional model calibrated on one run here) next to the measured one
  (onnxruntime, ``--reps`` runs per figure).

Writes ``bench/results/accelerator_bench.json`` (``--out``) and prints a table.

    python bench/accelerator_bench.py [--models resnet50,mobilenet_v2,efficientnet_b0]
                                      [--reps 20] [--skip-host] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph.prepare import prepare_model  # noqa: E402
from engine.partition.graphturbo import plan_graphturbo  # noqa: E402
from engine.partition.nnstretch import plan_nnstretch  # noqa: E402
from engine.partition.nnstretch.search import StretchOptions  # noqa: E402
from engine.targets import get_target  # noqa: E402
from engine.targets.host import describe_host  # noqa: E402
from engine.zoo import build  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
DSA, PHONE = "dsa-graphturbo", "phone-snapdragon835"
MODELS = ("resnet50", "mobilenet_v2", "efficientnet_b0")
RESULTS = Path(__file__).resolve().parent / "results" / "accelerator_bench.json"


def source(name: str):
    """ResNet-50 is the onnx package's bundled light model (its weights filled by
    ConstantOfShape); MobileNetV2 and EfficientNet-B0 are the zoo's onnx.helper builds."""
    if name == "resnet50":
        return str(LIGHT_DIR / "light_resnet50.onnx")
    return build(name)


def graphturbo(prepared) -> dict:
    started = time.perf_counter()
    plan = plan_graphturbo(prepared.graph, get_target(DSA))
    seconds = time.perf_counter() - started
    if not plan["valid"]:
        return {"valid": False, "reason": plan["reason"], "planning_s": round(seconds, 3)}
    return {
        "valid": True,
        "kernels": plan["kernels"],
        "instances": plan["instances"],
        "baseline_kernels": plan["baseline_kernels"],
        "offcore_bytes": plan["offcore_bytes"]["total"],
        "baseline_offcore_bytes": plan["baseline_offcore_bytes"]["total"],
        "offcore_saved_pct": round(
            100 * (1 - plan["offcore_bytes"]["total"] / plan["baseline_offcore_bytes"]["total"]), 1
        ),
        "latency_ms": plan["latency_ms"],
        "baseline_latency_ms": plan["baseline_latency_ms"],
        "speedup": plan["speedup"],
        "predicted_by": plan["model"],
        "ablation": [
            {"step": a["step"], "offcore_bytes": a["offcore_bytes"], "latency_ms": a["latency_ms"]}
            for a in plan["ablation"]
        ],
        "planning_s": round(seconds, 3),
    }


def nnstretch(prepared, target: str, options: StretchOptions, reps: int) -> dict:
    started = time.perf_counter()
    plan = plan_nnstretch(prepared.graph, prepared.model, get_target(target), options, reps=reps)
    seconds = time.perf_counter() - started
    out = {
        "target": target,
        "options": {
            "alpha": options.alpha,
            "beta": options.beta,
            "min_meet": options.min_meet,
            "ratio_floor": options.ratio_floor,
        },  # fmt: skip
        "valid": plan["valid"],
        "planning_s": round(seconds, 3),
        "candidate_counts": [
            {
                "step": s["step"],
                "log10": s["log10"],
                "count": s["count"] if s["count"] < 10**9 else None,
            }
            for s in plan.get("candidate_counts") or []
        ],  # fmt: skip
    }
    if not plan["valid"]:
        return {**out, "reason": plan["reason"]}
    design = plan["design"]
    moved = sum(t["bytes"] for t in plan["schedule"]["transfers"])
    measured = plan.get("measured")
    return {
        **out,
        "speedup": plan["speedup"],
        "latency_ms": plan["latency_ms"],
        "best_single_unit": plan["best_single_unit"],
        "best_single_unit_ms": plan["best_single_unit_ms"],
        "predicted_by": plan["model"],
        "candidates": plan["candidates"],
        "units": design["units"],
        "meeting_points": design["n_meet"],
        "branches": [
            {
                "segment": s["segment"],
                "stages": s["stages"],
                "branches": [(b["unit"], b["depth"], b["width"]) for b in s["branches"]],
                "original": (s["depth"], s["width"]),
            }
            for s in design["segments"]
        ],  # fmt: skip
        "ops": plan["branched_model"]["nodes"],
        "baseline_ops": plan["branched_model"]["original_nodes"],
        "params": plan["branched_model"]["params"],
        "baseline_params": plan["branched_model"]["original_params"],
        "meeting_point_bytes": moved,
        "comm_share": plan["schedule"]["comm_share"],
        "head_tail_share": plan["schedule"]["head_tail_share"],
        "measured": None
        if not measured
        else {
            "speedup": measured["speedup"],
            "speedup_vs_all_cores": measured["speedup_vs_all_cores"],
            "branched_ms": measured["branched"]["median_ms"],
            "original_one_group_ms": measured["original_one_group"]["median_ms"],
            "original_all_cores_ms": measured["original_all_cores"]["median_ms"],
            "reps": measured["reps"],
            "groups": measured["groups"],
            "threads_per_group": measured["threads_per_group"],
            "load_average": measured["load_average"],
            "machine": measured["machine"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--reps", type=int, default=20, help="timed runs per measured figure")
    parser.add_argument("--skip-host", action="store_true", help="no measured NN-Stretch")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    started = time.perf_counter()
    report = {
        "command": "python bench/accelerator_bench.py " + " ".join(sys.argv[1:]),
        "machine": {k: describe_host()[k] for k in ("cpu_model", "usable_cores", "os")},
        "python": platform.python_version(),
        "models": {},
    }
    for name in [m for m in args.models.split(",") if m]:
        prepared = prepare_model(source(name))
        row = {
            "nodes": len(prepared.graph.nodes),
            "graphturbo": graphturbo(prepared),
            "nnstretch": nnstretch(prepared, PHONE, StretchOptions(), args.reps),
            "nnstretch_relaxed": nnstretch(
                prepared, PHONE, StretchOptions(alpha=1.0, min_meet=1), args.reps
            ),
        }
        if not args.skip_host:
            row["nnstretch_host"] = nnstretch(prepared, "host", StretchOptions(), args.reps)
        report["models"][name] = row
        print(_line(name, row), file=sys.stderr)
    report["bench_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"written": str(args.out), "bench_s": report["bench_s"]}))


def _line(name: str, row: dict) -> str:
    g, n = row["graphturbo"], row["nnstretch"]
    parts = [f"{name:<16}"]
    if g["valid"]:
        parts.append(
            f"GraphTurbo {g['kernels']}/{g['baseline_kernels']} kernels, off-core "
            f"{g['offcore_bytes']:,}/{g['baseline_offcore_bytes']:,} B, {g['speedup']}x, "
            f"{g['planning_s']} s"
        )
    else:
        parts.append(f"GraphTurbo: {g['reason']}")
    if n["valid"]:
        parts.append(f"NN-Stretch {n['speedup']}x on {'+'.join(n['units'])}, {n['planning_s']} s")
    else:
        parts.append(f"NN-Stretch: {n['reason']}")
    host = row.get("nnstretch_host")
    if host and host["valid"] and host["measured"]:
        parts.append(f"host predicted {host['speedup']}x, measured {host['measured']['speedup']}x")
    return " | ".join(parts)


if __name__ == "__main__":
    main()
