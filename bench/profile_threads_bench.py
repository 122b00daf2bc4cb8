"""The profile's whole-model latency against a plain onnxruntime session, at 1 thread and
at all cores.

``profile_nodes`` keeps several onnxruntime sessions alive and runs them by turns; each has
its own intra-op thread pool. Per model and thread setting (1, and 0 = onnxruntime's
default, one thread per physical core), in one run and alternating the two a few times:

- ``plain_ms``: a plain session **in a separate process**: fresh, default options (the
  thread count and the profile's graph optimization level set, nothing else; spinning on,
  as a user's session has it), the same generated inputs, median of ``--plain-runs`` runs
  after a warm-up; the median over the rounds;
- ``profiled_ms``: ``profile_nodes`` with the default window, its whole-model median
  (``latency_ms``, the profiler off), median over the rounds;
- ``ratio`` = profiled / plain and ``within_10pct``;
- ``repeat``: per-op agreement between consecutive profiles of the model at that thread
  setting: the share of ops over 100 us whose medians agree within 10% (as
  bench/profile_bench.py counts it).

Models: the light zoo models named by ``--light`` (``onnx/backend/test/data/light``), the
real-model set's models named by ``--real`` (bench/real_models.py, built and cached on first
use, at their export shapes) and any ``--onnx`` files (their symbolic dims set to 1).

The machine may be shared: ``load_avg_1m`` says how busy it was, every round's figures are
kept. On a kernel that gives transparent huge pages only on request the bench re-runs
itself with malloc on huge pages, as the worker runs (see bench/profile_bench.py).

    python bench/profile_threads_bench.py [--light resnet50,squeezenet]
        [--real vit_ts,mobilenet_v2_ts,gpt2_ts] [--onnx a.onnx,b.onnx] [--rounds 3]
        [--threads 1,0] [--window 3] [--plain-runs 50] [--out F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.profile_bench import _on_huge_pages, repeat_agreement  # noqa: E402
from engine.profiling.nodes import NodeProfileConfig, profile_nodes  # noqa: E402
from engine.profiling.session import environment, load_average  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
AGREEMENT_PCT = 10.0
WARMUP_RUNS = 5

# Run in a fresh interpreter: one default session, nothing else alive in the process.
PLAIN = """
import json, statistics, sys, time
import onnx
import onnxruntime as ort
from engine.accuracy.inputs import index_bounds
from engine.profiling.session import make_inputs

path, threads, level, shapes, runs, warmup = json.loads(sys.argv[1])
options = ort.SessionOptions()
if threads:
    options.intra_op_num_threads = threads
options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
feeds, _ = make_inputs(session, shapes, 0, index_bounds(onnx.load(path)))
for _ in range(warmup):
    session.run(None, feeds)
# at least `runs` runs and at least 2 s: a 1 ms model's 50 runs are 50 ms of a noisy machine
times = []
started = time.perf_counter()
while len(times) < runs or time.perf_counter() - started < 2.0:
    t0 = time.perf_counter()
    session.run(None, feeds)
    times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps(statistics.median(times)))
