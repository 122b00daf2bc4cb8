"""``workbench accuracy MODEL --candidate NAME|OTHER.onnx [--inputs FILE.npz] --json``.

Prints the :class:`AccuracyReport` (ARCHITECTURE 5b keys ``verdict``, ``outputs``,
``first_divergent_node`` and more). Exit codes as for every subcommand: 0 when the
check ran (whatever the verdict: gate on ``verdict``), 2 for bad input (model, inputs,
unknown candidate), 1 for an internal error.
"""

from __future__ import annotations

import argparse
import json

from engine.accuracy.candidates import available_candidates
from engine.accuracy.check import AccuracyConfig, AccuracyReport, check_accuracy
from engine.accuracy.inputs import DISTRIBUTIONS
from engine.accuracy.metrics import Thresholds
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
    parser.add_argument("model", help="path to the original .onnx file")
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
    parser.set_defaults(func=_guarded(_run_accuracy))


def _run_accuracy(args: argparse.Namespace) -> int:
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
