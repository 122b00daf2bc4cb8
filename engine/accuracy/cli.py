"""``workbench accuracy MODEL --candidate NAME|OTHER.onnx [--inputs FILE.npz] --json``.

Prints the :class:`AccuracyReport` (ARCHITECTURE 5b keys ``verdict``, ``outputs``,
``first_divergent_node`` and more). With ``--node-suite`` instead of a model it runs the
candidate on the onnx package's node test cases (``engine.accuracy.node_suite``), each
in a worker process with a time limit, and prints the counts and every failure and skip
with its reason (``--markdown FILE`` writes the per-operator coverage table). Exit codes
as for every subcommand: 0 when the check ran (whatever the verdict: gate on
``verdict`` or the counts), 2 for bad input (model, inputs, unknown candidate), 1 for an
internal error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from engine.accuracy.candidates import available_candidates
from engine.accuracy.check import AccuracyConfig, AccuracyReport, check_accuracy
from engine.accuracy.inputs import DISTRIBUTIONS
from engine.accuracy.metrics import Thresholds
from engine.accuracy.node_suite import Isolation, node_cases, run_node_suite, suite_options
from engine.cli import EXIT_OK, _guarded, parse_shape_arg
from engine.errors import EngineError


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the ``accuracy`` subcommand on ``subparsers``."""
    parser = subparsers.add_parser(
        "accuracy",
        help="compare a candidate build with onnxruntime fp32 and locate the first divergence",
        description="Run the reference (onnxruntime fp32) and a candidate on the same inputs, "
        "compare every output and every shared intermediate tensor, and give a verdict.",
    )
    parser.add_argument(
        "model", nargs="?", help="path to the original .onnx file (not with --node-suite)"
    )
    parser.add_argument(
        "--candidate",
        required=True,
        metavar="NAME|OTHER.onnx",
        help=f"one of {', '.join(available_candidates())}, or an optimized .onnx file",
    )
    parser.add_argument("--inputs", metavar="FILE.npz", help="inputs to feed (else generated)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated inputs")
    parser.add_argument(
        "--distribution", choices=DISTRIBUTIONS, default="normal", help="of generated inputs"
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        type=parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="size of a symbolic input dimension for generated inputs (repeatable)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        type=_parse_threshold,
        metavar="METRIC=VALUE",
        help="override a threshold, e.g. snr_db=30 or max_abs=1e-3 ('none' disables it)",
    )
    parser.add_argument("--no-layers", action="store_true", help="skip layer-wise localisation")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    suite = parser.add_argument_group(
        "node suite", "run the candidate on the onnx package's node test cases instead"
    )
    suite.add_argument(
        "--node-suite", action="store_true", help="run the onnx node test cases, not a model"
    )
    suite.add_argument("--cases", metavar="REGEX", help="only the cases whose name matches")
    suite.add_argument(
        "--timeout-s", type=float, default=120.0, help="limit per case (default: 120)"
    )
    suite.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    suite.add_argument(
        "--in-process",
        action="store_true",
        help="run the cases in this process: faster, but a crash or hang ends the run",
    )
    suite.add_argument("--markdown", metavar="FILE", help="write the operator coverage table")
    parser.set_defaults(func=_guarded(_run_accuracy))


def _run_accuracy(args: argparse.Namespace) -> int:
    if args.node_suite:
        return _run_node_suite(args)
    if args.model is None:
        raise EngineError("give a model, or --node-suite", code="usage")
    try:
        thresholds = Thresholds.from_dict(dict(args.threshold))
    except (TypeError, ValueError) as e:
        raise EngineError(str(e), code="usage") from e
    config = AccuracyConfig(
        inputs=args.inputs,
        seed=args.seed,
        distribution=args.distribution,
        input_shapes=dict(args.shape),
        thresholds=thresholds,
        layers=not args.no_layers,
    )
    report = check_accuracy(args.model, args.candidate, config)
    print(json.dumps(report.to_dict()) if args.json else summary(report))
    return EXIT_OK


def _run_node_suite(args: argparse.Namespace) -> int:
    if args.model is not None or args.candidate.endswith(".onnx"):
        raise EngineError("--node-suite takes a candidate name and no model", code="usage")
    try:
        pattern = re.compile(args.cases or "")
        thresholds = Thresholds.from_dict({**Thresholds.strict().to_dict(), **dict(args.threshold)})
    except (re.error, TypeError, ValueError) as e:
        raise EngineError(str(e), code="usage") from e
    if args.timeout_s <= 0 or args.workers < 1:
        raise EngineError("--timeout-s must be positive and --workers at least 1", code="usage")
    cases = [case for case in node_cases() if pattern.search(case.name)]
    if not cases:
        raise EngineError(f"no node test case matches '{args.cases}'", code="usage")
    report = run_node_suite(
        args.candidate,
        cases,
        thresholds=thresholds,
        options=suite_options(args.candidate, None if args.in_process else args.timeout_s),
        isolation=None if args.in_process else Isolation(args.timeout_s, args.workers),
        progress=lambda fraction, message: print(message, file=sys.stderr),
    )
    if args.markdown:
        Path(args.markdown).write_text(report.markdown())
    print(json.dumps(report.to_dict()) if args.json else report.table())
    return EXIT_OK


def summary(report: AccuracyReport) -> str:
    """A few lines for a terminal: verdict, per-output metrics, first divergent layer."""
    lines = [f"verdict      {report.verdict.upper()}: {report.reason}"]
    for o in report.outputs:
        m = o.metrics
        lines.append(
            f"output       {o.name}: max abs {m.max_abs:.3g}, mean rel {m.mean_rel:.3g}, "
            f"cosine {m.cosine:.6f}, SNR {m.snr_db:.1f} dB"
            + (f", top-1 {m.top1:.2f}, top-5 {m.top5:.2f}" if m.top1 is not None else "")
        )
    if report.first_divergent is not None:
        layer = report.first_divergent.layer
        lines.append(f"first layer  {layer.node} ({layer.op_type}) -> {layer.tensor}")
    lines.append(f"layers       {len(report.layers)} compared")
    kept = report.candidate.get("kept_fp32")
    if kept is not None:
        lines.append(f"kept fp32    {len(kept)} nodes: {', '.join(k['op_type'] for k in kept[:8])}")
    lines += [f"warning      {w}" for w in report.warnings]
    return "\n".join(lines)


def _parse_threshold(text: str) -> tuple[str, float | None]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected METRIC=VALUE, got '{text}'")
    if value.lower() == "none":
        return name, None
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"threshold '{name}' needs a number, got '{value}'"
        ) from None
