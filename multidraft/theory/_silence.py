"""Solvers' output kept off the process's standard output (C libraries write to its file
descriptors directly).

Every solve runs with file descriptors 1 and 2 pointed at ``os.devnull`` (:func:`silenced`):
HiGHS >= 1.16 prints its banner from C when a process first creates or runs a solver, whatever
the solver's own output options say, and Python-level redirection
(``contextlib.redirect_stdout``) does not reach it. ``verbose=True``, or :func:`solver_output`
around any code (the CLI's ``--verbose``), sends the solver's log to standard error instead, so
that standard output (``--json``) stays clean either way. Used by the LPs
(:mod:`multidraft.lp`) and by the theory's own HiGHS models
(:mod:`~multidraft.theory.verifier._ordered_split`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["solver_output", "resolve_verbose", "silenced"]

_VERBOSE: ContextVar[bool] = ContextVar("multidraft_solver_output", default=False)


@contextlib.contextmanager
def solver_output(verbose: bool = True) -> Iterator[None]:
    """Within this block, LP functions called with ``verbose=None`` (their default) let the
    solver's log through (``verbose=True``) or keep it silent (``verbose=False``).

    >>> from multidraft.lp import solver_output, transport_lp
    >>> from multidraft.theory import IID
    >>> with solver_output(False):
    ...     round(transport_lp([0.5, 0.5], IID([0.5, 0.5], k=1)).acceptance, 9)
    1.0
    """
    token = _VERBOSE.set(bool(verbose))
    try:
        yield
    finally:
        _VERBOSE.reset(token)


def resolve_verbose(verbose: bool | None) -> bool:
    """``verbose`` itself, or the setting of the enclosing :func:`solver_output` when None."""
    return _VERBOSE.get() if verbose is None else bool(verbose)


@functools.cache
def _c_library():
    """The process's C library (loaded once: about 0.1 ms a time), or None where there is none."""
    try:
        return ctypes.CDLL(None)
    except (OSError, TypeError):  # e.g. Windows: no C library to load by this name
        return None


def _flush_c_streams() -> None:
    """Flush the C library's stdio buffers (a solver's ``printf`` may still sit there)."""
    library = _c_library()
    if library is not None and hasattr(library, "fflush"):
        library.fflush(None)


@contextlib.contextmanager
def silenced(verbose: bool = False) -> Iterator[None]:
    """Discard everything written to file descriptors 1 and 2 inside the block; with
    ``verbose``, send what is written to descriptor 1 to descriptor 2 instead, so a solver's
    log reaches the terminal while standard output keeps only the program's own output.

    Python's buffers are flushed before, the C library's before the descriptors are restored,
    so no byte escapes either way. Python warnings raised inside are recorded and shown after
    the descriptors are restored (an ``error`` filter still raises at once).
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.flush()
    saved = (os.dup(1), os.dup(2))
    sink = os.dup(2) if verbose else os.open(os.devnull, os.O_WRONLY)
    try:
        with warnings.catch_warnings(record=True) as caught:
            os.dup2(sink, 1)
            if not verbose:
                os.dup2(sink, 2)
            try:
                yield
            finally:
                _flush_c_streams()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for descriptor in (*saved, sink):
            os.close(descriptor)
    for warning in caught:
        warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno, warning.file, warning.line)
