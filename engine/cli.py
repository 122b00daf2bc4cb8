"""The engine's part of the ``workbench`` console script.

``add_commands(subparsers)`` registers the engine subcommands on the project's parser;
each sets ``func``, a handler ``func(args) -> int`` that never raises: it returns 0 on
success, 2 on bad input (one ``error:`` line on stderr, the hint on a second line) and 1
on an internal error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from engine.errors import EngineError
from engine.graph import AnalysisConfig, ModelAnalysis, analyze_model
from engine.graph.shapes import format_shape

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2
_TOP_OPS = 8


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the engine subcommands (``analyze``) on ``subparsers``."""
    analyze = subparsers.add_parser(
        "analyze",
        help="validate a model and count its ops, params, MACs and bytes",
        description="Validate an ONNX model and report its ops, parameters, MACs and bytes.",
    )
    analyze.add_argument("model", help="path to an .onnx file")
    analyze.add_argument(
        "--shape",
        action="append",
        default=[],
        type=parse_shape_arg,
        metavar="NAME=1x3x224x224",
        help="fix an input's shape (repeatable)",
    )
    analyze.add_argument(
        "--simplify",
        action="store_true",
        help="fold constants and shape arithmetic first (onnxslim) and analyze the result",
    )
    analyze.add_argument("--json", action="store_true", help="print one JSON object")
    analyze.add_argument("--nodes", action="store_true", help="include the per-node list")
    analyze.set_defaults(func=guarded(_run_analyze))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the engine subcommands standalone; returns the exit code."""
    parser = _Parser(prog="workbench", description="Model-optimization workbench engine.")
    add_commands(parser.add_subparsers(dest="command", required=True, parser_class=_Parser))
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print_error(str(e))
        return EXIT_BAD_INPUT
    return args.func(args)


def parse_shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``NAME=1x3x224x224`` into ``("NAME", (1, 3, 224, 224))``."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name or not dims:
        raise argparse.ArgumentTypeError(f"expected NAME=1x3x224x224, got '{text}'")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"dimensions of '{name}' must be positive integers separated by 'x', got '{dims}'"
        ) from None
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"dimensions of '{name}' must be positive, got '{dims}'")
    return name, shape


def _run_analyze(args: argparse.Namespace) -> int:
    shapes = dict(args.shape)
    if len(shapes) < len(args.shape):
        raise EngineError("--shape given twice for the same input", code="usage")
    config = AnalysisConfig(input_shapes=shapes, simplify=args.simplify)
    analysis = analyze_model(args.model, config)
    if args.json:
        print(json.dumps(analysis.to_dict(nodes=args.nodes)))
    else:
        print(_summary(analysis, nodes=args.nodes))
    return EXIT_OK


def _summary(a: ModelAnalysis, *, nodes: bool) -> str:
    lines = [
        f"model        {a.header.graph_name or '-'}  ({a.header.producer or 'unknown producer'}, "
        f"IR {a.header.ir_version}, opsets {a.header.opsets})",
        f"nodes        {a.nodes}",
        f"params       {a.params / 1e6:.3f} M  ({a.param_bytes / 1e6:.2f} MB)",
        f"MACs         {a.macs / 1e9:.3f} G",
        f"FLOPs        {a.flops / 1e9:.3f} G",
        f"activations  {a.activation_bytes / 1e6:.2f} MB",
    ]
    lines += [f"input        {s.name}: {format_shape(s.shape)} {s.dtype}" for s in a.inputs]
    lines += [f"output       {s.name}: {format_shape(s.shape)} {s.dtype}" for s in a.outputs]
    top = ", ".join(f"{op} {n}" for op, n in list(a.ops.items())[:_TOP_OPS])
    lines.append(f"ops          {top}{', ...' if len(a.ops) > _TOP_OPS else ''}")
    lines.append(f"not costed   {len(a.not_costed)}")
    if a.structure is not None:
        resolutions = [
            format_shape(s.resolution) if s.resolution else "-" for s in a.structure.stages
        ]
        lines.append(f"stages       {len(a.structure.stages)}  ({', '.join(resolutions)})")
        lines.append(f"blocks       {len(a.structure.blocks)}  (cut at MaxPool / Concat)")
        lines.append(f"chains       {len(a.structure.chains)}")
    if a.simplification is not None:
        s = a.simplification
        done = f"{s.nodes_before} -> {s.nodes_after} nodes" if s.applied else "failed"
        lines.append(f"simplified   {done} in {s.seconds:.2f} s ({s.tool})")
    lines += [f"warning      {w}" for w in a.warnings]
    if nodes:
        lines.append("")
        lines += [
            f"{n.name:<32} {n.op_type:<20} {(n.cost.macs if n.cost else '-')!s:>14}"
            for n in a.node_list
        ]
    return "\n".join(lines)


def guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a subcommand: engine errors exit 2 with their message and hint, anything
    unexpected exits 1; every engine command line uses it."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except EngineError as e:
            print_error(e.message, e.hint)
            return EXIT_BAD_INPUT
        except Exception as e:  # noqa: BLE001 - the CLI's last line of defence
            print_error(f"internal error: {type(e).__name__}: {e}")
            return EXIT_INTERNAL

    return run


def print_error(message: str, hint: str | None = None) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    if hint:
        print(hint, file=sys.stderr)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Reports usage errors as one line instead of usage text plus ``SystemExit``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageError(message)


if __name__ == "__main__":
    sys.exit(main())


_guarded = guarded  # the old name, until every command line imports ``guarded``
