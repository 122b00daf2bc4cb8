"""Memory planners on the bundled light models and on a generated 20,000-tensor graph.

Per model: the arena of every planner, the lower bound (peak of live bytes), each
planner's ratio to it and its planning time, the gain of the order search, and the
local-buffer fit of a GraphTurbo-shaped unit (64 KiB LB, 8 MiB GB). The peers in the same
run are TFLite's planners (naive, greedy, min-cost flow, greedy by size / breadth); the
TVM build's total of static allocations (relax StaticPlanBlockMemory on the same
simplified model the compile stage builds) is the other peer named by issue 6, next to our
best plan of exactly the tensors TVM allocates (``tvm``). Models: the onnx package's light
models and every ``engine.zoo`` model. Prints one JSON object ``{model: {...}}`` ending
with a ``summary``.

    python bench/memory_bench.py [--tensors 20000] [--in-place] [--time-limit 1.0]
        [--skip-light] [--skip-zoo] [--skip-tvm]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph import analyze_model  # noqa: E402
from engine.memory import PLANNERS, LevelConfig, MemoryConfig, plan_memory  # noqa: E402
from engine.memory.tvm import tvm_comparison  # noqa: E402
from engine.zoo import ZOO, build  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
SIDE = 8


def branching_graph(n_tensors: int, seed: int = 0) -> onnx.ModelProto:
    """Blocks of Conv -> Relu -> Conv, concatenated with a skip from seven blocks back on
    every third block: four tensors per block, sizes varying with random channel counts."""
    rng = random.Random(seed)
    nodes, weights, outputs = [], [], []
    x, channels = "x", 8
    for b in range(n_tensors // 4):
        c1, c2 = rng.choice((8, 16, 32, 64)), rng.choice((8, 16, 32))
        for name, c_in, c_out in ((f"w{b}", channels, c1), (f"v{b}", c1, c2)):
            weights.append(numpy_helper.from_array(np.ones((c_out, c_in, 1, 1), np.float32), name))
        parts = [f"r{b}", f"d{b}"]
        skip = b % 3 == 0 and b >= 7
        if skip:
            parts.append(f"cat{b - 7}")
        nodes += [
            helper.make_node("Conv", [x, f"w{b}"], [f"c{b}"], name=f"conv{b}"),
            helper.make_node("Relu", [f"c{b}"], [f"r{b}"], name=f"relu{b}"),
            helper.make_node("Conv", [f"r{b}", f"v{b}"], [f"d{b}"], name=f"conv2_{b}"),
            helper.make_node("Concat", parts, [f"cat{b}"], name=f"cat{b}", axis=1),
        ]
        outputs.append(channels)
        channels = c1 + c2 + (outputs[b - 7] if skip else 0)
        outputs[b] = channels
        x = f"cat{b}"
    graph = helper.make_graph(
        nodes,
        "branching_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, SIDE, SIDE])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, channels, SIDE, SIDE])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def tvm_figures(source) -> dict:
    """TVM's static allocation total of the build of ``source`` and our best plan of the
    same kernel tensors (engine.memory.tvm); a failure is reported, not raised."""
    try:
        return tvm_comparison(source)
    except Exception as e:  # noqa: BLE001 - a failure is a row of the table, not the end
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}"}


def measure(source, config: MemoryConfig, with_tvm: bool = True) -> dict:
    started = time.perf_counter()
    graph = analyze_model(source).graph
    analysis_s = time.perf_counter() - started
    result = plan_memory(graph, config).to_dict(plans=False)
    lower = result["lower_bound_bytes"]
    return {
        "nodes": len(graph.nodes),
        "buffers": len(result["tensors"]) - len(result["in_place"]),
        "lower_bound_bytes": lower,
        "planners": result["planners"],
        "ratios": result["ratios"],
        "best": result["best"],
        "valid": result["valid"],
        "planner_time_s": result["planner_time_s"],
        "heuristic_max_s": max(
            t for n, t in result["planner_time_s"].items() if PLANNERS[n].heuristic
        ),
        "skipped": result["errors"],
        "original_lower_bound_bytes": result["original_lower_bound_bytes"],
        "order_gain_bytes": result["order_gain_bytes"],
        "order_method": result["order_method"],
        "levels": {
            k: result["levels"][k]
            for k in ("offcore_bytes_before", "offcore_bytes_after", "tensors_by_level")
        }
        if result["levels"]
        else None,
        "tvm": tvm_figures(source) if with_tvm else None,
        "analysis_s": round(analysis_s, 3),
        "planning_s": result["planning_s"],
    }


def summary(results: dict) -> dict:
    """Per model: best ratio to the lower bound, TVM's total vs ours (same tensors)."""
    rows = {}
    for name, r in results.items():
        tvm = r.get("tvm") or {}
        rows[name] = {
            "best": r["best"],
            "best_ratio": r["ratios"][r["best"]],
            "greedy_by_size_ratio": r["ratios"].get("greedy-by-size"),
            "tvm_static_bytes": tvm.get("tvm_static_bytes"),
            "ours_same_tensors_bytes": tvm.get("ours_bytes"),
            "ours_vs_tvm": tvm.get("ratio"),
            "ours_onnx_level_bytes": r["planners"][r["best"]],
            "tvm_failed": tvm.get("failed"),
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=20_000)
    parser.add_argument("--in-place", action="store_true")
    parser.add_argument("--time-limit", type=float, default=1.0)
    parser.add_argument("--skip-light", action="store_true")
    parser.add_argument("--skip-zoo", action="store_true")
    parser.add_argument("--skip-tvm", action="store_true")
    args = parser.parse_args()
    config = MemoryConfig(
        in_place=args.in_place,
        time_limit_s=args.time_limit,
        levels=LevelConfig(local_buffer_bytes=65_536, global_buffer_bytes=8_388_608),
    )
    results = {}
    if not args.skip_light:
        for path in sorted(LIGHT_DIR.glob("light_*.onnx")):
            results[path.stem] = measure(path, config, not args.skip_tvm)
    if not args.skip_zoo:
        for name in ZOO:
            results[name] = measure(build(name), config, not args.skip_tvm)
    results[f"branching_{args.tensors}"] = measure(branching_graph(args.tensors), config, False)
    results["summary"] = summary(results)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
