"""Entry point of the `workbench` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from cli import client
from engine import cli as engine_cli
from engine.accuracy import cli as accuracy_cli
from engine.memory import cli as memory_cli
from engine.partition import cli as partition_cli
from engine.profiling import cli as profiling_cli


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 2 with one line on stderr, as the other failures do."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(engine_cli.EXIT_BAD_INPUT)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="workbench",
        description="Model-optimization workbench: analyze models locally, or drive a server.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    engine_cli.add_commands(subparsers)
    memory_cli.add_commands(subparsers)
    partition_cli.add_commands(subparsers)
    profiling_cli.add_commands(subparsers)
    accuracy_cli.add_commands(subparsers)
    client.add_commands(subparsers)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
