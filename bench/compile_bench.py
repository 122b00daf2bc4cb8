"""Compile the bundled models and the real-model set, and compare each with onnxruntime in
the same run.

Per model: the backend mix the compile chose by measurement (TVM, onnxruntime alone, or
both), the segments it moved to onnxruntime, kernels (TVM's FuseOps alone vs with our
rules), compile time, the artifact's latency against onnxruntime at its best thread setting
(1 or ``--threads``), each in a fresh process with rounds alternating (the compile stage's
own fair figure, ``engine.fusion.fair_timing``), the TVM/onnxruntime mix's latency where it
was not shipped, peak memory of both, and whether the outputs match; the shipped artifact
timed once more in a fair timing of its own (``confirmed``: the compile's figure comes from
the rounds that chose the backend, which biases it upwards); untuned and -- with
``--tune-minutes`` -- tuned through a shared tuning store, then compiled a second time with
the same budget and store (``second_compile``: it reuses the records). The summary gives the geometric
mean of the speed over the models and the lowest speed. Prints one JSON object.

    python bench/compile_bench.py [--models light_resnet50,vit_ts] [--threads 2]
        [--tune-minutes 20] [--tune-models light_resnet50] [--no-choice] [--out DIR]

Models: every ``onnx/backend/test/data/light/light_*.onnx`` (as ``light_<name>``), every
model of ``engine.zoo`` (seeded random weights) and the real-model set (bench/real_models.py:
torch exports of transformers and torch code; prepared as the compile stage prepares them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.real_models import MODELS as REAL_MODELS  # noqa: E402
from bench.real_models import ensure_models  # noqa: E402
from engine.fusion import CompileConfig, compile_model  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402
from engine.targets.host import describe_host  # noqa: E402
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
    paths.update(ensure_models(REAL_MODELS))
    return paths


def bench_one(path: Path, out: Path, threads: int, minutes: float, store: str, choice: bool):
    # the compile stage's input: the prepared model, from the cache as a worker reads it
    prepared = prepare_model(path, cache_dir=out / "prepared")
    config = CompileConfig(
        out_dir=str(out),
        threads=threads,
        input_shapes=prepared.input_shapes,
        tune_minutes=minutes,
        tuning_store=store if minutes else None,
        timing_window_s=3.0,
        choose_backends=choice,
        # the worker's: builds of the same segments (the second compile's) are copied
        build_cache=str(out.parent.parent / "build-cache"),
    )
    started = time.perf_counter()
    try:
        # as the compile stage runs it: given the user's file, onnxruntime's baseline
        data = compile_model(prepared, config, upload=path).to_dict()
    except Exception as e:  # noqa: BLE001 - a failure is a row of the table, not the end
        return {"failed": f"{type(e).__name__}: {str(e)[:300]}"}
    fusion, timing = data["fusion"], data["timing"]
    return {
        "compile_s": round(time.perf_counter() - started, 2),
        "backend": data["backend"],
        "segments_moved_to_onnxruntime": sum(
            c["backend"] == "onnxruntime" for c in data["backend_choice"]
        ),
        "segments_kept_on_tvm": sum(c["backend"] == "tvm" for c in data["backend_choice"]),
        "nodes": data["model_nodes"],
        "tvm_nodes": data["tvm_nodes"],
        "fallback_nodes": len(data["fallback_nodes"]),
        # why nodes run in onnxruntime, each reason with its node count: why the artifact
        # is what it is without rerunning the compile for its manifest
        "fallback_reasons": dict(
            Counter(f["reason"] for f in data["fallback_nodes"]).most_common(5)
        ),
        "kernels_fuseops": fusion["kernel_count_fuseops"],
        "kernels": fusion["kernel_count"],
        "rules_accepted": [
            s["name"] for s in fusion["stages"][2:] if s["accepted"] and s["rewrites"]
        ],
        "latency_ms": round(data["latency_ms"], 4),
        "onnxruntime_latency_ms": round(data["onnxruntime_latency_ms"], 4),
        "onnxruntime_ms_by_threads": timing["onnxruntime_ms_by_threads"],
        "mix_latency_ms": (timing.get("mix") or {}).get("latency_ms"),
        # each independent timing's (artifact or mix, onnxruntime) figures: two when a
        # close win was timed again before it shipped
        "timings": (timing.get("mix") or timing).get("timings"),
        # as the run's headline gives it: 1.0 by construction when onnxruntime alone ships
        # (the baseline itself); the measured ratio (machine noise then) kept beside it
        "speed_vs_onnxruntime_best": round(_headline_speed(data), 3),
        "measured_speed_vs_onnxruntime": round(data["speed_vs_onnxruntime"], 3),
        "conv_layout": data["conv_layout"],
        "kernel_split": {
            k: v for k, v in data["kernel_split"].items() if k not in ("kernels", "moved")
        }
        | {"moved": len(data["kernel_split"].get("moved", []))},
        "peak_memory": data["peak_memory"],
        "builds": data["builds"],
        "outputs_match": data["outputs_match"],
        "tuning": {
            k: data["tuning"].get(k)
            for k in ("trials", "tasks_tuned", "records_used", "improved", "seconds", "end_to_end")
        },
        "timings_s": data["timings_s"],
        "artifact_reason": data.get("artifact_reason"),
        "baseline_model": data.get("baseline_model"),
        "confirmed": _confirm(out / "artifact", path, data, threads, config),
    }


def _confirm(artifact: Path, model, data: dict, threads: int, config) -> dict:
    """The shipped artifact timed against onnxruntime once more, in a fair timing of its own.
    The compile's own figure comes from the rounds that chose the backend, so it is biased
    upwards: noise that favours TVM ships TVM and shows as a win, noise that favours
    onnxruntime ships onnxruntime at 1.0. These rounds decided nothing. An artifact that is
    onnxruntime alone on the model as uploaded is the baseline itself: 1.0, not timed
    again (onnxruntime on the simplified model is timed). ``model``: the user's file, the
    compile's baseline."""
    if data["backend"] == "onnxruntime" and data.get("onnxruntime_as_uploaded", True):
        return {"speed_vs_onnxruntime": 1.0, "timed": False}
    from engine.fusion.fair_timing import rounds_for, time_fairly
    from engine.fusion.standalone import CompiledModel

    feeds = CompiledModel(artifact).example_inputs()
    # rounds by the shipped artifact's run time, by the compile's own rule
    rounds = config.timing_rounds or rounds_for(data.get("latency_ms"), config.timing_window_s)
    fair = time_fairly(
        artifact, model, feeds, threads, rounds=rounds, window_s=config.timing_window_s / rounds
    )
    speed = fair.each[0].round_speed
    return {
        "speed_vs_onnxruntime": round(fair.onnxruntime_latency_ms / fair.latency_ms, 3),
        "latency_ms": round(fair.latency_ms, 4),
        "onnxruntime_latency_ms": round(fair.onnxruntime_latency_ms, 4),
        # the median of the rounds' own speeds: each side's fastest round can fall on
        # different speeds of a shared machine (fair_timing.round_speeds)
        "round_speed": None if speed is None else round(speed, 3),
        "timed": True,
        "method": "a second fair timing of the shipped artifact, after the compile: "
        + fair.to_dict()["method"],
    }


