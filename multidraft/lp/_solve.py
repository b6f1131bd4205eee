"""Shared solver plumbing for the LPs of :mod:`multidraft.lp`: errors, size guard, silence, cvxpy call.

Every LP here is solved through one gate, :func:`solve`, which
accepts only an ``optimal`` status; callers then re-check the returned point (marginals,
bounds, objective) before they return a number (STYLE.md, "Never trust a solver's word alone").

**Size.** Before anything is built, each LP estimates its variables, constraints and memory
(:func:`lp_size`) and refuses through the one guard of :mod:`multidraft.theory.limits`
(:class:`ProblemTooLargeError`, naming the limit and the faster route).

**Silence.** Solvers print nothing unless asked: every solve runs with the process's file
descriptors 1 and 2 pointed at ``os.devnull`` (:func:`silenced`), because C libraries write
there directly -- HiGHS >= 1.16 prints its banner from C at the first solve, whatever cvxpy's
``verbose`` says -- and Python-level redirection (``contextlib.redirect_stdout``) does not
reach them. ``verbose=True`` on an LP function, or :func:`solver_output` around any code
(the CLI's ``--verbose``), lets the solver's log through instead, on standard error, so that
standard output (``--json``) stays clean either way.

**Progress.** An LP large enough to take more than a few seconds (:data:`SLOW_VARIABLES`)
shows a bar on stderr while the solver runs, unless ``progress=False``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextvars import ContextVar

from multidraft.theory.limits import (
    MAX_MEMORY,
    MAX_VARIABLES,
    ProblemTooLargeError,
    SizeEstimate,
    check_size,
)

__all__ = [
    "SolverError",
    "ProblemTooLargeError",
    "MAX_VARIABLES",
    "CVXPY_BYTES_PER_VARIABLE",
    "SLOW_VARIABLES",
    "FEASIBILITY_TOLERANCE",
    "lp_size",
    "check_solver",
    "solver_output",
    "resolve_verbose",
    "silenced",
    "solving_bar",
    "solve",
    "certify",
]

#: Largest accepted violation of a marginal / bound when a solver's point is re-checked.
FEASIBILITY_TOLERANCE = 1e-6
#: Peak memory per LP variable through cvxpy and HiGHS, measured on the transport LP
#: (about 600 MiB at 505,000 variables, 1.1 GiB at 1.1 million).
CVXPY_BYTES_PER_VARIABLE = 1200
#: LPs with at least this many variables show a progress bar (the transport LP takes about
#: 3 s at 30,000 variables and 20 s at 150,000 on one core of the development machine).
SLOW_VARIABLES = 20_000


class SolverError(RuntimeError):
    """An LP solver did not return a certified optimum (status other than optimal, or a
    point that fails the re-check). The message names the status and the problem size."""


def lp_size(
    what: str,
    variables: int,
    constraints: int,
    alternative: str,
    *,
    max_variables: int = MAX_VARIABLES,
    bytes_per_variable: int = CVXPY_BYTES_PER_VARIABLE,
) -> SizeEstimate:
    """Estimate an LP's size and refuse it (:class:`ProblemTooLargeError`) beyond ``max_variables``
    variables or :data:`~multidraft.theory.limits.MAX_MEMORY` bytes, before anything is built."""
    estimate = SizeEstimate(what, int(variables), int(variables) * bytes_per_variable, int(constraints))
    return check_size(estimate, alternative, max_variables=max_variables, max_memory=MAX_MEMORY)


def check_solver(solver: str) -> str:
    """Return ``solver`` if cvxpy has it installed, else raise ``ValueError`` listing the valid ones."""
    import cvxpy as cp

    installed = cp.installed_solvers()
    if not isinstance(solver, str) or solver.upper() not in installed:
        raise ValueError(f"solver: {solver!r} is not an installed cvxpy solver; choose one of {', '.join(installed)}")
    return solver.upper()


# ---------------------------------------------------------------------------------- silence

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


# --------------------------------------------------------------------------------- progress


@contextlib.contextmanager
def solving_bar(what: str, variables: int, enabled: bool) -> Iterator[None]:
    """A one-step progress bar on stderr while a solver runs, for LPs of at least
    :data:`SLOW_VARIABLES` variables (no-op otherwise, with ``enabled=False``, without tqdm, or
    when stderr is not a terminal).

    It is drawn before the descriptors are silenced, so it stays on screen during the solve,
    and removed afterwards.
    """
    bar = None
    if enabled and variables >= SLOW_VARIABLES:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # progress is a courtesy; the solve does not need it
            tqdm = None
        if tqdm is not None:
            description = f"{what}: solving {variables:,} variables"
            bar = tqdm(
                total=1, desc=description, bar_format="{desc} [{elapsed}]", leave=False, file=sys.stderr, disable=None
            )  # disable=None: no bar unless stderr is a terminal
            bar.refresh()
    try:
        yield
    finally:
        if bar is not None:
            bar.close()


# ------------------------------------------------------------------------------------ solve


def solve(
    problem,
    solver: str,
    what: str,
    variables: int,
    constraints: int,
    verbose: bool | None = None,
    progress: bool = True,
) -> tuple[str, float]:
    """Solve a cvxpy problem; return ``(status, seconds)`` or raise :class:`SolverError`.

    Only the status ``optimal`` is accepted (``optimal_inaccurate``, ``infeasible``, ... and
    solver exceptions all raise), and the message names the status and the problem size.
    Silent unless ``verbose`` (see :func:`resolve_verbose`); a bar while a large problem is
    solved unless ``progress=False`` (:func:`solving_bar`).
    """
    import cvxpy as cp

    verbose = resolve_verbose(verbose)
    start = time.perf_counter()
    try:
        with solving_bar(what, variables, progress), silenced(verbose):
            problem.solve(solver=solver, verbose=verbose)
    except cp.error.SolverError as error:
        raise SolverError(
            f"{what}: solver {solver} failed ({error}) on a problem with {variables:,} variables and "
            f"{constraints:,} constraints"
        ) from None
    seconds = time.perf_counter() - start
    status = str(problem.status)
    if status != cp.OPTIMAL:
        raise SolverError(
            f"{what}: solver {solver} returned status {status!r} (only 'optimal' is accepted) on a "
            f"problem with {variables:,} variables and {constraints:,} constraints"
        )
    return status, seconds


def certify(condition: bool, what: str, defect: str, solver: str, variables: int, constraints: int) -> None:
    """Raise :class:`SolverError` unless a re-check of the solver's point passed."""
    if not condition:
        raise SolverError(
            f"{what}: solver {solver} reported 'optimal' but the re-check failed ({defect}) on a "
            f"problem with {variables:,} variables and {constraints:,} constraints"
        )
