"""Every stage on every model of the real-model set, with no option ticked.

Per model and stage: ok, not applicable or failed (with the reason), the time, and the
headline figures, checked against what issue 17 asks of each stage:

- analyze: share of the prepared model's nodes costed (>= 99%), MACs against the
  independent count (FlopCounterMode at the same input shapes; bench/real_models.py) within
  2%;
- profile (host, the default options and window, the uploaded file as a worker gets it):
  the whole-model median against a plain onnxruntime session on the uploaded file in a
  separate process at the same thread count, within 10%, at 1 thread and at all cores
  (``--threads 1,0``); ``--rounds`` profiles per setting, each after a plain session;
- partition (the phone preset, every algorithm, plus the mobile-cloud split over 4G):
  every plan valid or absent with a reason, and no cut priced with an unknown size;
- memory: every plan valid;
- compile and accuracy (host; accuracy's default candidate, fp16): succeed.

Stages run through the same entry points a worker and ``workbench <stage>`` call, on the
same prepared model. Prints a table and writes JSON (``--out``).

    python bench/real_models_bench.py [--models a,b] [--stages analyze,profile,...]
        [--threads 1,0] [--rounds 2] [--out bench/results/real_models_bench.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.profile_threads_bench import plain_median_ms  # noqa: E402
from bench.real_models import MODELS, ensure_models, load_manifest  # noqa: E402
from engine.contract import NotApplicable, StageInputs  # noqa: E402
from engine.errors import EngineError  # noqa: E402
from engine.graph.prepare import prepare_model  # noqa: E402
from engine.profiling.session import environment, load_average  # noqa: E402
from engine.stages import STAGE_ORDER, STAGES, RunOptions  # noqa: E402
from engine.targets.catalog import get_target  # noqa: E402

PHONE = "phone-snapdragon835"
MACS_TOLERANCE_PCT = 2.0
COSTED_MIN_PCT = 99.0
LATENCY_TOLERANCE_PCT = 10.0
PLAIN_RUNS = 200


def run_stage(
    prepared, stage: str, target: str, options: dict, workdir: str | None = None, source=None
):
    """One stage through its entry point, given the uploaded file as a worker and the CLI
    give it; returns (status, seconds, report dict or reason)."""
    run_options = RunOptions.from_dict([stage], {stage: options})
    started = time.perf_counter()
    try:
        report = STAGES[stage].load()(
            prepared,
            get_target(target),
            run_options.options[stage],
            lambda fraction, message: None,
            StageInputs(workdir=workdir, files={"source": str(source)} if source else {}),
        )
    except NotApplicable as e:
        return "not applicable", time.perf_counter() - started, e.message
    except EngineError as e:
        return "failed", time.perf_counter() - started, f"{e.code}: {e.message}"
    except Exception as e:  # noqa: BLE001 - a bench reports every failure and goes on
        trace = traceback.format_exc().strip().splitlines()[-1]
        return "failed", time.perf_counter() - started, f"internal: {type(e).__name__}: {trace}"
    return "ok", time.perf_counter() - started, report.to_dict()


def analyze(prepared, meta: dict) -> dict:
    status, seconds, result = run_stage(prepared, "analyze", "host", {})
    entry = {"status": status, "seconds": round(seconds + prepared.report.seconds, 3)}
    if status != "ok":
        return entry | {"reason": result}
    costed_pct = 100.0 * (1 - len(result["not_costed"]) / max(result["nodes"], 1))
    independent = meta["default_macs"]
    error_pct = 100.0 * abs(result["macs"] - independent) / independent if independent else None
    return entry | {
        "nodes_user": result["preparation"]["nodes_before"],
        "nodes_prepared": result["nodes"],
        "costed_pct": round(costed_pct, 2),
        "macs": result["macs"],
        "macs_independent": independent,
        "macs_error_pct": None if error_pct is None else round(error_pct, 3),
        "bound_shapes": {b["name"]: b["shape"] for b in result["preparation"]["inputs"]},
        "passed": costed_pct >= COSTED_MIN_PCT
        and error_pct is not None
        and error_pct <= MACS_TOLERANCE_PCT,
    }


def profile(prepared, path: Path, threads_list: list[int], rounds: int) -> dict:
    """Per thread setting, ``rounds`` rounds of: a plain session in a process of its own,
    then the profile stage; and a last plain session; judged by :func:`judge_profile`."""
    entry: dict = {"status": "ok", "by_threads": {}}
    shapes = {k: list(v) for k, v in prepared.input_shapes.items()}
    for threads in threads_list:
        options = {"threads": threads} if threads else {}
        profiled, plain, in_loop, seconds = [], [], [], 0.0
        failure = None
        for _ in range(rounds):
            # the user's file in a plain session, as the user would time it, at the
            # profile's graph optimization level and the bound input shapes
            plain.append(plain_median_ms(str(path), threads, "extended", shapes, PLAIN_RUNS))
            status, took, result = run_stage(prepared, "profile", "host", options, source=path)
            if status != "ok":
                failure = {"status": status, "reason": result}
                break
            seconds += took
            profiled.append(result["latency_ms"])
            in_loop.append(result["reference"]["latency_ms"]["median"])
        if failure:
            entry["by_threads"][str(threads)] = failure
            entry["status"] = failure["status"]
            continue
        plain.append(plain_median_ms(str(path), threads, "extended", shapes, PLAIN_RUNS))
        entry["by_threads"][str(threads)] = {
            "seconds": round(seconds / rounds, 2),
            **judge_profile(profiled, plain, in_loop),
            "ops": len(result["ops"]),
            "profiled_model": result.get("profiled_model"),
        }
    entry["passed"] = entry["status"] == "ok" and all(
        t.get("within_10pct") for t in entry["by_threads"].values()
    )
    return entry


def judge_profile(profiled: list[float], plain: list[float], in_loop: list[float]) -> dict:
    """The profiles' whole-model medians against the plain sessions'.

    ``ratio``: the profiles' median over the separate plain sessions' median;
    ``fast_ratio``: the fastest profile over the fastest plain session (the machine's fast
    state); ``in_loop_ratio``: over the plain session each profile timed in its own loop,
    by turns (same moments, same machine speed). A shared 2-core VM runs 2-thread work at
    two speeds, 1.5-1.8x apart, for tens of seconds at a time, and the plain sessions and
    the profiles move together (each profile's in-loop plain session moved with it). So
    where the separate sessions or the profiles spread more than the tolerance among
    themselves, the profile is judged by the in-loop plain session; else by ``ratio``.
    """
    ratio = statistics.median(profiled) / statistics.median(plain)
    in_loop_ratio = statistics.median(profiled) / statistics.median(in_loop)
    spread_pct = {
        "plain": 100.0 * (max(plain) / min(plain) - 1),
        "profiled": 100.0 * (max(profiled) / min(profiled) - 1),
    }
    unsteady = max(spread_pct.values()) > LATENCY_TOLERANCE_PCT
    judged = in_loop_ratio if unsteady else ratio
    return {
        "profiled_ms": [round(v, 4) for v in profiled],
        "plain_ms": [round(v, 4) for v in plain],
        "in_loop_plain_ms": [round(v, 4) for v in in_loop],
        "ratio": round(ratio, 3),
        "fast_ratio": round(min(profiled) / min(plain), 3),
        "in_loop_ratio": round(in_loop_ratio, 3),
        "spread_pct": {k: round(v, 1) for k, v in spread_pct.items()},
        "judged_by": "the in-loop plain session (the machine changed speed between the "
        "separate measurements)"
        if unsteady
        else "the separate plain sessions",
        "within_10pct": abs(judged - 1) * 100 <= LATENCY_TOLERANCE_PCT,
    }


def partition(prepared) -> dict:
    entry: dict = {}
    for label, options in (("phone", {}), ("phone+4g", {"network": "4g"})):
        status, seconds, result = run_stage(
            prepared, "partition", PHONE, options | {"check_execution": False}
        )
        if status != "ok":
            entry[label] = {"status": status, "seconds": round(seconds, 2), "reason": result}
            continue
        plans = {
            name: "valid" if r.get("valid") else f"invalid: {r.get('errors')}"
            for name, r in result["results"].items()
        }
        unknown_priced = [
            c for c in _cuts(result) if c.get("bytes") is None and c.get("upload_ms") is not None
        ]
        entry[label] = {
            "status": "ok",
            "seconds": round(seconds, 2),
            "best": result["best"],
            "best_ms": result["best_makespan_ms"],
            "plans": plans,
            "no_plan": result["failed"],
            "cuts_with_unknown_bytes_priced": len(unknown_priced),
        }
    host_status, _, host_reason = run_stage(prepared, "partition", "host", {})
    entry["host"] = {"status": host_status, "reason": host_reason if host_status != "ok" else None}
    entry["passed"] = (
        all(
            e.get("status") == "ok"
            and all(v == "valid" for v in e["plans"].values())
            and e["cuts_with_unknown_bytes_priced"] == 0
            for k, e in entry.items()
            if k.startswith("phone")
        )
        and entry["host"]["status"] == "not applicable"
    )
    return entry


def _cuts(result: dict) -> list[dict]:
    mobile = result["results"].get("mobile-cloud") or {}
    return (mobile.get("details") or {}).get("curve") or []


def memory(prepared) -> dict:
    status, seconds, result = run_stage(prepared, "memory", "host", {})
    if status != "ok":
        return {"status": status, "seconds": round(seconds, 2), "reason": result, "passed": False}
    tvm = result.get("tvm") or {}
    return {
        "status": "ok",
        "seconds": round(seconds, 2),
        "valid": result["valid"],
        "complete": result["complete"],
        "lower_bound_bytes": result["lower_bound_bytes"],
        "best": result["best"],
        "best_bytes": result["planners"].get(result["best"]),
        "tvm": "failed: " + tvm["failed"] if "failed" in tvm else tvm.get("tvm_static_bytes"),
        "passed": result["valid"] and result["complete"],
    }


def compile_and_check(prepared, workdir: str, source: Path) -> dict:
    entry: dict = {}
    status, seconds, result = run_stage(prepared, "compile", "host", {}, workdir, source)
    if status == "ok":
        entry["compile"] = {
            "status": "ok",
            "seconds": round(seconds, 1),
            "kernels": result["kernel_count"],
            "fallback_nodes": len(result["fallback_nodes"]),
            "latency_ms": result["latency_ms"],
            "onnxruntime_latency_ms": result["onnxruntime_latency_ms"],
            "outputs_match": result["outputs_match"],
        }
    else:
        entry["compile"] = {"status": status, "seconds": round(seconds, 1), "reason": result}
    status, seconds, result = run_stage(prepared, "accuracy", "host", {}, source=source)
    if status == "ok":
        entry["accuracy"] = {
            "status": "ok",
            "seconds": round(seconds, 1),
            "candidate": result["candidate"].get("kind"),
            "verdict": result["verdict"],
            "reason": result["reason"],
        }
    else:
        entry["accuracy"] = {"status": status, "seconds": round(seconds, 1), "reason": result}
    entry["passed"] = entry["compile"]["status"] == "ok" and entry["accuracy"]["status"] == "ok"
    return entry


def bench_model(name: str, path: Path, meta: dict, stages: list[str], args) -> dict:
    import tempfile

    started = time.perf_counter()
    prepared = prepare_model(path)
    row: dict = {
        "family": meta["family"],
        "exporter": meta["exporter"],
        "dynamic": bool(meta["dynamic_axes"]),
        "preparation": {
            "tool": prepared.report.tool,
            "seconds": prepared.report.seconds,
            "nodes": [prepared.report.nodes_before, prepared.report.nodes_after],
            "unknown_shapes": len(prepared.report.unknown_shapes),
        },
    }
    if "analyze" in stages:
        row["analyze"] = analyze(prepared, meta)
    if "profile" in stages:
        row["profile"] = profile(prepared, path, args.threads, args.rounds)
    if "partition" in stages:
        row["partition"] = partition(prepared)
    if "memory" in stages:
        row["memory"] = memory(prepared)
    if "compile" in stages or "accuracy" in stages:
        with tempfile.TemporaryDirectory() as workdir:
            row["compile_accuracy"] = compile_and_check(prepared, workdir, path)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def table(results: dict) -> str:
    head = (
        f"{'model':<18} {'costed':>7} {'MACs err':>8} {'prof/plain 1t':>13} "
        f"{'prof/plain all':>14} {'partition':>9} {'memory':>6} {'compile':>8} {'ratio':>6} "
        f"{'accuracy':>8}"
    )
    lines = [head]
    for name, r in results.items():
        a = r.get("analyze", {})
        p = r.get("profile", {}).get("by_threads", {})
        c = r.get("compile_accuracy", {})
        comp = c.get("compile", {})
        speed = (
            f"{comp['onnxruntime_latency_ms'] / comp['latency_ms']:.2f}"
            if comp.get("latency_ms") and comp.get("onnxruntime_latency_ms")
            else "-"
        )
        lines.append(
            f"{name:<18} {_pct(a.get('costed_pct')):>7} {_pct(a.get('macs_error_pct')):>8} "
            f"{_ratio(p.get('1')):>13} {_ratio(p.get('0')):>14} "
            f"{_ok(r.get('partition')):>9} {_ok(r.get('memory')):>6} "
            f"{comp.get('status', '-'):>8} {speed:>6} "
            f"{c.get('accuracy', {}).get('verdict', c.get('accuracy', {}).get('status', '-')):>8}"
        )
    return "\n".join(lines)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _ratio(entry) -> str:
    if not entry:
        return "-"
    return f"{entry['ratio']:.2f}" if "ratio" in entry else entry.get("status", "-")


def _ok(entry) -> str:
    return "-" if not entry else ("ok" if entry.get("passed") else "FAIL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated (default: all)")
    parser.add_argument("--stages", default=",".join(STAGE_ORDER))
    parser.add_argument("--threads", default="1,0", help="profile thread settings (0: all)")
    parser.add_argument("--rounds", type=int, default=2, help="profiles per thread setting")
    parser.add_argument("--out", help="write the JSON here")
    args = parser.parse_args()
    args.threads = [int(t) for t in args.threads.split(",") if t != ""]
    names = [n for n in args.models.split(",") if n] or list(MODELS)
    stages = [s for s in args.stages.split(",") if s]
    paths = ensure_models(names)
    manifest = load_manifest()
    load_before = load_average()
    results = {}
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        results[name] = bench_model(name, paths[name], manifest[name], stages, args)
        print(table({name: results[name]}).splitlines()[1], file=sys.stderr, flush=True)
    checks = {
        stage: [n for n, r in results.items() if stage in r and not r[stage].get("passed")]
        for stage in ("analyze", "profile", "partition", "memory", "compile_accuracy")
    }
    report = {
        "command": " ".join(sys.argv),
        "environment": environment(0, "extended", load_before),
        "models": results,
        "failing": checks,
        "profile_ratio_median": {
            t: statistics.median(
                r["profile"]["by_threads"][t]["ratio"]
                for r in results.values()
                if "ratio" in r.get("profile", {}).get("by_threads", {}).get(t, {})
            )
            for t in map(str, args.threads)
            if any(
                "ratio" in r.get("profile", {}).get("by_threads", {}).get(t, {})
                for r in results.values()
            )
        },
    }
    print(table(results))
    print(json.dumps(checks))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
