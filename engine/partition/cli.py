"""``workbench partition``: the partition stage from the command line (ARCHITECTURE 5b).

``add_commands(subparsers)`` registers the subcommand on the project's parser. Exit codes
follow :mod:`engine.cli`: 0 on success, 2 on bad input (one ``error:`` line on stderr, the
hint on a second line), 1 on an internal error or an invalid plan.
"""

from __future__ import annotations

import argparse
import json
import sys

import onnx

from engine.cli import EXIT_INTERNAL, EXIT_OK, guarded
from engine.errors import EngineError
from engine.graph import AnalysisConfig, analyze_model
from engine.partition.api import compare_algorithms, partition_model
from engine.partition.registry import PartitionOptions, algorithm_names
from engine.partition.targets import LinkAssumption, problem_for_target
from engine.targets import get_target, load_presets

COMPARE = "compare"
_SCHEDULE_KEYS = ("order", "timeline", "transfers")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``partition`` on ``subparsers``."""
    from engine.cli import parse_shape_arg  # here: engine.cli may one day import this module

    cmd = subparsers.add_parser(
        "partition",
        help="place a model's ops on a target's compute units and schedule them",
        description=(
            "Partition a model across the compute units of a target and schedule it; every "
            "plan is simulated and validated. --algorithm compare runs them all."
        ),
    )
    cmd.add_argument("model", help="path to an .onnx file")
    cmd.add_argument("--target", required=True, help="target preset name or profile .json")
    cmd.add_argument(
        "--algorithm",
        required=True,
        metavar="NAME",
        help=f"{', '.join(algorithm_names())}, single:<unit>, or {COMPARE}",
    )
    cmd.add_argument(
        "--shape",
        action="append",
        default=[],
        type=parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="fix an input's shape (repeatable)",
    )
    cmd.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS")
    cmd.add_argument("--k", type=int, help="window of hope-heuristic (default by unit count)")
    cmd.add_argument("--nt", type=int, default=12, help="exact solver: largest part + 1")
    cmd.add_argument("--workers", type=int, default=1, help="exact solver threads")
    cmd.add_argument("--cloud", help="cloud target for mobile-cloud (default: first with networks)")
    cmd.add_argument("--network", default="4g", help="network for mobile-cloud (default 4g)")
    cmd.add_argument("--objective", choices=("latency", "energy"), default="latency")
    cmd.add_argument(
        "--link-latency-us",
        type=float,
        default=LinkAssumption().latency_us,
        help="assumed cost of a transfer over a link the profile leaves unknown",
    )
    cmd.add_argument("--link-gbps", type=float, help="assumed bandwidth of such a link (GB/s)")
    cmd.add_argument("--out", metavar="DIR", help="write the sub-models and manifest.json here")
    cmd.add_argument("--check", action="store_true", help="run the sub-models, compare outputs")
    cmd.add_argument("--schedule", action="store_true", help="include order, timeline, transfers")
    cmd.add_argument("--json", action="store_true", help="print one JSON object")
    cmd.set_defaults(func=guarded(_run_partition))


def _run_partition(args: argparse.Namespace) -> int:
    shapes = dict(args.shape)
    if len(shapes) < len(args.shape):
        raise EngineError("--shape given twice for the same input", code="usage")
    options = PartitionOptions(
        time_limit_s=args.time_limit,
        nt=args.nt,
        k=args.k,
        workers=args.workers,
        objective=args.objective,
    )
    target = get_target(args.target)
    wants_cloud = args.algorithm in ("mobile-cloud", COMPARE) or args.cloud is not None
    cloud = _cloud_target(args.cloud, target.name) if wants_cloud else None
    graph = analyze_model(args.model, AnalysisConfig(input_shapes=shapes)).graph
    assume = LinkAssumption(args.link_latency_us, args.link_gbps)
    problem = problem_for_target(graph, target, assume=assume)
    if args.algorithm == COMPARE:
        report = compare_algorithms(problem, options=options)
        if cloud is not None:
            mobile = problem_for_target(
                graph, target, cloud=cloud, network=args.network, assume=assume
            )
            report["mobile_cloud"] = partition_model(mobile, "mobile-cloud", options).to_dict()
        for result in report["results"].values():
            _drop_schedule(result, args.schedule)
        report.update(target=target.name, notes=list(problem.notes))
        print(json.dumps(report) if args.json else _comparison_summary(report))
        return EXIT_OK if all(r["valid"] for r in report["results"].values()) else EXIT_INTERNAL
    if args.algorithm == "mobile-cloud":
        problem = problem_for_target(
            graph, target, cloud=cloud, network=args.network, assume=assume
        )
    result = partition_model(problem, args.algorithm, options)
    output = result.to_dict()
    _drop_schedule(output, args.schedule)
    output.update(target=target.name, notes=list(problem.notes))
    if args.out or args.check:
        from engine.partition.export import split_model

        model = onnx.load(args.model)
        subs = split_model(model, output["placement"])
        if args.out:
            output["manifest"] = str(subs.save(args.out))
        if args.check:
            from engine.partition.execute import check_partitioned

            output["execution"] = check_partitioned(model, subs).to_dict()
    print(json.dumps(output) if args.json else _summary(output))
    if not result.valid:  # a bug in an algorithm: the validator caught it
        print(f"error: invalid plan: {'; '.join(result.errors[:3])}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


def _cloud_target(name: str | None, mobile: str):
    if name is not None:
        return get_target(name)
    for profile in load_presets():
        if profile.networks and profile.name != mobile:
            return profile
    raise EngineError("no cloud target with networks found", code="usage", hint="use --cloud")


def _drop_schedule(result: dict, keep: bool) -> None:
    if not keep:
        for key in _SCHEDULE_KEYS:
            result.pop(key, None)
        result.get("details", {}).pop("curve", None)


def _summary(d: dict) -> str:
    single = d["best_single_unit_ms"]
    lines = [
        f"algorithm    {d['algorithm']}  ({d['target']})",
        f"makespan     {d['makespan_ms']:.3f} ms"
        + (f"  ({d['speedup']:.2f}x vs {d['best_single_unit']} {single:.3f} ms)" if single else ""),
        f"solve        {d['solve_s']:.3f} s"
        + (f"  gap {d['gap']:.2%}" if d["gap"] is not None else ""),
        f"valid        {d['valid']}",
        "units        "
        + ", ".join(
            f"{u}: {sum(1 for v in d['placement'].values() if v == u)} ops" for u in d["units"]
        ),
    ]
    if "execution" in d:
        lines.append(f"execution    outputs match: {d['execution']['outputs_match']}")
    lines += [f"note         {n}" for n in d["notes"]]
    return "\n".join(lines)


def _comparison_summary(report: dict) -> str:
    lines = [f"{'algorithm':<16} {'makespan ms':>12} {'speedup':>8} {'solve s':>8} {'gap':>7}"]
    for name, a in report["algorithms"].items():
        speedup = f"{a['speedup']:.2f}x" if a["speedup"] else "-"
        lines.append(
            f"{name:<16} {a['makespan_ms']:>12.3f} {speedup:>8} {a['solve_s']:>8.3f} "
            f"{a['gap_to_bound']:>7.1%}"
        )
    if "mobile_cloud" in report:
        m = report["mobile_cloud"]
        cut = m["details"]["best_cut"]
        lines.append(
            f"{'mobile-cloud':<16} {m['makespan_ms']:>12.3f}   cut at {cut['cut']} "
            f"({m['details']['network']}, {m['details']['mobile_unit']})"
        )
    lines += [f"failed       {n}: {m}" for n, m in report["failed"].items()]
    lines.append(report["verdict"])
    lines += [f"note         {n}" for n in report["notes"]]
    return "\n".join(lines)
