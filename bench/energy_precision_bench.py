"""Energy-first against latency-first partitioning on the phone preset, per bundled model.

For each light model of the onnx package, on ``phone-snapdragon835`` (the thesis's Mobile
A: big and LITTLE CPU clusters, Adreno GPU; power figures from thesis Table 3-3 and
L630-681, above idle): the best plan of the comparison under the latency objective and
under the energy objective (hope-ilp, hope-heuristic, heft, chain-dp, blocks), with their
makespan and energy, the peer being the least-energy single unit in the same run; the
Pareto front's size; and, per algorithm, the energy each objective gives. Every number is
predicted by the shared simulator from the cost model and the power figures, not measured.

The ``fp16`` section (:func:`fp16_sections`) compares fp16 plain, keep-fp32 and GDPNPU
power-of-two scaling with fp32 per light model and on a built MLP that overflows fp16:
errors and overflowed tensors measured in onnxruntime on this CPU.

The ``substitution`` section (:func:`substitution_section`) runs GDPNPU's operator
substitution on each light model and on a built pre-processing graph of the thesis's
example (a 5x5 blur of a 1920x1080 RGB image, a per-channel max): every op time measured in
onnxruntime on this CPU (median of repeated runs, the thread count given) and, as the peer
in the same run, predicted by the cost model of ``dsa-graphturbo``; the built graph is also
timed whole, before and after the kept rewrites.

Prints one JSON object.

    python bench/energy_precision_bench.py [--time-limit 5] [--models vgg19,squeezenet]
        [--sections energy,fp16,substitution] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.fusion.substitution import MeasuredBench, PredictedBench, substitute  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402
from engine.partition import PartitionOptions, compare_algorithms  # noqa: E402
from engine.partition.pareto import trade_off  # noqa: E402
from engine.partition.targets import problem_for_target  # noqa: E402
from engine.targets import get_target  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PHONE = "phone-snapdragon835"
ALGORITHMS = ["hope-ilp", "hope-heuristic", "heft", "chain-dp", "blocks"]


def energy_section(model: Path, time_limit_s: float) -> dict:
    """Latency-first against energy-first for one model."""
    prepared = prepare_model(str(model))
    problem = problem_for_target(prepared.graph, get_target(PHONE))
    runs = {}
    for objective in ("latency", "energy"):
        options = PartitionOptions(time_limit_s=time_limit_s, objective=objective)
        started = time.perf_counter()
        report = compare_algorithms(problem, ALGORITHMS, options)
        runs[objective] = (report, time.perf_counter() - started)
    fast, frugal = runs["latency"][0], runs["energy"][0]
    front = trade_off(problem, PartitionOptions(time_limit_s=time_limit_s), fast["results"])
    singles = {u: e for u, e in fast["single_unit_energy_mj"].items() if e is not None}
    peer = min(singles, key=singles.__getitem__)

    def plan(report: dict) -> dict:
        best = report["results"][report["best"]]
        return {
            "algorithm": report["best"],
            "makespan_ms": best["makespan_ms"],
            "energy_mj": best["energy_mj"],
            "units_used": sorted(set(best["placement"].values())),
        }

    latency_first, energy_first = plan(fast), plan(frugal)
    return {
        "ops": problem.n,
        "latency_first": latency_first,
        "energy_first": energy_first,
        "plans_differ": fast["results"][fast["best"]]["placement"]
        != frugal["results"][frugal["best"]]["placement"],
        "energy_saved_pct": round(
            100 * (1 - energy_first["energy_mj"] / latency_first["energy_mj"]), 2
        ),
        "slowdown": round(energy_first["makespan_ms"] / latency_first["makespan_ms"], 3),
        "least_energy_single_unit": {"unit": peer, "energy_mj": singles[peer]},
        "per_algorithm": {
            name: {
                objective: {
                    "makespan_ms": runs[objective][0]["algorithms"][name]["makespan_ms"],
                    "energy_mj": runs[objective][0]["algorithms"][name]["energy_mj"],
                }
                for objective in runs
                if name in runs[objective][0]["algorithms"]
            }
            for name in ALGORITHMS
        },
        "pareto_front_points": len(front["front"]),
        "compare_s": {o: round(s, 2) for o, (_, s) in runs.items()},
    }


def fp16_sections(models: list[Path]) -> dict:
    """fp16 plain, keep-fp32 and GDPNPU-scaled against fp32, per light model and on a built
    MLP that overflows fp16 (tests/engine/onnx_builders.overflow_model): measured in
    onnxruntime on this CPU on generated inputs (seed 0, normal), which also calibrate
    the scaling."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "engine"))
    from onnx_builders import overflow_model

    from engine.accuracy.check import AccuracyConfig
    from engine.accuracy.fp16_variants import compare_fp16_variants
    from engine.accuracy.inputs import generate_inputs

    built = {m.stem[6:]: prepare_model(str(m)).model for m in models}
    built["overflow_mlp"] = overflow_model()
    section: dict = {}
    for name, model in built.items():
        started = time.perf_counter()
        feeds = generate_inputs(model, seed=0).feeds
        found = compare_fp16_variants(
            model, feeds, AccuracyConfig(), source="generated inputs (seed 0, normal)"
        )
        scaling = found["scaling"]
        section[name] = {
            "variants": found["variants"],
            "overflows_avoided": found["overflows_avoided"],
            "scaled_nodes": scaling["scaled_nodes"],
            "restore_multiplies": scaling["restore_multiplies"],
            "factors": [
                {k: f[k] for k in ("node", "op_type", "kind", "log2", "formula", "range_in")}
                for f in scaling["factors"]
            ],
            "seconds": round(time.perf_counter() - started, 2),
        }
    return {
        "fp16": {
            "measured": "onnxruntime on this CPU, generated inputs (seed 0, normal)",
            "models": section,
        }
    }


