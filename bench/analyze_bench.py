"""Time ``analyze_model`` on the light models, the zoo and a generated 20,000-node graph.

The peer in the same run is onnx's own shape inference (``infer_shapes_s``), the floor
any ONNX analysis pays; ``seconds`` is the whole analysis (validation, inference, IR,
costs, structure) on top of it. With ``--simplify`` the light and zoo models are also
simplified (``simplify_s``: onnxslim; ``nodes_simplified``). Prints one JSON object
``{model: {nodes, seconds, infer_shapes_s, ...}}``; the 20,000-node graph must stay
under 10 s on two cores.

    python bench/analyze_bench.py [--nodes 20000] [--repeat 3] [--simplify]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph import analyze_model  # noqa: E402
from engine.graph.simplify import simplify_model  # noqa: E402
from engine.zoo import ZOO, build  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CHANNELS = 8
LIMIT_S = 10.0


def branching_chain(n_nodes: int) -> onnx.ModelProto:
    """Blocks of Conv -> Relu -> Add(skip) -> Mul(branch): a chain with a fork per block."""
    nodes, weights = [], []
    x = "x"
    for b in range(n_nodes // 4):
        w = f"w{b}"
        weights.append(
            numpy_helper.from_array(np.full((CHANNELS, CHANNELS, 1, 1), 0.1, np.float32), w)
        )
        nodes += [
            helper.make_node("Conv", [x, w], [f"c{b}"], name=f"conv{b}"),
            helper.make_node("Relu", [f"c{b}"], [f"r{b}"], name=f"relu{b}"),
            helper.make_node("Add", [f"r{b}", x], [f"s{b}"], name=f"add{b}"),
            helper.make_node("Mul", [f"s{b}", f"c{b}"], [f"m{b}"], name=f"mul{b}"),
        ]
        x = f"m{b}"
    shape = [1, CHANNELS, 8, 8]
    graph = helper.make_graph(
        nodes,
        "branching_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 4)


def measure(model: onnx.ModelProto, repeat: int, simplify: bool) -> dict:
    analysis = analyze_model(model)
    assert not analysis.not_costed, analysis.not_costed[:5]
    result = {
        "nodes": analysis.nodes,
        "macs": analysis.macs,
        "params": analysis.params,
        "stages": len(analysis.structure.stages),
        "blocks": len(analysis.structure.blocks),
        "chains": len(analysis.structure.chains),
        "seconds": best_of(repeat, lambda: analyze_model(model)),
        "infer_shapes_s": best_of(
            repeat, lambda: onnx.shape_inference.infer_shapes(model, data_prop=True)
        ),
    }
    if simplify:
        report = simplify_model(model).report
        result["simplify_s"] = report.seconds
        result["nodes_simplified"] = report.nodes_after
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--simplify", action="store_true", help="also time simplification")
    args = parser.parse_args()
    models = {p.stem: onnx.load(p) for p in sorted(LIGHT_DIR.glob("light_*.onnx"))}
    models |= {f"zoo_{name}": build(name) for name in ZOO}
    results = {name: measure(m, args.repeat, args.simplify) for name, m in models.items()}
    big = f"branching_chain_{args.nodes}"
    results[big] = measure(branching_chain(args.nodes), args.repeat, simplify=False)
    results[big]["under_limit"] = results[big]["seconds"] < LIMIT_S
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
