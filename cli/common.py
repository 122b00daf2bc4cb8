"""What every ``workbench`` command shares: exit codes, error printing, shape arguments."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from engine.errors import EngineError

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


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


def guarded(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: engine errors exit 2 with their message and hint, anything
    unexpected exits 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except EngineError as e:
            print_error(e.message, e.hint)
            return EXIT_BAD_INPUT
        except Exception as e:  # noqa: BLE001 - the command line's last line of defence
            print_error(f"internal error: {type(e).__name__}: {e}")
            return EXIT_INTERNAL

    return run


def print_error(message: str, hint: str | None = None) -> None:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    if hint:
        print(hint, file=sys.stderr)
