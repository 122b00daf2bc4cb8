"""``workbench profile MODEL --target TARGET [--threads N] --json`` (ARCHITECTURE 5b).

A measured target (``host``) is profiled on this machine with onnxruntime; a modeled one is
predicted by its cost model. The JSON has at least ``target``, ``measured``, ``latency_ms``
and ``ops`` ``[{name, op_type, latency_us}]``; exit codes follow :mod:`engine.cli` (0 ok,
2 bad input with one ``error:`` line on stderr, 1 internal error).
"""

from __future__ import annotations

import argparse
import json

from engine import cli as engine_cli
from engine.errors import EngineError
from engine.graph import AnalysisConfig, analyze_model
from engine.profiling.findings import find_all
from engine.profiling.nodes import NodeProfileConfig, profile_nodes
from engine.profiling.predicted import predict_profile
from engine.targets.catalog import get_target
from engine.targets.schema import TargetProfile

_TOP = 10


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``profile`` on the project's parser."""
    profile = subparsers.add_parser(
        "profile",
        help="per-op latency: measured on this machine, or predicted for a described target",
        description="Profile an ONNX model: measured with onnxruntime on this machine "
        "(target 'host') or predicted by a modeled target's cost model.",
    )
    profile.add_argument("model", help="path to an .onnx file")
    profile.add_argument(
        "--target", required=True, help="a preset name (see 'workbench targets') or a .json file"
    )
    profile.add_argument(
        "--threads", type=_non_negative, default=0, help="intra-op threads (measured; 0: default)"
    )
    profile.add_argument("--unit", help="unit of a modeled target (default: the fastest)")
    profile.add_argument(
        "--window", type=float, default=3.0, metavar="S", help="measurement window in seconds"
    )
    profile.add_argument(
        "--shape",
        action="append",
        default=[],
        type=engine_cli.parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="fix an input's shape (repeatable)",
    )
    profile.add_argument(
        "--tvm-kernels",
        action="store_true",
        help="also build the model with TVM and time every kernel (measured targets)",
    )
    profile.add_argument("--json", action="store_true", help="print one JSON object")
    profile.set_defaults(func=engine_cli.guarded(run_profile))


def run_profile(args: argparse.Namespace) -> int:
    target = get_target(args.target)
    shapes = dict(args.shape)
    if target.kind == "measured":
        output = _measured(args, target, shapes)
    elif target.kind == "modeled":
        output = _predicted(args, target, shapes)
    else:
        raise EngineError(
            f"target '{target.name}' is a remote device; the command line cannot reach it",
            code="usage",
        )
    print(json.dumps(output) if args.json else _summary(output))
    return engine_cli.EXIT_OK


def _measured(args: argparse.Namespace, target: TargetProfile, shapes: dict) -> dict:
    if args.unit not in (None, target.units[0].name):
        target.unit(args.unit)  # raises: no such unit
    config = NodeProfileConfig(threads=args.threads, window_s=args.window, input_shapes=shapes)
    result = profile_nodes(args.model, config).to_dict()
    kernels = None
    if args.tvm_kernels:
        from engine.profiling.tvm_kernels import KernelTimingConfig, profile_tvm_kernels

        ops_us = {o["name"]: o["typical_us"] for o in result["ops"] if o["typical_us"] is not None}
        timing = KernelTimingConfig(threads=args.threads, window_s=args.window, input_shapes=shapes)
        kernels = profile_tvm_kernels(args.model, timing, ops_us).to_dict()
    return {
        "target": target.name,
        "measured": True,
        "unit": result["unit"],
        "latency_ms": result["latency_ms"]["median"],
        "latency": result["latency_ms"],
        "runs": result["runs"],
        "ops": [_op(o, o["latency_us"], o["status"]) for o in result["ops"]],
        "environment": result["environment"],
        "findings": [f.text for f in find_all(profile=result)],
        "warnings": result["warnings"],
        "tvm_kernels": kernels,
    }


def _predicted(args: argparse.Namespace, target: TargetProfile, shapes: dict) -> dict:
    analysis = analyze_model(args.model, AnalysisConfig(input_shapes=shapes))
    predicted = predict_profile(analysis.graph, target).to_dict()
    unit = args.unit or predicted["best_unit"] or target.units[0].name
    target.unit(unit)  # raises: no such unit
    chosen = next(u for u in predicted["units"] if u["name"] == unit)
    return {
        "target": target.name,
        "measured": False,
        "model": predicted["model"],
        "unit": unit,
        "latency_ms": chosen["latency_ms"] if chosen["complete"] else None,
        "units": {u["name"]: u["latency_ms"] for u in predicted["units"]},
        "ops": [_op(o, o["latency_us"][unit], o["status"][unit]) for o in predicted["ops"]],
        "notes": predicted["notes"],
        "findings": [f.text for f in find_all(predicted=predicted)],
    }


def _op(op: dict, latency_us: float | None, status: str) -> dict:
    return {
        "name": op["name"],
        "op_type": op["op_type"],
        "latency_us": latency_us,
        "status": status,
    }


def _summary(output: dict) -> str:
    basis = "measured" if output["measured"] else f"predicted by {output['model']}"
    latency = output["latency_ms"]
    lines = [
        f"target       {output['target']} / {output['unit']} ({basis})",
        f"latency      {'unknown' if latency is None else f'{latency:.3f} ms'}",
    ]
    timed = sorted((o for o in output["ops"] if o["latency_us"]), key=lambda o: -o["latency_us"])
    lines += [
        f"  {o['name']:<32} {o['op_type']:<20} {o['latency_us']:>12.1f} us" for o in timed[:_TOP]
    ]
    lines += [f"finding      {text}" for text in output["findings"]]
    lines += [f"warning      {text}" for text in output.get("warnings", [])]
    kernels = output.get("tvm_kernels")
    if kernels:
        lines.append(
            f"tvm          {kernels['latency_ms']:.3f} ms whole model (onnxruntime "
            f"{kernels['onnxruntime_latency_ms']:.3f} ms), {len(kernels['kernels'])} kernels, "
            f"median of {kernels['runs']} runs"
        )
        timed = sorted(
            (k for k in kernels["kernels"] if k["median_us"]), key=lambda k: -k["median_us"]
        )
        lines += [
            f"  {k['id']:<8} {' + '.join(k['op_types'])[:44]:<44} {k['median_us']:>12.1f} us"
            for k in timed[:_TOP]
        ]
    return "\n".join(lines)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value
