"""The ``multidraft`` command: a thin layer that parses, calls the library and prints.

Each sub-command lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a function
``run(args) -> int``. Library imports happen inside ``run`` so that ``multidraft --help``
stays fast and light.

Errors that come from bad input (``ValueError``), failed solvers (``RuntimeError``),
missing optional dependencies (``ImportError``) or files (``OSError``) are printed as one
line on stderr with exit status 2 -- never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Sub-command modules, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "acceptance",
    "lp",
    "cones",
    "measure",
    "speedup",
    "profile",
    "report",
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="multidraft",
        description="Exact theory, LPs, schemes and real-model measurements for "
        "multi-draft speculative sampling.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"multidraft.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``multidraft`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, RuntimeError, ImportError, OSError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"multidraft {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
