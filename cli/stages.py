"""The stage commands of ``workbench``: ``analyze``, ``profile``, ``partition``, ``memplan``,
``compile`` and ``accuracy`` (ARCHITECTURE 5b).

Each command prepares the model exactly as a worker does (the same prepared-model cache
format, under ``--cache-dir``), builds the stage's options with the engine's own
``Options.from_dict`` (so a default or a limit is written only there: every option field
is a flag named after it, e.g. ``--window-s``, ``--no-order-search``), calls the stage's
entry point and prints its report: with ``--json`` the same JSON the web stores for the
stage. Exit codes: 0 success, 2 bad input or usage (one ``error:`` line on stderr, the hint
on a second), 1 an internal error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from cli import summaries
from cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, guarded, parse_shape_arg
from engine.contract import NotApplicable, StageInputs
from engine.errors import EngineError
from engine.options import OptionsError, OptionSpec
from engine.stages import STAGES, RunOptions
from engine.targets.schema import ProfileError, TargetProfile, validate_profile

COMMANDS = {
    "analyze": "analyze",
    "profile": "profile",
    "partition": "partition",
    "memplan": "memory",
    "compile": "compile",
    "accuracy": "accuracy",
}
"""Command name -> stage name."""
_HELP = {
    "analyze": "validate a model, prepare it and count its ops, params, MACs and bytes",
    "profile": "per-op latency: measured on this machine, or predicted for a modeled target",
    "partition": "place a model's ops on a target's compute units and schedule them",
    "memplan": "plan the memory of a model's intermediate tensors",
    "compile": "fuse and compile a model with TVM, check it against onnxruntime, pack it",
    "accuracy": "compare a candidate build with onnxruntime fp32, find the first divergence",
}
_DEFAULT_TARGET = {"analyze": None, "profile": None, "partition": None, "memory": "host"}
_SEEN = "__seen"


def default_cache_dir() -> Path:
    """Where prepared models are kept between commands."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("WORKBENCH_PREPARED_CACHE", Path(base) / "workbench" / "prepared"))


def default_build_cache_dir() -> Path:
    """Where compiles keep built segments between commands."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("WORKBENCH_BUILD_CACHE", Path(base) / "workbench" / "builds"))


def _build_cache(args) -> str | None:
    given = getattr(args, "build_cache", None)
    if args is None or not hasattr(args, "build_cache") or given == "none":
        return None
    return str(given or default_build_cache_dir())


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register every stage command on the ``workbench`` parser."""
    for command, stage in COMMANDS.items():
        spec = STAGES[stage]
        parser = subparsers.add_parser(
            command, help=_HELP[command], description=f"{spec.label}: {spec.description}"
        )
        parser.add_argument("model", nargs="?", help="path to an .onnx file")
        parser.add_argument(
            "--target",
            default="host",
            help="a target preset (see 'workbench targets'), a profile .json, or 'remote' "
            "with --tracker and --key (default: host)",
        )
        parser.add_argument(
            "--tracker",
            metavar="HOST:PORT",
            help="the TVM RPC tracker of a remote device (with --target remote and --key)",
        )
        parser.add_argument(
            "--key", metavar="KEY", help="the key the remote device registered under"
        )
        parser.add_argument(
            "--shape",
            action="append",
            default=[],
            type=parse_shape_arg,
            metavar="NAME=1x3x224x224",
            help="fix an input's shape (repeatable; not given: 1 for a batch, 128 elsewhere)",
        )
        group = parser.add_argument_group(f"{stage} options (the engine's, with its defaults)")
        for option in spec.options.spec():
            if not option.server_id:  # ids of stored objects: the CLI names files instead
                _add_option(group, option)
        EXTRA.get(command, lambda p: None)(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--cache-dir",
            default=None,
            help=f"prepared-model cache (default {default_cache_dir()}; 'none' to keep none)",
        )
        parser.set_defaults(func=guarded(_runner(command, stage)))


