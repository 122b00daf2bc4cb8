"""Compile the bundled models with TVM and compare them with onnxruntime in the same run.

Per model: compile time, kernels (TVM's FuseOps alone vs with our rules), estimated
global-memory traffic, TVM latency vs onnxruntime latency (same machine, same threads,
same process, same inputs), untuned and -- with ``--tune-minutes`` -- tuned through a
shared tuning store, plus the coverage table (nodes compiled by TVM vs fallen back to
onnxruntime) and whether the outputs match. ``speed_vs_onnxruntime`` compares with
onnxruntime at the same thread count; ``speed_vs_onnxruntime_best`` with onnxruntime at
its faster of 1 and ``--threads`` threads in a fresh session (``onnxruntime_ms_by_threads``). Prints one JSON object.

    python bench/compile_bench.py [--models light_resnet50,bert_small] [--threads 2]
        [--tune-minutes 20] [--tune-models light_resnet50,bert_small] [--out DIR]

Models: every ``onnx/backend/test/data/light/light_*.onnx`` (as ``light_<name>``) and
every model of ``engine.zoo`` (seeded random weights).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.fusion import CompileConfig, compile_model  # noqa: E402
from engine.zoo import ZOO, build  # noqa: E402
from engine.zoo.builder import decompose_layer_norms  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def model_paths(work: Path) -> dict[str, Path]:
    paths = {p.stem: p for p in sorted(LIGHT_DIR.glob("light_*.onnx"))}
    for name in ZOO:
        path = work / f"{name}.onnx"
        onnx.save(build(name), str(path))
        paths[name] = path
    # BERT as exporters below opset 17 write its layer norms (the layer-norm rule's case)
    path = work / "bert_small_ln_decomposed.onnx"
    onnx.save(decompose_layer_norms(build("bert_small")), str(path))
    paths[path.stem] = path
    return paths


def onnxruntime_ms(path: Path, artifact: Path, threads: int) -> float:
    """Median latency of a plain onnxruntime session with ``threads`` intra-op threads, on
    the inputs compile_model used (the input specs of its ``artifact``), timed the same
    way (3 s window)."""
    import onnxruntime as ort

    from engine.fusion.standalone import MANIFEST, example_inputs
    from engine.fusion.timing import TimingConfig, time_calls

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = example_inputs(json.loads((artifact / MANIFEST).read_text())["inputs"])
    return time_calls(lambda: session.run(None, feeds), TimingConfig(window_s=3.0))["median"]


def bench_one(path: Path, out: Path, threads: int, minutes: float, store: str) -> dict:
    config = CompileConfig(
        out_dir=str(out),
        threads=threads,
        tune_minutes=minutes,
        tuning_store=store if minutes else None,
        timing_window_s=3.0,
    )
    started = time.perf_counter()
    try:
        data = compile_model(path, config).to_dict()
    except Exception as e:  # noqa: BLE001 - a failure is a row of the table, not the end
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
    fusion = data["fusion"]
    return {
        "compile_s": round(time.perf_counter() - started, 2),
        "nodes": data["model_nodes"],
        "tvm_nodes": data["tvm_nodes"],
        "fallback_nodes": len(data["fallback_nodes"]),
        "fallback_ops": sorted({f["op_type"] for f in data["fallback_nodes"]}),
        "kernels_unfused": fusion["stages"][0]["kernels"],
        "kernels_fuseops": fusion["kernel_count_fuseops"],
        "kernels": fusion["kernel_count"],
        "traffic_mb_fuseops": round(fusion["traffic_bytes_fuseops"] / 1e6, 3),
        "traffic_mb": round(fusion["traffic_bytes"] / 1e6, 3),
        "rules_accepted": [
            s["name"] for s in fusion["stages"][2:] if s["accepted"] and s["rewrites"]
        ],
        "latency_ms": round(data["latency_ms"], 3),
        "onnxruntime_latency_ms": round(data["onnxruntime_latency_ms"], 3),
        "speed_vs_onnxruntime": round(data["speed_vs_onnxruntime"], 3),
        "outputs_match": data["outputs_match"],
        "tuning": {
            k: data["tuning"].get(k)
            for k in ("trials", "tasks_tuned", "records_used", "improved", "seconds", "end_to_end")
        },
        "timings_s": data["timings_s"],
    }


def add_peer_and_tuned(
    row: dict, path: Path, work: Path, threads: int, minutes: float, store: str
) -> None:
    """onnxruntime at its best thread count (the fair peer: a fresh session, since one
    created in the compile's own loop may share the cores with TVM's pool), and with a
    budget the tuned build; each build's speed against that peer."""
    artifact = work / "untuned" / "artifact"
    per_threads = {t: onnxruntime_ms(path, artifact, t) for t in sorted({1, threads})}
    best = min(per_threads.values())
    row["onnxruntime_ms_by_threads"] = {str(t): round(v, 3) for t, v in per_threads.items()}
    if minutes:
        row["tuned"] = bench_one(path, work / "tuned", threads, minutes, store)
    for kind in ("untuned", "tuned"):
        if "latency_ms" in row.get(kind, {}):
            row[kind]["speed_vs_onnxruntime_best"] = round(best / row[kind]["latency_ms"], 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tune-minutes", type=float, default=0.0, help="per tuned model")
    parser.add_argument("--tune-models", help="models to tune (default: all with a budget)")
    parser.add_argument("--out", help="keep artifacts and the tuning store here")
    args = parser.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="compile-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    paths = model_paths(work)
    names = args.models.split(",") if args.models else list(paths)
    tuned = set(args.tune_models.split(",")) if args.tune_models else set(names)
    store = str(work / "tuning-store")
    rows = {}
    for name in names:
        row = {"untuned": bench_one(paths[name], work / name / "untuned", args.threads, 0, store)}
        if "failed" not in row["untuned"]:
            tune = args.tune_minutes if name in tuned else 0.0
            add_peer_and_tuned(row, paths[name], work / name, args.threads, tune, store)
        rows[name] = row
        print(f"{name}: {json.dumps(row)}", file=sys.stderr)
    coverage = {
        name: {
            "tvm_nodes": r["untuned"].get("tvm_nodes"),
            "fallback_nodes": r["untuned"].get("fallback_nodes"),
            "outputs_match": r["untuned"].get("outputs_match"),
        }
        for name, r in rows.items()
    }
    print(json.dumps({"threads": args.threads, "models": rows, "coverage": coverage}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
