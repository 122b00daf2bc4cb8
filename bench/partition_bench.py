"""Partitioning algorithms on synthetic graphs and on the light models with the target presets.

Per model and unit setup: the makespan and solve time of every algorithm, its speedup over
the best single unit and its gap to the best lower bound found (the exact solver's proven
bound, or a simple bound), and the verdict. The peers in the same run are HEFT (the list
scheduler the thesis compares HOPE with, StarPU-style) and the MOSAIC-style chain program,
besides every single unit. Sections:

- ``synthetic``: random DAGs, Inception-style and chain graphs small enough to solve
  exactly (the heuristics' gap to the optimum);
- ``scale``: a 1,000-op random DAG (heuristics must stay under 1 s, the exact path with
  pre-partitioning under 60 s);
- ``phone``: light models on the phone-SoC preset, for several assumed CPU-GPU transfer
  costs (the profile leaves them unknown), so the speedup is shown with its sensitivity;
- ``mobile_cloud``: the split over 3G, 4G and Wi-Fi, latency-first and energy-first.

Prints one JSON object.

    python bench/partition_bench.py [--time-limit 10] [--skip-scale] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph import analyze_model  # noqa: E402
from engine.partition import PartitionOptions, compare_algorithms, partition_model  # noqa: E402
from engine.partition.synthetic import chain_dag, inception_dag, random_dag  # noqa: E402
from engine.partition.targets import LinkAssumption, problem_for_target  # noqa: E402
from engine.targets import get_target  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PHONE, CLOUD = "phone-snapdragon835", "cloud-xeon-e5-2620v4"
ALGORITHMS = ("single-unit", "heft", "hope-heuristic", "chain-dp", "blocks", "hope-ilp")
HEURISTICS = ALGORITHMS[:-1]
LINK_LATENCIES_US = (1000.0, 300.0, 100.0)
MODELS = ("inception_v1", "inception_v2", "squeezenet", "resnet50", "vgg19", "zfnet512")


def summarize(report: dict) -> dict:
    """The comparison without the per-op schedules."""
    return {
        "ops": report["ops"],
        "units": report["units"],
        "single_unit_ms": report["single_unit_ms"],
        "bound_ms": report["bound_ms"],
        "algorithms": report["algorithms"],
        "exact_status": report["results"].get("hope-ilp", {}).get("status"),
        "best": report["best"],
        "gain_pct": report["gain_pct"],
        "verdict": report["verdict"],
    }


def synthetic(options: PartitionOptions) -> dict:
    problems = {
        "random20x3": random_dag(20, 3, seed=4),
        "random30x3": random_dag(30, 3, seed=2),
        "inception3x2": inception_dag(3, 2),
        "inception3x3": inception_dag(3, 3),
        "chain24x2": chain_dag(24, 2, seed=3),
    }
    return {
        name: summarize(compare_algorithms(p, ALGORITHMS, options)) for name, p in problems.items()
    }


def scale(time_limit_s: float) -> dict:
    problem = random_dag(1000, 3, seed=42)
    out = {}
    for name in ALGORITHMS:
        options = PartitionOptions(time_limit_s=time_limit_s)
        started = time.perf_counter()
        result = partition_model(problem, name, options)
        out[name] = {
            "makespan_ms": round(result.makespan_ms, 4),
            "solve_s": round(result.solve_s, 3),
            "wall_s": round(time.perf_counter() - started, 3),
            "valid": result.valid,
            "limit_s": 60.0 if name == "hope-ilp" else 1.0,
        }
        if name == "hope-ilp":
            out[name].update(
                status=result.plan.status,
                gap_to_bound=round(result.gap, 4),
                details=dict(result.plan.details),
            )
    out["within_limits"] = all(v["solve_s"] < v["limit_s"] for v in out.values())
    return out


def phone(models: list[str], options: PartitionOptions) -> dict:
    target = get_target(PHONE)
    out = {}
    for model in models:
        graph = analyze_model(str(LIGHT_DIR / f"light_{model}.onnx")).graph
        out[model] = {}
        for latency in LINK_LATENCIES_US:
            problem = problem_for_target(graph, target, assume=LinkAssumption(latency))
            report = compare_algorithms(problem, ALGORITHMS, options)
            out[model][f"link_{latency:g}us"] = summarize(report)
    return out


def mobile_cloud(models: list[str]) -> dict:
    target, cloud = get_target(PHONE), get_target(CLOUD)
    out = {}
    for model in models:
        graph = analyze_model(str(LIGHT_DIR / f"light_{model}.onnx")).graph
        out[model] = {}
        for network in ("3g", "4g", "wifi"):
            problem = problem_for_target(graph, target, cloud=cloud, network=network)
            for objective in ("latency", "energy"):
                options = PartitionOptions(objective=objective, mobile_unit="cpu_big")
                result = partition_model(problem, "mobile-cloud", options)
                details = result.plan.details
                curve = details["curve"]
                best = details["best_cut"]
                out[model][f"{network}/{objective}"] = {
                    "cut": best["cut"],
                    "latency_ms": round(best["latency_ms"], 3),
                    "energy_j": best["energy_j"],
                    "mobile_only_ms": round(curve[-1]["latency_ms"], 3),
                    "cloud_only_ms": round(curve[0]["latency_ms"], 3),
                    "simulated_makespan_ms": round(result.makespan_ms, 3),
                    "valid": result.valid,
                }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0, help="exact solver, seconds")
    parser.add_argument("--scale-time-limit", type=float, default=55.0)
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    options = PartitionOptions(time_limit_s=args.time_limit)
    models = [m for m in args.models.split(",") if m]
    started = time.perf_counter()
    report = {
        "synthetic": synthetic(options),
        "scale": None if args.skip_scale else scale(args.scale_time_limit),
        "phone": phone(models, options),
        "mobile_cloud": mobile_cloud([m for m in models if m in ("squeezenet", "inception_v1")]),
    }
    report["bench_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