def _add_option(group, option: OptionSpec) -> None:
    flag = "--" + option.name.replace("_", "-")
    # argparse %-formats help texts: a literal percent sign in an engine's help is escaped
    help_text = option.help.replace("%", "%%")
    common = {"dest": f"opt_{option.name}", "default": argparse.SUPPRESS, "help": help_text}
    if option.kind == "bool":
        group.add_argument(flag, action=argparse.BooleanOptionalAction, **common)
    elif option.kind in ("int", "optional_int"):
        group.add_argument(flag, type=_number(int), metavar="N", **common)
    elif option.kind in ("float", "optional_float"):
        group.add_argument(flag, type=_number(float), metavar="X", **common)
    elif option.kind in ("str", "optional_str"):
        # No argparse choices: Options.from_dict says what is wrong, as the API does.
        group.add_argument(flag, metavar=_choices(option), **common)
    elif option.kind == "str_list":
        group.add_argument(flag, type=_names, metavar=_choices(option, ","), **common)
    elif option.kind == "number_map":
        group.add_argument(flag, type=_number_map, metavar="NAME=X,...", **common)


def _runner(command: str, stage: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        values = {
            key.removeprefix("opt_"): value
            for key, value in vars(args).items()
            if key.startswith("opt_")
        }
        if command == "accuracy" and args.node_suite:
            from cli.node_suite import run_node_suite

            return run_node_suite(args, values)
        before = PREPARE.get(command)
        if before is not None:
            before(args, values)
        if args.model is None:
            raise EngineError("give the path of an .onnx model", code="usage")
        shapes = dict(args.shape)
        if len(shapes) < len(args.shape):
            raise EngineError("--shape given twice for the same input", code="usage")
        try:
            options = RunOptions.from_dict([stage], {"input_shapes": shapes, stage: values})
        except OptionsError as e:
            raise EngineError(e.message, code="usage") from e
        target = _remote_target(args) or args.target
        report = run_stage(args.model, stage, options, target=target, args=args)
        output = report.to_dict()
        after = FINISH.get(command)
        if after is not None:
            output = after(args, output)
        print(json.dumps(output) if args.json else summaries.SUMMARY[command](output))
        return _exit_code(command, output)

    return run


def _remote_target(args: argparse.Namespace) -> TargetProfile | None:
    """``--target remote --tracker HOST:PORT --key KEY``: a remote target for one command."""
    given = [flag for flag in ("tracker", "key") if getattr(args, flag, None)]
    if args.target != "remote":
        if given:
            raise EngineError(
                f"--{given[0]} is for a remote device: add --target remote", code="usage"
            )
        return None
    if len(given) < 2:
        raise EngineError("--target remote needs --tracker HOST:PORT and --key KEY", code="usage")
    document = {
        "name": f"remote:{args.key}",
        "kind": "remote",
        "description": f"device '{args.key}' behind the RPC tracker {args.tracker}",
        "units": [{"name": "cpu", "kind": "cpu"}],
        "remote": {"tracker": args.tracker, "key": args.key},
    }
    try:
        return validate_profile(document)
    except ProfileError as e:
        raise EngineError(e.message, code="usage") from e


def run_stage(
    model: str, stage: str, options: RunOptions, *, target: str | TargetProfile, args=None
):
    """Prepare ``model`` and run one stage on it, as a worker does."""
    from engine.graph.prepare import prepare_model
    from engine.targets.catalog import get_target

    cache = getattr(args, "cache_dir", None)
    cache_dir = None if cache == "none" else Path(cache or default_cache_dir())
    prepared = prepare_model(model, options.prepare, cache_dir=cache_dir)
    profile = target if isinstance(target, TargetProfile) else get_target(target)
    inputs = StageInputs(
        files=_files(model, args),
        workdir=getattr(args, "out", None),
        tuning_store=getattr(args, "tuning_store", None),
        build_cache=_build_cache(args),
    )
    # Progress lines for a person at a terminal; a pipe or a log gets only the result.
    shown = args is not None and not args.json and sys.stderr.isatty()
    progress = _progress if shown else _quiet
    try:
        return STAGES[stage].load()(prepared, profile, options.options[stage], progress, inputs)
    except NotApplicable as e:
        raise EngineError(f"not applicable: {e.message}", code="not_applicable", hint=e.hint) from e


def _files(model: str, args) -> dict[str, str]:
    files = {"source": model}
    for name in ("inputs", "other_model"):
        value = getattr(args, f"file_{name}", None)
        if value:
            files[name] = value
    return files


def _exit_code(command: str, output: dict) -> int:
    if command == "memplan" and not output.get("valid", True):
        bad = [f"{n}: {m}" for n, m in output.get("errors", {}).items()]
        print(f"error: invalid plan from {'; '.join(bad)}", file=sys.stderr)
        return EXIT_INTERNAL
    if command == "partition" and output.get("invalid"):  # a bug the validator caught
        bad = "; ".join(f"{n}: {output['failed'].get(n)}" for n in output["invalid"])
        print(f"error: invalid plan from {bad}", file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK


# --- command-specific flags: files and views, not options -----------------------------


def _partition_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--algorithm",
        metavar="NAME",
        help="one algorithm (its plan's keys are printed at the top level), or 'compare' "
        "(default: every algorithm that applies)",
    )
    parser.add_argument("--out", metavar="DIR", help="write the best plan's sub-models here")
    parser.add_argument("--schedule", action="store_true", help="include order and timeline")


def _partition_prepare(args: argparse.Namespace, values: dict) -> None:
    if args.algorithm and args.algorithm != "compare":
        if "algorithms" in values:
            raise EngineError("give --algorithm or --algorithms, not both", code="usage")
        values["algorithms"] = [args.algorithm]
        if args.algorithm == "mobile-cloud" and "network" not in values:
            values["network"] = "4g"
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)


