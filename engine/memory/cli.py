"""``workbench memplan``: the memory-plan stage from the command line (ARCHITECTURE 5b).

``add_commands(subparsers)`` registers the subcommand on the project's parser. Exit codes
follow :mod:`engine.cli`: 0 on success, 2 on bad input (one ``error:`` line on stderr,
the hint on a second line), 1 on an internal error.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.cli import EXIT_INTERNAL, EXIT_OK, guarded
from engine.errors import EngineError
from engine.graph import AnalysisConfig, analyze_model
from engine.memory.levels import LevelConfig
from engine.memory.plan import MemoryConfig, MemoryReport, plan_memory
from engine.memory.planners import PLANNERS

_DETAIL_KEYS = ("plans", "tensors", "live_bytes", "order")


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``memplan`` on ``subparsers``."""
    from engine.cli import parse_shape_arg  # here: engine.cli may one day import this module

    memplan = subparsers.add_parser(
        "memplan",
        help="plan the memory of a model's intermediate tensors",
        description=(
            "Plan the memory of a model's tensors with every planner, or the ones named, "
            "against the lower bound (the peak of live bytes); every plan is validated."
        ),
    )
    memplan.add_argument("model", help="path to an .onnx file")
    memplan.add_argument(
        "--planner",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only this planner (repeatable): {', '.join(PLANNERS)}",
    )
    memplan.add_argument(
        "--shape",
        action="append",
        default=[],
        type=parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="fix an input's shape (repeatable)",
    )
    memplan.add_argument("--in-place", action="store_true", help="let elementwise ops reuse")
    memplan.add_argument("--plan-inputs", action="store_true", help="plan graph inputs too")
    memplan.add_argument("--plan-outputs", action="store_true", help="plan graph outputs too")
    memplan.add_argument("--plan-params", action="store_true", help="plan weights too")
    memplan.add_argument(
        "--no-order-search", action="store_true", help="keep the model's execution order"
    )
    memplan.add_argument("--time-limit", type=float, default=1.0, metavar="SECONDS")
    memplan.add_argument("--local-buffer", type=int, metavar="BYTES", help="fit a local buffer")
    memplan.add_argument("--global-buffer", type=int, metavar="BYTES")
    memplan.add_argument(
        "--tvm",
        action="store_true",
        help="also plan the model's TVM build: TVM's static allocation total next to ours",
    )
    memplan.add_argument("--json", action="store_true", help="print one JSON object")
    memplan.add_argument(
        "--plans", action="store_true", help="include per-tensor plans, lifetimes and order"
    )
    memplan.set_defaults(func=guarded(_run_memplan))


def _run_memplan(args: argparse.Namespace) -> int:
    shapes = dict(args.shape)
    if len(shapes) < len(args.shape):
        raise EngineError("--shape given twice for the same input", code="usage")
    levels = None
    if args.local_buffer is not None:
        levels = LevelConfig(args.local_buffer, args.global_buffer)
    config = MemoryConfig(
        planners=tuple(dict.fromkeys(args.planner)),
        plan_inputs=args.plan_inputs,
        plan_outputs=args.plan_outputs,
        plan_params=args.plan_params,
        in_place=args.in_place,
        order_search=not args.no_order_search,
        time_limit_s=args.time_limit,
        levels=levels,
    )
    graph = analyze_model(args.model, AnalysisConfig(input_shapes=shapes)).graph
    report = plan_memory(graph, config)
    result = report.to_dict(plans=args.plans)
    if not args.plans:
        for key in _DETAIL_KEYS:
            result.pop(key, None)
        if result["levels"]:
            result["levels"].pop("placement")
    if args.tvm:
        from engine.fusion.memory import tvm_comparison

        result["tvm"] = tvm_comparison(args.model, shapes, time_limit_s=args.time_limit)
    if args.json:
        print(json.dumps(result))
    else:
        print(_summary(report))
        if args.tvm:
            print(_tvm_summary(result["tvm"]))
    if not report.valid:  # a planner bug: the validator caught it, the user must know
        bad = [f"{r.name}: {r.error}" for r in report.planners.values() if not r.valid]
        print(f"error: invalid plan from {'; '.join(bad)}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


def _tvm_summary(tvm: dict) -> str:
    ratio = "" if tvm["ratio"] is None else f", x{tvm['ratio']:.3f} of TVM's"
    lines = [
        f"tvm          {tvm['tvm_static_bytes'] / 1e6:.3f} MB in {tvm['tvm_storages']} storages "
        f"({tvm['tvm_pass']}, TVM {tvm['tvm_version']}, {tvm['kernels']} kernels)",
        f"ours         {tvm['ours_bytes'] / 1e6:.3f} MB on the same tensors "
        f"({tvm['ours_planner']}{ratio}), lower bound {tvm['lower_bound_bytes'] / 1e6:.3f} MB",
    ]
    if tvm["fallback_nodes"]:
        lines.append(f"note         {tvm['fallback_nodes']} nodes run in onnxruntime: in neither")
    return "\n".join(lines)


def _summary(report: MemoryReport) -> str:
    d = report.to_dict(plans=False)
    lower = d["lower_bound_bytes"]
    lines = [
        f"lower bound  {lower / 1e6:.3f} MB  (peak of live bytes, step {d['peak_step']})",
        f"order        {d['order_method']}, gain {d['order_gain_bytes'] / 1e6:.3f} MB",
    ]
    for name, result in report.planners.items():
        if result.arena_bytes is None:
            lines.append(f"{name:<18} skipped: {result.error}")
            continue
        mark = "*" if name == d["best"] else " "
        lines.append(
            f"{name:<18}{mark} {result.arena_bytes / 1e6:10.3f} MB  x{d['ratios'][name]:.4f}  "
            f"{result.time_s * 1e3:8.1f} ms  {'valid' if result.valid else 'INVALID'}"
        )
    if d["levels"]:
        lv = d["levels"]
        lines.append(
            f"local buffer off-core bytes: {lv['offcore_bytes_before']} per layer, "
            f"{lv['offcore_bytes_after']} grouped"
        )
    return "\n".join(lines)
