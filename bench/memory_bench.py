"""Memory planners on the bundled light models and on a generated 20,000-tensor graph.

Per model: the arena of every planner, the lower bound (peak of live bytes), each
planner's ratio to it and its planning time, the gain of the order search, and the
local-buffer fit of a GraphTurbo-shaped unit (64 KiB LB, 8 MiB GB). The peers in the same
run are TFLite's planners (naive, greedy, min-cost flow, greedy by size / breadth); the
TVM build's total of static allocations is the other peer named by issue 6: it is
``tvm_static_bytes``, ``null`` until the TVM compile stage exists (see
``tvm_static_bytes`` below for the hook). Prints one JSON object ``{model: {...}}``.

    python bench/memory_bench.py [--tensors 20000] [--in-place] [--time-limit 1.0]
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


def tvm_static_bytes(model: Path | onnx.ModelProto) -> int | None:
    """Hook for issue 6's TVM comparison: the total of static allocations of the TVM build
    of the same model (relax's StaticPlanBlockMemory). Returns ``None`` until the compile
    stage (engine/fusion) can build the model; fill it from there, not from here."""
    return None


def measure(source, config: MemoryConfig) -> dict:
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
        "tvm_static_bytes": tvm_static_bytes(source),
        "analysis_s": round(analysis_s, 3),
        "planning_s": result["planning_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=20_000)
    parser.add_argument("--in-place", action="store_true")
    parser.add_argument("--time-limit", type=float, default=1.0)
    parser.add_argument("--skip-light", action="store_true")
    args = parser.parse_args()
    config = MemoryConfig(
        in_place=args.in_place,
        time_limit_s=args.time_limit,
        levels=LevelConfig(local_buffer_bytes=65_536, global_buffer_bytes=8_388_608),
    )
    results = {}
    if not args.skip_light:
        for path in sorted(LIGHT_DIR.glob("light_*.onnx")):
            results[path.stem] = measure(path, config)
    results[f"branching_{args.tensors}"] = measure(branching_graph(args.tensors), config)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