"""

LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


def plain_median_ms(path: str, threads: int, level: str, shapes: dict, runs: int) -> float:
    """Median latency of a fresh default session in a process of its own (at least
    ``runs`` runs and 2 s)."""
    args = json.dumps([path, threads, LEVELS[level], shapes, runs, WARMUP_RUNS])
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, args], capture_output=True, text=True, cwd=root
    )
    if done.returncode:
        raise RuntimeError(f"the plain session failed on {path}: {done.stderr[-1000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def chosen_models(light: list[str], real: list[str], files: list[str]) -> dict[str, tuple]:
    """``{name: (path, input_shapes)}``."""
    found: dict[str, tuple] = {n: (str(LIGHT_DIR / f"light_{n}.onnx"), {}) for n in light}
    if real:
        from bench.real_models import ensure_models, load_manifest

        paths = ensure_models(real)
        meta = load_manifest()
        for name in real:
            shapes = {i["name"]: list(i["shape"]) for i in meta[name]["inputs"]}
            found[name] = (str(paths[name]), shapes)
    found |= {Path(f).stem: (f, {}) for f in files}
    return found


def measure(models: dict[str, tuple], threads: list[int], rounds: int, args) -> dict:
    """Per model and thread setting, ``rounds`` times: the plain process, then the profile."""
    raw: dict[tuple[str, int], dict[str, list]] = {}
    for r in range(rounds):
        for name, (path, shapes) in models.items():
            for t in threads:
                config = NodeProfileConfig(
                    threads=t,
                    window_s=args.window,
                    input_shapes={k: tuple(v) for k, v in shapes.items()},
                )
                entry = raw.setdefault((name, t), {"plain": [], "profiles": [], "load": []})
                entry["load"].append(load_average())
                plain = plain_median_ms(path, t, config.graph_optimization, shapes, args.plain_runs)
                entry["plain"].append(plain)
                entry["profiles"].append(profile_nodes(path, config).to_dict())
                whole = entry["profiles"][-1]["latency_ms"]["median"]
                print(
                    f"round {r + 1} {name} threads={t}: plain {plain:.3f} ms, "
                    f"profiled {whole:.3f} ms, load {load_average()}",
                    file=sys.stderr,
                )
    return {
        name: {f"threads={t}": summary(raw[(name, t)]) for t in threads if (name, t) in raw}
        for name in models
    }


def summary(entry: dict) -> dict:
    profiles = entry["profiles"]
    plain = statistics.median(entry["plain"])
    profiled = statistics.median(p["latency_ms"]["median"] for p in profiles)
    pairs = [repeat_agreement(a, b) for a, b in zip(profiles, profiles[1:], strict=False)]
    over = sum(p["ops_over_100us"] for p in pairs)
    within = sum(p["within_10pct"] for p in pairs)
    return {
        "plain_ms": plain,
        "profiled_ms": profiled,
        "ratio": profiled / plain,
        "within_10pct": abs(profiled / plain - 1) * 100 <= AGREEMENT_PCT,
        "rounds": {
            "plain_ms": [round(v, 3) for v in entry["plain"]],
            "profiled_ms": [round(p["latency_ms"]["median"], 3) for p in profiles],
            "profiler_on_ms": [round(p["profiled_ms"]["median"], 3) for p in profiles],
            "load_avg_1m": entry["load"],
        },
        "repeat": {
            "pairs": len(pairs),
            "ops_over_100us": over,
            "within_10pct": within,
            "share_within_10pct": within / over if over else None,
            "median_diff_pct": [p["median_diff_pct"] for p in pairs],
        },
        "threading": profiles[0]["environment"].get("threading"),
    }


def main() -> None:
    _on_huge_pages()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--light", default="resnet50,squeezenet", help="light zoo models")
    parser.add_argument("--real", default="vit_ts,mobilenet_v2_ts,gpt2_ts", help="real models")
    parser.add_argument("--onnx", default="", help="comma-separated .onnx files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,0", help="0: onnxruntime's default")
    parser.add_argument("--window", type=float, default=NodeProfileConfig().window_s)
    parser.add_argument("--plain-runs", type=int, default=50)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    def names(text: str) -> list[str]:
        return [n for n in text.split(",") if n]

    started = time.perf_counter()
    load_before = load_average()
    models = chosen_models(names(args.light), names(args.real), names(args.onnx))
    threads = [int(t) for t in names(args.threads)]
    results = measure(models, threads, args.rounds, args)
    rows = [row for per_model in results.values() for row in per_model.values()]
    report = {
        "config": {
            "rounds": args.rounds,
            "window_s": args.window,
            "plain_runs": args.plain_runs,
            "threads": threads,
        },
        "models": results,
        "summary": {
            "settings": len(rows),
            "within_10pct": sum(r["within_10pct"] for r in rows),
            "ratio_range": [min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)],
            "repeat_ops_over_100us": sum(r["repeat"]["ops_over_100us"] for r in rows),
            "repeat_within_10pct": sum(r["repeat"]["within_10pct"] for r in rows),
            "seconds": time.perf_counter() - started,
        },
        "environment": environment(0, "extended", load_before),
    }
    text = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
