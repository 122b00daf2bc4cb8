"""Which tool folds shape arithmetic best for the prepared model, measured on the real-model
set (torch exports of transformers and timm-style code, both exporters).

Each model's inputs are bound as the workbench binds them (engine.graph.prepare.bind_inputs),
then three candidates run on the same bound model:

- ``onnx-data-prop``: onnx's shape inference with data propagation (shapes only);
- ``ort-symbolic``: onnxruntime's symbolic shape inference (shapes only);
- ``onnxslim``: onnxslim's constant folding and dead-code passes, then onnx shape inference.

Per model and tool: seconds, nodes left, tensors with a static shape, nodes the analysis
costs, MACs against the independent count, and whether TVM's ONNX importer takes the
result (the compile stage needs that). Prints a table and JSON.

    python bench/prepare_bench.py [--models a,b] [--no-tvm] [--out F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.real_models import MODELS, ensure_models, load_manifest  # noqa: E402
from engine.graph.costs import cost_node  # noqa: E402
from engine.graph.ir import build_graph  # noqa: E402
from engine.graph.prepare import bind_inputs  # noqa: E402
from engine.graph.shapes import apply_input_shapes, infer_shapes  # noqa: E402


def onnx_data_prop(model: onnx.ModelProto) -> onnx.ModelProto:
    return infer_shapes(model)[0]


def ort_symbolic(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    return SymbolicShapeInference.infer_shapes(model, auto_merge=True)


def onnxslim_fold(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxslim

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    folded = onnxslim.slim(
        copy, size_threshold=1 << 20, skip_optimizations=["graph_fusion", "weight_tying"]
    )
    return infer_shapes(folded)[0]


TOOLS = {"onnx-data-prop": onnx_data_prop, "ort-symbolic": ort_symbolic, "onnxslim": onnxslim_fold}


def measure(model: onnx.ModelProto, tool, independent: int, tvm: bool) -> dict:
    started = time.perf_counter()
    try:
        result = tool(model)
    except Exception as e:  # noqa: BLE001 - a tool's failure is a result
        return {"failed": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    seconds = time.perf_counter() - started
    graph = build_graph(result)
    tensors = list(graph.tensors.values())
    costs = [cost_node(n, graph) for n in graph.nodes]
    macs = sum(c.macs for c in costs if c is not None)
    entry = {
        "seconds": round(seconds, 3),
        "nodes": len(graph.nodes),
        "static_tensors_pct": round(
            100 * sum(t.static_shape is not None for t in tensors) / len(tensors), 1
        ),
        "costed_pct": round(100 * sum(c is not None for c in costs) / len(costs), 1),
        "macs_error_pct": round(100 * abs(macs - independent) / independent, 2),
    }
    if tvm:
        entry["tvm_imports"] = _tvm_imports(result)
    return entry


def _tvm_imports(model: onnx.ModelProto) -> str:
    """Whether TVM's ONNX frontend takes every node of the result."""
    from engine.fusion.importer import import_onnx, prepare
    from engine.fusion.preparation import dtypes
    from engine.graph.loader import model_inputs
    from engine.graph.tensors import type_spec
    from engine.graph.topology import sorted_model

    model, _ = sorted_model(model)
    model = prepare(model)
    shapes = {v.name: list(type_spec(v.type)[0] or []) for v in model_inputs(model)}
    try:
        import_onnx(model, shapes, dtypes(model))
    except Exception as e:  # noqa: BLE001 - TVM raises its own errors
        return f"no: {str(e).strip().splitlines()[-1][:120]}"
    return "yes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="")
    parser.add_argument("--no-tvm", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    names = [n for n in args.models.split(",") if n] or list(MODELS)
    paths, manifest = ensure_models(names), load_manifest()
    results = {}
    for name in names:
        model = onnx.load(str(paths[name]))
        bound = onnx.ModelProto()
        bound.CopyFrom(model)
        apply_input_shapes(bound, {b.name: b.shape for b in bind_inputs(model, {})})
        results[name] = {
            tool: measure(bound, fn, manifest[name]["default_macs"], not args.no_tvm)
            for tool, fn in TOOLS.items()
        }
    print(f"{'model':<18}" + "".join(f"{t:>36}" for t in TOOLS))
    for name, row in results.items():
        cells = []
        for tool in TOOLS:
            r = row[tool]
            cells.append(
                "failed"
                if "failed" in r
                else f"{r['seconds']:5.2f}s {r['nodes']:5d}n {r['static_tensors_pct']:5.1f}% "
                f"{r['macs_error_pct']:6.1f}% {r.get('tvm_imports', '-')[:3]}"
            )
        print(f"{name:<18}" + "".join(f"{c:>36}" for c in cells))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
