"""How fast our TVM build is against onnxruntime, model by model, with no backend choice.

The compile stage ships whichever of TVM, onnxruntime or a mix measured faster, so its
figure hides how good the TVM build itself is. This bench compiles each model with
everything TVM can import on TVM (``choose_backends=False``), in each conv layout (NCHW
and channel blocks, see ``engine.fusion.conv_layout``; a model without convs once), then
times the builds and an onnxruntime session on the model as uploaded in one process, alternating,
``--rounds`` times, on the same inputs and the same thread count, and reports each side's
fastest run: other load on a shared machine only adds time, so the minimum is the figure
that repeats. Prints one JSON object.

    python bench/tvm_build_bench.py [--models bert_ts,vit_ts] [--threads 1] [--rounds 2]

Models: the real-model set (bench/real_models.py) by default; any model
``bench/compile_bench.py`` knows by name (the bundled ones too). Each prepared as the
compile stage prepares it. The row's figure is the faster layout's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.compile_bench import model_paths  # noqa: E402
from bench.real_models import MODELS as REAL_MODELS  # noqa: E402
from engine.fusion import CompileConfig, compile_model  # noqa: E402
from engine.fusion.conv_layout import LAYOUTS  # noqa: E402
from engine.fusion.standalone import CompiledModel  # noqa: E402
from engine.fusion.timing import TimingConfig, time_calls  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402

WINDOW = TimingConfig(min_runs=20, max_runs=2000, window_s=2.0)


def bench_one(path: Path, work: Path, threads: int, rounds: int) -> dict:
    """Each conv layout built (a model without convs: once), all timed alternating with
    onnxruntime; the row's figure is the faster layout's, as the compile stage ships it."""
    import onnxruntime as ort

    prepared = prepare_model(path)
    builds, results, compile_s = {}, {}, {}
    has_convs = any(n.op_type == "Conv" for n in prepared.model.graph.node)
    for layout in LAYOUTS if has_convs else LAYOUTS[:1]:
        started = time.perf_counter()
        try:
            results[layout] = compile_model(
                prepared.model,
                CompileConfig(
                    out_dir=str(work / layout),
                    threads=threads,
                    input_shapes=prepared.input_shapes,
                    choose_backends=False,
                    measure=False,
                    conv_layout=layout,
                ),
            )
        except Exception as e:  # noqa: BLE001 - the other layout still gives a row
            results[layout] = f"{type(e).__name__}: {str(e)[:200]}"
            continue
        compile_s[layout] = round(time.perf_counter() - started, 2)
        if results[layout].conv_layout["chosen"] != layout:
            continue  # blocked asked for, not possible (or no conv): the NCHW build is it
        builds[layout] = CompiledModel(work / layout / "artifact", threads=threads)
    if not builds:
        raise RuntimeError(f"no layout built: {results}")
    feeds = next(iter(builds.values())).example_inputs(0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    ort_feeds = {n: feeds[n] for n in names}
    tvm_ms = {layout: [] for layout in builds}
    ort_ms = []
    for _ in range(rounds):
        for layout, compiled in builds.items():
            tvm_ms[layout].append(time_calls(lambda c=compiled: c.run(feeds), WINDOW)["min"])
        ort_ms.append(time_calls(lambda: session.run(None, ort_feeds), WINDOW)["min"])
    best = min(builds, key=lambda layout: min(tvm_ms[layout]))
    result = results[best]
    return {
        "tvm_ms": round(min(tvm_ms[best]), 4),
        "onnxruntime_ms": round(min(ort_ms), 4),
        "speed_vs_onnxruntime": round(min(ort_ms) / min(tvm_ms[best]), 3),
        "conv_layout": best,
        "tvm_ms_by_layout": {layout: round(min(v), 4) for layout, v in tvm_ms.items()},
        "not_built": {
            layout: (r if isinstance(r, str) else r.conv_layout.get("reason"))
            for layout, r in results.items()
            if layout not in builds
        },
        "tvm_nodes": result.tvm_nodes,
        "model_nodes": result.model_nodes,
        "kernels": len(result.kernels),
        "schedules": sorted({k.schedule for k in result.kernels}),
        "compile_s": compile_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated (default: the real-model set)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tvm-build-bench-") as tmp:
        known = model_paths(Path(tmp))  # the bundled models and the real-model set
        names = args.models.split(",") if args.models else list(REAL_MODELS)
        unknown = sorted(set(names) - set(known))
        if unknown:
            parser.error(f"unknown models: {', '.join(unknown)}")
        paths = {name: known[name] for name in names}
        rows = {}
        for name in names:
            try:
                rows[name] = bench_one(paths[name], Path(tmp) / name, args.threads, args.rounds)
            except Exception as e:  # noqa: BLE001 - a failure is a row, not the end
                rows[name] = {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{name}: {json.dumps(rows[name])}", file=sys.stderr, flush=True)
    speeds = [r["speed_vs_onnxruntime"] for r in rows.values() if "speed_vs_onnxruntime" in r]
    report = {
        "method": (
            "everything TVM imports on TVM (no backend choice); the artifact and onnxruntime "
            "on the upload in one process, alternating, fastest run of each"
        ),
        "threads": args.threads,
        "rounds": args.rounds,
        "models": rows,
        "geomean_speed": round(statistics.geometric_mean(speeds), 3) if speeds else None,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
