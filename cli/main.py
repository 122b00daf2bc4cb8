"""Entry point of the `workbench` console script: the stage commands (on this machine,
through the engine's entry points) and the REST client (against a server)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from cli import client, stages
from cli.common import EXIT_BAD_INPUT
from engine.targets.catalog import load_presets


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 2 with one line on stderr, as the other failures do."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _targets(args) -> int:
    """ARCHITECTURE 5b: the presets this installation knows, as JSON or a table."""
    targets = [
        {"name": p.name, "kind": p.kind, "units": [u.name for u in p.units]} for p in load_presets()
    ]
    if args.json:
        print(json.dumps(targets))
    else:
        for t in targets:
            print(f"{t['name']:<28} {t['kind']:<9} {', '.join(t['units'])}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="workbench",
        description="Model-optimization workbench: run stages locally, or drive a server.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    targets = subparsers.add_parser("targets", help="list the target presets")
    targets.add_argument("--json", action="store_true", help="print one JSON array")
    targets.set_defaults(func=_targets)
    stages.add_commands(subparsers)
    client.add_commands(subparsers)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # usage errors (exit 2) and --help (0) return their code
        return e.code if isinstance(e.code, int) else EXIT_BAD_INPUT
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
