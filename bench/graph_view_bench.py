"""Time the graph view's server side on the bundled light models and on generated
CNN-shaped graphs of several sizes: the whole-graph layout, the tree (groups, metrics, no
layout), the first view (the levels it opens, laid out) and every level laid out.

The peer in the same run is the order the layout starts from (depth-first, before the
barycenter sweeps): ``crossings_initial`` against ``crossings``. Prints one JSON object
``{model: {nodes, edges, layout_s, tree_s, first_view_s, first_view_bytes, every_level_s,
first_view_items, crossings, ...}}``.

    python bench/graph_view_bench.py [--sizes 2000,5000,20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from unittest import mock

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph import analyze_model  # noqa: E402
from frontend.figures import graph  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("densenet121", "inception_v2", "resnet50", "squeezenet")


def synthetic_analysis(n_nodes: int) -> dict:
    """An analysis dict shaped like a CNN: Conv -> BatchNormalization -> Relu chains with
    their weight producers, residual blocks and inception-style modules, repeated until
    ``n_nodes``. Costs are made up but vary, so colour scales have a range."""
    nodes: list[dict] = []

    def add(op: str, inputs: list[str], flops: int = 0) -> str:
        name = f"{op.lower()}_{len(nodes)}"
        nodes.append(
            {
                "name": name,
                "op_type": op,
                "inputs": inputs,
                "outputs": [name + ":0"],
                "output_shapes": [[1, 64, 28, 28]],
                "macs": flops // 2,
                "flops": flops,
                "params": flops // 100,
                "bytes_read": 4096 + flops // 50,
                "bytes_written": 4096,
                "intensity": round(flops / (8192 + flops // 50), 3),
                "costed": True,
            }
        )
        return name + ":0"

    def conv_bn_relu(x: str, k: int) -> str:
        weight = add("ConstantOfShape", [])
        x = add("Conv", [x, weight], flops=1_000_000 * (k % 7 + 1))
        scale, bias = add("ConstantOfShape", []), add("ConstantOfShape", [])
        x = add("BatchNormalization", [x, scale, bias], flops=200_000)
        return add("Relu", [x], flops=50_000)

    x, k = "input", 0
    while len(nodes) < n_nodes:
        k += 1
        if k % 3:
            y = conv_bn_relu(conv_bn_relu(x, k), k + 1)
            x = add("Relu", [add("Add", [y, x], flops=50_000)])
        else:
            branches = [conv_bn_relu(x, k + b) for b in range(3)]
            branches.append(conv_bn_relu(conv_bn_relu(x, k), k + 2))
            branches.append(add("MaxPool", [x], flops=100_000))
            x = add("Concat", branches)
    return {"nodes": len(nodes), "inputs": [{"name": "input"}], "node_list": nodes}


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(min(times), 4)


def measure(analysis: dict, repeat: int) -> dict:
    nodes = analysis["node_list"]
    edges = graph.node_edges(nodes)
    light = graph.satellites(nodes, edges, {t["name"] for t in analysis.get("inputs", [])})
    layout = graph.layout_graph(len(nodes), edges, light)
    with mock.patch.object(graph, "SWEEPS", 0):
        initial = graph.layout_graph(len(nodes), edges, light)
    from frontend.figures.graph import levels as lv
    from frontend.figures.graph.payload import first_view, graph_tree_of

    tree = graph_tree_of(analysis)
    view = first_view(tree)
    groups = range(len(tree["groups"]["parent"]))
    return {
        "nodes": len(nodes),
        "edges": len(edges),
        "layers": max(layout.layer, default=-1) + 1,
        "layout_s": best_of(repeat, lambda: graph.layout_graph(len(nodes), edges, light)),
        "tree_s": best_of(repeat, lambda: graph_tree_of(analysis)),
        "first_view_s": best_of(repeat, lambda: first_view(tree)),
        "first_view_bytes": len(json.dumps(view, separators=(",", ":"))),
        "every_level_s": best_of(1, lambda: [lv.level(tree, g) for g in groups]),
        "groups": len(tree["groups"]["parent"]),
        "first_view_items": sum(
            1
            for shown in view["levels"]
            for item in shown["items"]
            if item >= 0 or -item - 1 not in view["open"]
        ),
        "crossings_initial": graph.count_crossings(initial),
        "crossings": graph.count_crossings(layout),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for name in LIGHT_MODELS:
        analysis = analyze_model(LIGHT_DIR / f"light_{name}.onnx").to_dict()
        results[name] = measure(analysis, args.repeat)
    for size in (int(s) for s in args.sizes.split(",")):
        results[f"synthetic_{size}"] = measure(synthetic_analysis(size), args.repeat)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