def gdpnpu_image_graph() -> onnx.ModelProto:
    """The thesis's substitution examples (L1645, L1656) in one graph: a 5x5 depthwise blur
    of a 1920x1080 RGB image, then the per-channel max over the pixels."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 1, 5, 5)).astype(np.float32)
    nodes = [
        helper.make_node(
            "Conv",
            ["image", "w"],
            ["blur"],
            name="blur",
            group=3,
            pads=[2] * 4,
            kernel_shape=[5, 5],
        ),
        helper.make_node("ReduceMax", ["blur"], ["peak"], name="channel_max", axes=[2, 3]),
    ]
    graph = helper.make_graph(
        nodes,
        "gdpnpu-image",
        [helper.make_tensor_value_info("image", onnx.TensorProto.FLOAT, [1, 3, 1080, 1920])],
        [helper.make_tensor_value_info("peak", onnx.TensorProto.FLOAT, [1, 3, 1, 1])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _substitution_of(model: onnx.ModelProto, bench) -> dict:
    found = substitute(onnx.shape_inference.infer_shapes(model), bench)[1].to_dict()
    return {
        "timing": found["timing"],
        "candidates": len(found["candidates"]),
        "kept": found["kept"],
        "before_ms": found["before_ms"],
        "after_ms": found["after_ms"],
        "per_node": [
            {k: c[k] for k in ("node", "rule", "input_shape", "original_ms", "decision", "reason")}
            | {"tried_ms": {t["s"]: t["ms"] for t in c["tried"]}}
            for c in found["candidates"]
        ],
    }


def substitution_section(models: list[Path], threads: int) -> dict:
    """GDPNPU operator substitution: measured on this CPU, predicted for a modeled DSA."""
    measured = MeasuredBench(threads)
    modeled = PredictedBench(get_target("dsa-graphturbo"))
    section: dict = {}
    for path in models:
        model = prepare_model(str(path)).model
        section[path.stem[6:]] = {
            "measured": _substitution_of(model, measured),
            "predicted": _substitution_of(model, modeled),
        }
    image = gdpnpu_image_graph()
    rewritten, _ = substitute(onnx.shape_inference.infer_shapes(image), measured)
    feeds = {"image": np.random.default_rng(1).standard_normal((1, 3, 1080, 1920), np.float32)}
    section["gdpnpu_image_1080p"] = {
        "measured": _substitution_of(image, measured),
        "predicted": _substitution_of(image, modeled),
        "whole_graph_ms": {
            "timing": measured.label,
            **dict(
                zip(
                    ("original", "substituted"),
                    measured.time_ms([image, rewritten], feeds),
                    strict=True,
                )
            ),
        },
        "thesis": "Ascend 310 NPU: blur 9.84 -> 2.29 ms at s=16 (4.30x), channel min 2.5x",
    }
    return {"substitution": section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=5.0, help="exact solver, seconds")
    parser.add_argument("--models", default="", help="names without 'light_' (default: all)")
    parser.add_argument("--sections", default="energy,fp16,substitution", help="which to run")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads (0: all)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    wanted = {m for m in args.models.split(",") if m}
    models = [
        p for p in sorted(LIGHT_DIR.glob("light_*.onnx")) if not wanted or p.stem[6:] in wanted
    ]
    started = time.perf_counter()
    report = {
        "target": PHONE,
        "predicted": "energy: every number by the shared simulator, the target's cost model and power",
    }
    if "energy" in sections:
        report["energy"] = {m.stem[6:]: energy_section(m, args.time_limit) for m in models}
    if "fp16" in sections:
        report.update(fp16_sections(models))
    if "substitution" in sections:
        report.update(substitution_section(models, args.threads))
    report["bench_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