def _headline_speed(data: dict) -> float:
    from engine.report.headlines import headline_figures

    figures = {f.key: f for f in headline_figures({"compile": data})}
    return figures["compile.speed_vs_onnxruntime"].value


def summary(rows: dict, kind: str) -> dict:
    speeds = [
        r[kind]["speed_vs_onnxruntime_best"]
        for r in rows.values()
        if "speed_vs_onnxruntime_best" in r.get(kind, {})
    ]
    if not speeds:
        return {}
    confirmed = [
        r[kind]["confirmed"]["speed_vs_onnxruntime"]
        for r in rows.values()
        if "confirmed" in r.get(kind, {})
    ]
    # the confirmation's median of its rounds' own speeds; 1.0 where it was not timed (the
    # artifact is the baseline itself); a row with neither (no round timed both sides) is
    # left out
    by_round = [
        c["round_speed"] if c["timed"] else c["speed_vs_onnxruntime"]
        for c in (r[kind]["confirmed"] for r in rows.values() if "confirmed" in r.get(kind, {}))
        if not c["timed"] or c.get("round_speed") is not None
    ]
    return {
        "models": len(speeds),
        # from the rounds that chose each backend: biased upwards (see _confirm)
        "geomean_speed": round(statistics.geometric_mean(speeds), 3),
        "min_speed": min(speeds),
        "below_1": sum(s < 1.0 for s in speeds),
        # from a second timing that decided nothing
        "geomean_speed_confirmed": round(statistics.geometric_mean(confirmed), 3)
        if confirmed
        else None,
        "min_speed_confirmed": min(confirmed, default=None),
        "below_1_confirmed": sum(s < 1.0 for s in confirmed),
        "geomean_round_speed_confirmed": round(statistics.geometric_mean(by_round), 3)
        if by_round
        else None,
        "below_1_round_speed_confirmed": sum(s < 1.0 for s in by_round),
        "max_compile_s": max(
            r[kind]["compile_s"] for r in rows.values() if "compile_s" in r.get(kind, {})
        ),
        "backends": dict(
            Counter(r[kind]["backend"] for r in rows.values() if "backend" in r[kind])
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated subset (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tune-minutes", type=float, default=0.0, help="per tuned model")
    parser.add_argument("--tune-models", help="models to tune (default: all with a budget)")
    parser.add_argument("--out", help="keep artifacts and the tuning store here")
    parser.add_argument(
        "--no-choice", action="store_true", help="keep every segment TVM builds on TVM"
    )
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="the light models with random weights in place of their ConstantOfShape fills "
        "(as trained weights: they do not compress, and onnxslim has nothing to fold)",
    )
    args = parser.parse_args()
    work = Path(args.out or tempfile.mkdtemp(prefix="compile-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    paths = model_paths(work)
    names = args.models.split(",") if args.models else list(paths)
    if args.random_weights:
        from engine.accuracy.weights import randomize_fills, weight_fills

        for name in names:
            model = onnx.load(str(paths[name]))
            if weight_fills(model):
                paths[name] = work / f"{name}.random-weights.onnx"
                onnx.save(randomize_fills(model), str(paths[name]))
    tuned = set(args.tune_models.split(",")) if args.tune_models else set(names)
    store = str(work / "tuning-store")
    rows = {}
    choice = not args.no_choice
    for name in names:
        # a line as each model starts: a crash (a signal in a kernel) then names its model
        print(f"{name}: compiling", file=sys.stderr, flush=True)
        run = work / name
        row = {"untuned": bench_one(paths[name], run / "untuned", args.threads, 0, store, choice)}
        minutes = args.tune_minutes if name in tuned else 0.0
        if minutes and "failed" not in row["untuned"]:
            row["tuned"] = bench_one(
                paths[name], run / "tuned", args.threads, minutes, store, choice
            )
            # the same compile again, same budget, same store: it reuses the records
            row["second_compile"] = bench_one(
                paths[name], run / "second", args.threads, minutes, store, choice
            )
        rows[name] = row
        print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        # the report so far, after every model: a run that dies keeps what it measured
        (work / "compile_bench.json").write_text(json.dumps(_report(args, rows), indent=1))
    print(json.dumps(_report(args, rows), indent=1))
    return 0


def _report(args, rows: dict) -> dict:
    return {
        "command": " ".join(sys.argv),
        "threads": args.threads,
        "load_avg_1m": os.getloadavg()[0],
        "host": describe_host(),  # figures differ by machine: AMD's and Intel's differ most
        "summary": {kind: summary(rows, kind) for kind in ("untuned", "tuned", "second_compile")},
        "models": rows,
    }


if __name__ == "__main__":
    sys.exit(main())
