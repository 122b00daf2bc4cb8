"""Time ``analyze_model`` on the light models, the zoo and generated 100,000-node graphs.

The peer in the same run is onnx's own shape inference (``infer_shapes_s``), the floor
any ONNX analysis pays; ``seconds`` is the whole analysis on top of it (``cpu_s`` its CPU
time, ``gc_s`` the part spent in Python's cyclic garbage collector), and ``phases_s``
splits it (medians over ``--repeat`` runs, timed at the analysis' own progress reports):

- ``load``: parsing and the cheap checks, node limit, topological sort;
- ``shape_inference``: declared sizes and onnx shape inference;
- ``validate``: ``onnx.checker``;
- ``ir``: the graph IR, tensor size checks, unknown-shape explanations, the header;
- ``costs``: costing every node;
- ``structure``: stages, blocks and chains, and the totals.

Two generated graphs (``--shape-kind``): ``chain``, blocks of Conv -> Relu -> Add(skip) ->
Mul(branch); ``branchy``, blocks that split a tensor into four branches, scale each by a
tiny shared tensor and join them with a Concat (fan-out 4, many small tensors, one key
op per block). Each must be analyzed in under 5 s at 100,000 nodes on two cores
(``limit_s``, ``under_limit``), both by ``analyze_model`` and by the analyze stage's own
path (``stage_s``: ``prepare_model`` on the file's bytes, then ``analyze_prepared``; split
into ``stage_prepare_s`` and ``stage_analyze_s``). With ``--simplify`` the light and zoo models are also
simplified (``simplify_s``: onnxslim; ``nodes_simplified``). Prints one JSON object
``{model: {nodes, seconds, phases_s, infer_shapes_s, ...}}``.

    python bench/analyze_bench.py [--nodes 100000] [--shape-kind chain|branchy|all]
        [--repeat 3] [--generated-only] [--simplify]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.graph import analyze_model  # noqa: E402
from engine.graph.analyze import analyze_prepared  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402
from engine.graph.simplify import simplify_model  # noqa: E402
from engine.zoo import ZOO, build  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CHANNELS = 8
BRANCHES = 4
LIMIT_S = 5.0
LIMIT_NODES = 100_000
OPSET = 17

# Progress messages of analyze_model that open each phase (the first one seen wins).
PHASE_STARTS = {
    "loading model": "load",
    "inferring shapes": "shape_inference",
    "checking model": "validate",
    "building graph": "ir",
    "costing": "costs",
    "detecting structure": "structure",
    "analysis done": None,
}


def _model(nodes, weights, out: str, shape: list[int], name: str) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


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
    return _model(nodes, weights, x, [1, CHANNELS, 8, 8], "branching_chain")


BRANCH_OPS = ("Relu", "Tanh", "Sigmoid", "Abs")


def branchy(n_nodes: int) -> onnx.ModelProto:
    """Blocks of ReduceMean -> Sigmoid (a 1x1x1x1 gate) and Split -> 4 x (op, Mul by the
    gate) -> Concat: wide fan-out, many small tensors, a Concat ending every block."""
    per_block = 4 + 2 * BRANCHES
    nodes = []
    x = "x"
    for b in range(n_nodes // per_block):
        gate, parts = f"g{b}", [f"p{b}_{k}" for k in range(BRANCHES)]
        nodes += [
            helper.make_node(
                "ReduceMean", [x], [f"mean{b}"], name=f"mean{b}", axes=[1, 2, 3], keepdims=1
            ),
            helper.make_node("Sigmoid", [f"mean{b}"], [gate], name=f"gate{b}"),
            helper.make_node("Split", [x], parts, name=f"split{b}", axis=1),
        ]
        scaled = []
        for k, part in enumerate(parts):
            op = BRANCH_OPS[k % len(BRANCH_OPS)]
            nodes += [
                helper.make_node(op, [part], [f"a{b}_{k}"], name=f"{op.lower()}{b}_{k}"),
                helper.make_node("Mul", [f"a{b}_{k}", gate], [f"s{b}_{k}"], name=f"mul{b}_{k}"),
            ]
            scaled.append(f"s{b}_{k}")
        nodes.append(helper.make_node("Concat", scaled, [f"c{b}"], name=f"concat{b}", axis=1))
        x = f"c{b}"
    return _model(nodes, [], x, [1, CHANNELS, 4, 4], "branchy")


GENERATORS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "chain": branching_chain,
    "branchy": branchy,
}


def timed_analysis(model: onnx.ModelProto) -> tuple[float, float, float, dict[str, float]]:
    """Analyze once; return the wall, CPU and garbage-collection seconds and the wall
    seconds per phase.

    CPU time is the steadier figure on a shared machine (others' work shows in wall time).
    """
    marks: list[tuple[str | None, float]] = []
    seen: set[str] = set()
    collecting = [0.0, 0.0]  # start of the running collection, total

    def progress(fraction: float, message: str) -> None:
        for prefix, phase in PHASE_STARTS.items():
            if message.startswith(prefix) and prefix not in seen:
                seen.add(prefix)
                marks.append((phase, time.perf_counter()))

    def collection(stage: str, info: dict) -> None:
        if stage == "start":
            collecting[0] = time.perf_counter()
        else:
            collecting[1] += time.perf_counter() - collecting[0]

    gc.callbacks.append(collection)
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        analyze_model(model, progress=progress)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        gc.callbacks.remove(collection)
    phases = {
        phase: end - begin
        for (phase, begin), (_, end) in zip(marks, marks[1:], strict=False)
        if phase is not None
    }
    return total, cpu, collecting[1], phases


def timed_stage(data: bytes) -> tuple[float, float, float]:
    """The analyze stage as a worker runs it on an upload's bytes: the prepared model
    (validation, bound shapes, folding, the IR), then its analysis; the wall seconds of
    both and of each."""
    start = time.perf_counter()
    prepared = prepare_model(data)
    middle = time.perf_counter()
    analyze_prepared(prepared)
    end = time.perf_counter()
    return end - start, middle - start, end - middle


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


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
    }
    del analysis  # a live analysis would make every timed run's garbage collections longer
    runs = []
    for _ in range(repeat):
        gc.collect()
        runs.append(timed_analysis(model))
    stage = []
    data = model.SerializeToString()
    for _ in range(repeat):
        gc.collect()
        stage.append(timed_stage(data))
    peer = []
    for _ in range(repeat):
        start = time.perf_counter()
        onnx.shape_inference.infer_shapes(model, data_prop=True)
        peer.append(time.perf_counter() - start)
    result |= {
        "seconds": _median([run[0] for run in runs]),
        "seconds_min": round(min(run[0] for run in runs), 4),
        "cpu_s": _median([run[1] for run in runs]),
        "gc_s": _median([run[2] for run in runs]),
        "phases_s": {phase: _median([run[3][phase] for run in runs]) for phase in runs[0][3]},
        "infer_shapes_s": _median(peer),
        "stage_s": _median([run[0] for run in stage]),
        "stage_prepare_s": _median([run[1] for run in stage]),
        "stage_analyze_s": _median([run[2] for run in stage]),
    }
    if simplify:
        report = simplify_model(model).report
        result["simplify_s"] = report.seconds
        result["nodes_simplified"] = report.nodes_after
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=LIMIT_NODES)
    parser.add_argument("--shape-kind", choices=[*GENERATORS, "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--generated-only", action="store_true", help="skip light and zoo models")
    parser.add_argument("--simplify", action="store_true", help="also time simplification")
    args = parser.parse_args()
    results = {}
    if not args.generated_only:
        models = {p.stem: onnx.load(p) for p in sorted(LIGHT_DIR.glob("light_*.onnx"))}
        models |= {f"zoo_{name}": build(name) for name in ZOO}
        results = {name: measure(m, args.repeat, args.simplify) for name, m in models.items()}
    kinds = list(GENERATORS) if args.shape_kind == "all" else [args.shape_kind]
    limit_s = LIMIT_S * args.nodes / LIMIT_NODES  # the limit scales linearly
    for kind in kinds:
        result = measure(GENERATORS[kind](args.nodes), args.repeat, simplify=False)
        result["limit_s"] = round(limit_s, 4)
        result["under_limit"] = max(result["seconds"], result["stage_s"]) < limit_s
        results[f"{kind}_{args.nodes}"] = result
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
