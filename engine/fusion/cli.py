"""``workbench compile MODEL --target TARGET [--tune-minutes M] --out DIR --json``.

Registered on the project's parser by ``add_commands(subparsers)``. Exit codes as for
every subcommand: 0 success, 2 bad input (one ``error:`` line on stderr), 1 internal.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli import EXIT_OK, guarded, parse_shape_arg
from engine.errors import EngineError
from engine.fusion.compile import CompileConfig, compile_model
from engine.fusion.rules import RULES

_SUMMARY_KEYS = (
    "kernel_count",
    "tvm_nodes",
    "latency_ms",
    "onnxruntime_latency_ms",
    "speed_vs_onnxruntime",
    "outputs_match",
    "artifact",
)


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compile``."""
    parser = subparsers.add_parser(
        "compile",
        help="fuse and compile a model with TVM, check it against onnxruntime, pack it",
        description="Compile an ONNX model with Apache TVM: fusion plan, optional "
        "MetaSchedule tuning, per-kernel timing, and a runnable artifact.",
    )
    parser.add_argument("model", help="path to an .onnx file")
    parser.add_argument("--target", default="host", help="host (this CPU) or cuda")
    parser.add_argument("--out", required=True, help="directory for the artifact")
    parser.add_argument("--threads", type=int, default=0, help="threads (0: all usable cores)")
    parser.add_argument("--tune-minutes", type=float, default=0.0, help="tuning time budget")
    parser.add_argument("--tune-trials", type=int, default=0, help="tuning trial budget")
    parser.add_argument("--tuning-store", help="directory of tuning records (shared)")
    parser.add_argument(
        "--rules",
        default=",".join(RULES),
        help=f"our fusion rules to try, comma-separated (default: {','.join(RULES)})",
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        type=parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="fix an input's shape (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=guarded(_run_compile))


def _run_compile(args: argparse.Namespace) -> int:
    if args.tune_minutes < 0 or args.tune_trials < 0 or args.threads < 0:
        raise EngineError("budgets and threads must not be negative", code="usage")
    rules = tuple(r for r in args.rules.split(",") if r)
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise EngineError(f"unknown fusion rule(s): {', '.join(unknown)}", code="usage")
    config = CompileConfig(
        out_dir=args.out,
        target=args.target,
        threads=args.threads,
        input_shapes=dict(args.shape),
        rules=rules,
        tune_trials=args.tune_trials,
        tune_minutes=args.tune_minutes,
        tuning_store=args.tuning_store,
    )
    result = compile_model(args.model, config, progress=None if args.json else _print_progress)
    data = result.to_dict()
    if args.json:
        print(json.dumps(data))
    else:
        for key in _SUMMARY_KEYS:
            print(f"{key:<24} {data[key]}")
        print(f"{'fallback_nodes':<24} {len(data['fallback_nodes'])}")
        tuning = data["tuning"]
        if tuning.get("trials") or tuning.get("records_used"):
            print(
                f"{'tuning':<24} {tuning['trials']} trials in {tuning['seconds']} s, "
                f"{tuning['records_used']} stored records applied"
            )
        check = tuning.get("end_to_end")
        if check and check.get("checked"):
            print(
                f"{'whole_model_check':<24} kept {check['kept']} schedules "
                f"(tuned {check['tuned_ms']} ms, default {check['default_ms']} ms)"
            )
    return EXIT_OK


def _print_progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)
