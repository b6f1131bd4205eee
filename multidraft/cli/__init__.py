"""The ``multidraft`` command: a thin layer that parses, calls the library and prints.

Each sub-command lives in its own module of this package and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a function
``run(args) -> int``. Library imports happen inside ``run`` so that ``multidraft --help``
stays fast and light.

The contract a script can rely on:

* ``--json`` prints exactly one JSON document on stdout and nothing else; solvers print
  nothing unless ``--verbose`` (their log then goes to the terminal as they write it);
  progress bars and notes go to stderr.
* Bad input -- a bad value (``ValueError``), a failed solver (``RuntimeError``), a missing
  optional dependency (``ImportError``), a file problem (``OSError``) or an unparsable option --
  is one line on stderr, ``multidraft COMMAND: error: ...``, with exit status 2, never a
  traceback. An interrupt (Ctrl-C) exits with status 130 and one line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from multidraft import __version__

#: Sub-command modules, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "acceptance",
    "lp",
    "cones",
    "measure",
    "speedup",
    "budget",
    "profile",
    "report",
)

#: Largest excess beyond [0, 1] of a computed probability that is taken for rounding and
#: printed clipped (:func:`shown_probability`).
ROUNDING = 1e-12

#: Advice in library messages that has different words on the command line.
_CLI_WORDING = (
    ("; rescale it with as_distribution(..., normalize=True) if that error is expected", "; give entries that sum to 1 (e.g. fractions such as 1/3)"),
    ("; rescale it with as_exact_distribution(..., normalize=True) if that is expected", "; give entries that sum to 1"),
)


class LazyHelp:
    """A help text computed only when help is shown (e.g. the scheme names, which need the
    scheme registry and therefore numpy; every other use of the parser skips that import)."""

    def __init__(self, text: Callable[[], str]) -> None:
        self.text = text


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with a one-line error and help texts resolved on demand."""

    def error(self, message: str):  # type: ignore[override]
        """Print ``PROG: error: MESSAGE (see PROG --help)`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        for action in self._actions:
            if isinstance(action.help, LazyHelp):
                action.help = action.help.text()
        return super().format_help()


def shown_probability(value: float) -> float:
    """A computed probability as printed: clipped to [0, 1] where it lies outside by rounding
    only (at most :data:`ROUNDING`, e.g. ``1.0000000000000002``); a larger excess is printed as
    it is, since hiding it would hide an error.

    >>> shown_probability(1.0000000000000002), shown_probability(-1e-17), shown_probability(0.25)
    (1.0, 0.0, 0.25)
    """
    value = float(value)
    if 1.0 < value <= 1.0 + ROUNDING:
        return 1.0
    if -ROUNDING <= value < 0.0:
        return 0.0
    return value


def add_verbose(parser: argparse.ArgumentParser) -> None:
    """The ``--verbose`` flag of the sub-commands that run a solver."""
    parser.add_argument("--verbose", action="store_true", help="let the LP solver print its log (silent by default)")


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every available sub-command."""
    parser = Parser(
        prog="multidraft",
        description="Exact theory, LPs, schemes and real-model measurements for "
        "multi-draft speculative sampling.",
    )
    parser.add_argument("--version", action="version", version=f"multidraft {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(f"multidraft.cli.{name}").register(subparsers)
    return parser


def _one_line(error: BaseException) -> str:
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    for api, cli in _CLI_WORDING:
        message = message.replace(api, cli)
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``multidraft`` console script; returns the exit status. The process
    keeps freed memory for reuse (:func:`multidraft.retain_freed_memory`: no page faults of fresh
    rows at every node of a walk)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from multidraft._allocator import retain_freed_memory

    retain_freed_memory()
    try:
        solvers = contextlib.nullcontext()
        if getattr(args, "verbose", False):
            from multidraft.lp import solver_output

            solvers = solver_output(True)
        with solvers:
            return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader of a pipe stopped early (| head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (ValueError, RuntimeError, ImportError, OSError) as error:
        print(f"multidraft {args.command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"multidraft {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
