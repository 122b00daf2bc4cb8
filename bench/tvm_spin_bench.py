"""How long TVM's pool workers spin after a parallel kernel: compiled artifacts timed at
several ``TVM_THREAD_POOL_SPIN_COUNT`` values, each run in a fresh process, the values
alternating round by round.

A TVM worker whose task ends calls sched_yield in a loop, up to the spin count, before it
sleeps. TVM's default, 300000, keeps it busy for tens of milliseconds: inside a TVM segment
that saves the wake-up between kernels; after one, it holds a core an onnxruntime segment's
threads need. The artifact's runner (``engine/fusion/standalone.py``) sets the count; this
measures what each value costs TVM-only artifacts and a mix.

    python bench/tvm_spin_bench.py --artifacts DIR,DIR... [--split-of light_squeezenet]
        [--spins default,30000,3000,300] [--rounds 3] [--seconds 2]

``--artifacts``: compiled artifact directories (a ``compile_bench.py --out`` run keeps one
per model under ``<model>/untuned/artifact``). ``--split-of MODEL``: compile a bundled model
with default options and keep the kernel split's build the compile times (TVM kernels, then
onnxruntime's), whether or not that split ships: a mixed artifact to time. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.fusion.standalone import SPIN_COUNT  # noqa: E402
from engine.targets.host import describe_host  # noqa: E402

TVM_DEFAULT = "300000"  # TVM's own count, when the variable is unset (threading_backend.cc)

CHILD = r"""
import importlib.util, json, statistics, sys, time
spec = importlib.util.spec_from_file_location("run", sys.argv[1] + "/run.py")
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)
model = runner.CompiledModel(sys.argv[1])
feeds = model.example_inputs()
for _ in range(5):
    model.run(feeds)
times, started = [], time.perf_counter()
while time.perf_counter() - started < float(sys.argv[2]) or len(times) < 10:
    t0 = time.perf_counter()
    model.run(feeds)
    times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"median_ms": statistics.median(times), "runs": len(times)}))
"""


def time_once(artifact: Path, spin: str, seconds: float) -> dict:
    """The artifact's median over ``seconds`` of runs in a fresh process at ``spin``."""
    # the runner would set its own where it is unset: TVM's default is its absence, so say it
    env = dict(os.environ, **{SPIN_COUNT[0]: TVM_DEFAULT if spin == "default" else spin})
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(artifact), str(seconds)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode:
        return {"failed": done.stderr[-400:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def split_of(model: str, out: Path) -> Path:
    """The kernel split's build of ``model`` as its compile made and timed it."""
    import onnx

    import engine.fusion.kernel_split as kernel_split
    from bench.compile_bench import LIGHT_DIR
    from engine.fusion import CompileConfig, compile_model
    from engine.graph.prepare import prepare_model
    from engine.zoo import ZOO, build

    path = LIGHT_DIR / f"{model}.onnx"
    if model in ZOO:
        path = out / f"{model}.onnx"
        onnx.save(build(model), str(path))
    kept = out / f"{model}-split"
    build_split = kernel_split._build_split

    def keeping(*args, **kwargs):
        made = build_split(*args, **kwargs)
        shutil.copytree(made[0], kept, dirs_exist_ok=True)
        return made

    kernel_split._build_split = keeping
    try:
        prepared = prepare_model(path, cache_dir=out / "prepared")
        config = CompileConfig(
            out_dir=str(out / model), threads=0, input_shapes=prepared.input_shapes
        )
        compile_model(prepared, config, upload=path)
    finally:
        kernel_split._build_split = build_split
    if not (kept / "manifest.json").exists():
        raise SystemExit(f"{model}: the compile built no kernel split")
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifacts", default="", help="comma-separated artifact dirs")
    parser.add_argument("--split-of", help="a bundled model whose kernel split to time too")
    parser.add_argument("--spins", default="default,30000,3000,300")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="of runs a timing")
    parser.add_argument("--out", help="keep the split build here")
    args = parser.parse_args()
    artifacts = [Path(a) for a in args.artifacts.split(",") if a]
    if args.split_of:
        out = Path(args.out or tempfile.mkdtemp(prefix="spin-bench-"))
        artifacts.append(split_of(args.split_of, out))
    spins = args.spins.split(",")
    times: dict[str, dict[str, list]] = {str(a): {s: [] for s in spins} for a in artifacts}
    for _ in range(args.rounds):
        for artifact in artifacts:
            for spin in spins:
                times[str(artifact)][spin].append(time_once(artifact, spin, args.seconds))
    rows = {}
    for artifact in artifacts:
        manifest = json.loads((artifact / "manifest.json").read_text())
        medians = {
            s: [t["median_ms"] for t in times[str(artifact)][s] if "median_ms" in t] for s in spins
        }
        best = {s: min(v) if v else None for s, v in medians.items()}
        base = best[spins[0]]
        rows[str(artifact)] = {
            "segments": [s["backend"] for s in manifest["segments"]],
            "threads": manifest.get("threads"),
            "fastest_round_ms": best,
            "median_round_ms": {s: statistics.median(v) if v else None for s, v in medians.items()},
            "speed_vs_first": {
                s: round(base / b, 3) if base and b else None for s, b in best.items()
            },
            "rounds_ms": {s: [round(x, 4) for x in v] for s, v in medians.items()},
            "failed": [
                t["failed"] for s in spins for t in times[str(artifact)][s] if "failed" in t
            ],
        }
    print(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "method": (
                    f"each artifact run in a fresh process by its own runner (run.py) for "
                    f"{args.seconds} s after 5 warm-up runs, median per process; {args.rounds} "
                    "rounds, the spin counts alternating within each; 'default' is TVM's "
                    f"{TVM_DEFAULT}; the artifact's manifest thread setting"
                ),
                "load_avg_1m": os.getloadavg()[0],
                "host": describe_host(),
                "artifacts": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
