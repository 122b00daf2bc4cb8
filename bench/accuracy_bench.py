"""Accuracy stage benchmark: cost of a check, fp16 error per light model, node-suite counts.

For each bundled light model:

- ``inference_ms``: one reference inference (onnxruntime, warm session, median of 5), the
  peer every check is measured against; ``check_s`` / ``ratio``: a whole
  ``check_accuracy`` (sessions, inputs, layer exposure, comparison; best of 2) against
  the ``ort`` and ``fp16`` candidates, in seconds and as a multiple of that inference;
- ``fp16``: what fp16 gives on the model as shipped (constant 0.02 weight fills, whose
  activations grow beyond fp16's range in most of them) and, with ``--random-weights``,
  on the same topology with He-initialised random weights.

Then the onnx node test cases with each ``--node-suite`` candidate (default: ``ort``,
onnxruntime, in this process; ``tvm``: the TVM build, each case in a worker process
with a time limit, one thread): counts, the reasons grouped, every failure, and the
per-operator coverage table written to ``--markdown-dir`` as
``node_suite_<candidate>.md``. Prints one JSON object.

    python bench/accuracy_bench.py [--models squeezenet,resnet50 | --no-models]
        [--random-weights] [--node-suite ort --node-suite tvm | --no-node-suite]
        [--node-timeout-s 120] [--node-workers 1] [--markdown-dir bench/results]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.accuracy import AccuracyConfig, check_accuracy, generate_inputs  # noqa: E402
from engine.accuracy.candidates import OrtCandidate  # noqa: E402
from engine.accuracy.node_suite import (  # noqa: E402
    Isolation,
    node_cases,
    run_node_suite,
    suite_options,
)
from engine.accuracy.weights import randomize_fills  # noqa: E402

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
RESULTS_DIR = Path(__file__).resolve().parent / "results"
CONFIG = AccuracyConfig(second_opinion="never")


def inference_ms(model: onnx.ModelProto, repeat: int = 5) -> float:
    candidate = OrtCandidate(model)
    feeds = generate_inputs(model).feeds
    candidate.run(feeds)  # session creation and warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        candidate.run(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def timed_check(model: onnx.ModelProto, candidate: str, repeat: int = 2):
    """The report and the best wall time of ``repeat`` whole checks (the machine is shared)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        report = check_accuracy(model, candidate, CONFIG)
        best = min(best, time.perf_counter() - start)
    return report, best


def fp16_summary(report) -> dict:
    output = report.outputs[0].metrics
    first = report.first_divergent
    return {
        "verdict": report.verdict,
        "snr_db": round(output.snr_db, 1),
        "max_abs": output.max_abs,
        "mean_rel": output.mean_rel,
        "cosine": output.cosine,
        "nonfinite_mismatch": output.nonfinite_mismatch,
        "worst_layer_snr_db": round(min(c.metrics.snr_db for c in report.layers), 1),
        "first_divergent_node": report.first_divergent_node,
        "first_divergent_op": first.layer.op_type if first else None,
        # beyond 65504 the fp16 build overflows: the error is real, not the comparison's
        "first_divergent_reference_max_abs": first.metrics.ref_max_abs if first else None,
        "kept_fp32": len(report.candidate["kept_fp32"]),
        "reason": report.reason[:300],
    }


def bench_model(path: Path, random_weights: bool) -> dict:
    model = onnx.load(path)
    ms = inference_ms(model)
    ort_report, ort_s = timed_check(model, "ort")
    fp16_report, fp16_s = timed_check(model, "fp16")
    result = {
        "nodes": len(model.graph.node),
        "layers_compared": len(ort_report.layers),
        "inference_ms": round(ms, 2),
        "check_s": {"ort": round(ort_s, 3), "fp16": round(fp16_s, 3)},
        "ratio": {"ort": round(ort_s * 1e3 / ms, 1), "fp16": round(fp16_s * 1e3 / ms, 1)},
        "ort_verdict": ort_report.verdict,
        "ort_lowest_layer_snr_db": round(min(c.metrics.snr_db for c in ort_report.layers), 1),
        "fp16": fp16_summary(fp16_report),
    }
    if random_weights:
        randomized = randomize_fills(model)
        result["fp16_random_weights"] = fp16_summary(timed_check(randomized, "fp16", 1)[0])
    return result


def bench_node_suite(candidate: str, cases, args) -> dict:
    """One candidate over the node cases: ``ort`` in this process (the control), any
    other in worker processes, so that a crash or a hang costs one case."""
    isolation = None if candidate == "ort" else Isolation(args.node_timeout_s, args.node_workers)
    report = run_node_suite(
        candidate,
        cases,
        options=suite_options(candidate, args.node_timeout_s if isolation else None),
        isolation=isolation,
        progress=lambda fraction, message: print(f"  {message}", file=sys.stderr),
    )
    if args.markdown_dir:
        path = Path(args.markdown_dir) / f"node_suite_{candidate}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        versions = ", ".join(f"{p} {_version(p)}" for p in ("onnx", "onnxruntime", "apache-tvm"))
        path.write_text(
            report.markdown() + f"\nWritten by `python bench/accuracy_bench.py --node-suite "
            f"{candidate}` on {time.strftime('%Y-%m-%d')} with {versions}.\n"
        )
    return {
        "candidate": candidate,
        "isolated": isolation is not None,
        "seconds": report.seconds,
        "source": report.source,
        "counts": report.counts(),
        "fail_reasons": report.reason_counts("fail"),
        "skip_reasons": report.reason_counts("skip"),
        "failures": [r.to_dict() for r in report.results if r.status == "fail"],
        "skips": {r.name: r.reason for r in report.results if r.status == "skip"},
    }


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "(not installed)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated light model names (default: all)")
    parser.add_argument("--no-models", action="store_true", help="no light model, node suite only")
    parser.add_argument("--random-weights", action="store_true", help="also fp16 on random weights")
    parser.add_argument(
        "--node-suite",
        action="append",
        metavar="CANDIDATE",
        help="run the node test cases with this candidate (repeatable; default: ort)",
    )
    parser.add_argument("--no-node-suite", action="store_true")
    parser.add_argument("--node-timeout-s", type=float, default=120.0, help="per isolated case")
    parser.add_argument("--node-workers", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--markdown-dir", default=str(RESULTS_DIR), help="where the coverage tables go ('' : none)"
    )
    args = parser.parse_args()
    paths = [] if args.no_models else sorted(LIGHT_DIR.glob("light_*.onnx"))
    if args.models:
        wanted = {f"light_{m}" for m in args.models.split(",")}
        paths = [p for p in paths if p.stem in wanted]
    results: dict = {"light_models": {}}
    for path in paths:
        print(f"{path.stem} ...", file=sys.stderr)
        results["light_models"][path.stem[len("light_") :]] = bench_model(path, args.random_weights)
    if not args.no_node_suite:
        cases = list(node_cases())
        results["node_suite"] = {}
        for candidate in args.node_suite or ["ort"]:
            print(f"node suite, candidate {candidate} ...", file=sys.stderr)
            results["node_suite"][candidate] = bench_node_suite(candidate, cases, args)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