def _partition_finish(args: argparse.Namespace, output: dict) -> dict:
    results = output.get("results", {})
    if not args.schedule:
        for result in results.values():
            for key in ("order", "timeline", "transfers"):
                result.pop(key, None)
            result.get("details", {}).pop("curve", None)
    if args.algorithm and args.algorithm != "compare":
        chosen = results.get(args.algorithm)
        if chosen is None:
            reason = output.get("failed", {}).get(args.algorithm, "no plan")
            raise EngineError(f"{args.algorithm}: {reason}", code="no_plan")
        output = {**output, **chosen}
    return output


def _compile_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the artifact")
    parser.add_argument("--tuning-store", metavar="DIR", help="directory of tuning records")
    parser.add_argument(
        "--build-cache",
        metavar="DIR",
        default=None,
        help=f"built segments kept for later compiles of the same segments (default "
        f"{default_build_cache_dir()}; 'none' to build every segment)",
    )


def _compile_prepare(args: argparse.Namespace, values: dict) -> None:
    Path(args.out).mkdir(parents=True, exist_ok=True)


def _accuracy_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--inputs", dest="file_inputs", metavar="FILE.npz", help="inputs to feed (else generated)"
    )
    parser.add_argument(
        "--other",
        dest="file_other_model",
        metavar="OTHER.onnx",
        help="the other model (candidate 'other'); '--candidate OTHER.onnx' says the same",
    )
    suite = parser.add_argument_group(
        "node suite", "run the candidate on the onnx package's node test cases instead"
    )
    suite.add_argument("--node-suite", action="store_true", help="run the node test cases")
    suite.add_argument("--cases", metavar="REGEX", help="only the cases whose name matches")
    suite.add_argument("--timeout-s", type=float, default=60.0, help="per case (default 60 s)")
    suite.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    suite.add_argument("--in-process", action="store_true", help="no isolation (debugging)")
    suite.add_argument("--markdown", metavar="FILE", help="write the operator coverage table")


def _accuracy_prepare(args: argparse.Namespace, values: dict) -> None:
    candidate = values.get("candidate")
    if isinstance(candidate, str) and candidate.endswith(".onnx"):
        values["candidate"] = "other"
        args.file_other_model = candidate
    if args.file_other_model:
        values["candidate"] = "other"
        values["other_model"] = 0  # the command line's id of "the file given with --other"


def _analyze_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", action="store_true", help="include the per-node list")


def _analyze_finish(args: argparse.Namespace, output: dict) -> dict:
    if not args.nodes:
        output.pop("node_list", None)
    return output


EXTRA = {
    "analyze": _analyze_flags,
    "partition": _partition_flags,
    "compile": _compile_flags,
    "accuracy": _accuracy_flags,
}
PREPARE = {
    "partition": _partition_prepare,
    "compile": _compile_prepare,
    "accuracy": _accuracy_prepare,
}
FINISH = {"analyze": _analyze_finish, "partition": _partition_finish}


# --- parsing helpers ------------------------------------------------------------------


def _number(kind):
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {noun}, got '{text}'") from None

    return parse


def _names(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _number_map(text: str) -> dict[str, float | None]:
    values: dict[str, float | None] = {}
    for item in _names(text):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{item}'")
        if value.lower() in ("none", "off", "null"):
            values[name] = None
            continue
        try:
            values[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: expected a number, got '{value}'") from None
    return values


def _choices(option: OptionSpec, sep: str = "|") -> str | None:
    return sep.join(option.choices) if option.choices else None


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


def _quiet(fraction: float, message: str) -> None:
    pass


__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "add_commands", "run_stage"]
