"""Shared solver plumbing for the LPs of :mod:`multidraft.lp`: errors, size guard, silence,
solver routes, cvxpy call and certification.

Every LP here is solved through one gate, :func:`solve`, which
accepts only an ``optimal`` status; callers then re-check the returned point (marginals,
bounds, objective) before they return a number (STYLE.md, "Never trust a solver's word alone").

**Certified optima.** The transport, importance and pair LPs compute the optimal acceptance
P*, which :func:`multidraft.theory.optimal_acceptance` also computes as a min-cut, in closed
form, with a certificate set T. :func:`solve_certified` tries the solver's
:data:`ROUTES` in turn and returns the first point whose value (re-checked, then made exactly
feasible by the caller, so it is a true lower bound) lies within :data:`CERTIFIED_GAP` of that
min-cut; it records the route that answered and the gap (:class:`Certification`). A value above
the min-cut beyond the tolerance is a failure, never a result; if no route certifies, it
raises :class:`SolverError` naming each route and why it failed.

**Why these settings.** With its defaults, HiGHS declared feasible transport LPs infeasible
(issue 20: 30 of 96 at n = 20-60, K = 2): its presolve's *forcing-row* rule fixes every variable
of a row to zero when the row's right-hand side (a draft tuple's mass, down to 1e-21, or a
target mass) is within the primal feasibility tolerance (1e-7) of zero. Each fix is within
tolerance, but they add up: on the issue's n = 6 instance 15 of the 21 tuple rows (4.25e-7 of
mass) and two target columns (1.2e-8) are fixed, so the reduced LP's rows hold 4.13e-7 less
mass than its columns -- exactly the primal infeasibility HiGHS then reports. So the first
route runs the simplex without presolve. And its points were accurate only to that tolerance (entries down
to -1e-7, values up to 2.7e-7 above P* once clipped), so every HiGHS route tightens the primal
and dual feasibility tolerances to 1e-10, its smallest setting.

**Size.** Before anything is built, each LP estimates its variables, constraints and memory
(:func:`lp_size`) and refuses through the one guard of :mod:`multidraft.theory.laws`
(:class:`ProblemTooLargeError`, naming the limit and the faster route).

**Silence.** Solvers print nothing unless asked: every solve runs inside
:func:`~multidraft.theory._silence.silenced` (file descriptors 1 and 2 pointed at
``os.devnull``: HiGHS >= 1.16 prints its banner from C, whatever cvxpy's ``verbose`` says).
``verbose=True`` on an LP function, or :func:`solver_output` around any code (the CLI's
``--verbose``), lets the solver's log through instead, on standard error, so that standard
output (``--json``) stays clean either way.

**Progress.** An LP large enough to take more than a few seconds (:data:`SLOW_VARIABLES`)
shows a bar on stderr while the solver runs, unless ``progress=False``.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from multidraft.theory._silence import resolve_verbose, silenced, solver_output
from multidraft.theory.laws import (
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
    "CERTIFIED_GAP",
    "Route",
    "ROUTES",
    "Certification",
    "lp_size",
    "installed_solvers",
    "check_solver",
    "check_lp_solver",
    "routes",
    "min_cut_bound",
    "solve_certified",
    "solver_output",
    "resolve_verbose",
    "silenced",
    "solving_bar",
    "solve",
    "certify",
]

#: Largest accepted violation of a marginal / bound when a solver's point is re-checked.
FEASIBILITY_TOLERANCE = 1e-6
#: Largest accepted distance between a certified LP optimum and the min-cut value P*.
CERTIFIED_GAP = 1e-9
#: Peak memory per LP variable through cvxpy and HiGHS, measured on the transport LP
#: (about 600 MiB at 505,000 variables, 1.1 GiB at 1.1 million).
CVXPY_BYTES_PER_VARIABLE = 1200
#: LPs with at least this many variables show a progress bar (the transport LP takes about
#: 3 s at 30,000 variables and 20 s at 150,000 on one core of the development machine).
SLOW_VARIABLES = 20_000


class SolverError(RuntimeError):
    """An LP solver did not return a certified optimum (status other than optimal, or a
    point that fails the re-check). The message names the status and the problem size;
    ``reason`` is the same without the problem's name and size (what went wrong, in short)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


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
    variables or :data:`~multidraft.theory.laws.MAX_MEMORY` bytes, before anything is built."""
    estimate = SizeEstimate(what, int(variables), int(variables) * bytes_per_variable, int(constraints))
    return check_size(estimate, alternative, max_variables=max_variables, max_memory=MAX_MEMORY)


@functools.cache
def installed_solvers() -> tuple[str, ...]:
    """cvxpy's installed solvers, asked once per process (cvxpy probes their imports each time,
    about 25 ms)."""
    import cvxpy as cp

    return tuple(cp.installed_solvers())


def check_solver(solver: str) -> str:
    """Return ``solver`` if cvxpy has it installed, else raise ``ValueError`` listing the valid ones."""
    installed = installed_solvers()
    if not isinstance(solver, str) or solver.upper() not in installed:
        raise ValueError(f"solver: {solver!r} is not an installed cvxpy solver; choose one of {', '.join(installed)}")
    return solver.upper()


# ----------------------------------------------------------------------------------- routes


@dataclass(frozen=True)
class Route:
    """One way to solve an LP: a cvxpy solver and the options that make it accurate here."""

    name: str
    solver: str
    options: Mapping[str, object]


_HIGHS_TOLERANCES = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
#: Bit of HiGHS's ``presolve_rule_off`` that switches off its "forcing row" rule (rule 6).
_HIGHS_FORCING_ROW = 1 << 6

#: The solvers offered for the certified LPs, each with its routes in the order tried (module
#: docstring, "Why these settings"). A requested solver's routes come first, then the others'.
ROUTES: dict[str, tuple[Route, ...]] = {
    "HIGHS": (
        Route("HIGHS (presolve off)", "HIGHS", {"presolve": "off", **_HIGHS_TOLERANCES}),
        Route(
            "HIGHS (presolve on, no forcing rows)",
            "HIGHS",
            {"presolve": "on", "presolve_rule_off": _HIGHS_FORCING_ROW, **_HIGHS_TOLERANCES},
        ),
    ),
    "SCIPY": (
        Route(
            "SCIPY (linprog's HiGHS dual simplex, presolve off)",
            "SCIPY",
            {"scipy_options": {"method": "highs-ds", "presolve": False, **_HIGHS_TOLERANCES}},
        ),
    ),
    "CLARABEL": (
        Route("CLARABEL (interior point, tolerances 1e-10)", "CLARABEL", {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}),
    ),
}

#: Installed cvxpy solvers that are not offered for the certified LPs, and why.
NOT_CERTIFIABLE = {
    "SCS": "a first-order conic solver: at its default tolerances its plan missed a marginal by 1.2e-5 on "
    "two tokens, and with tolerances of 1e-10 it did not finish one n = 54 transport LP in 15 minutes",
    "OSQP": "a first-order QP solver: at its default tolerances its plan missed a marginal by 1.6e-5 on "
    "two tokens, and with tolerances of 1e-10 and polishing it ran 9 minutes on one n = 54 transport LP "
    "without reaching an optimal status",
}


def check_lp_solver(solver: str) -> str:
    """Return ``solver`` (upper case) if it is offered for the certified LPs (:data:`ROUTES`) and
    installed, else raise ``ValueError`` naming the offered ones (and, for an installed solver
    that is not offered, why not)."""
    installed = installed_solvers()
    offered = [name for name in ROUTES if name in installed]
    name = solver.upper() if isinstance(solver, str) else None
    if name in offered:
        return name
    if name in installed:
        why = NOT_CERTIFIABLE.get(name, "not validated against the min-cut certificate")
        raise ValueError(
            f"solver: {solver!r} is not offered for the certified LPs ({why}; the certificate needs "
            f"{CERTIFIED_GAP:g}); choose one of {', '.join(offered)}"
        )
    raise ValueError(f"solver: {solver!r} is not an installed cvxpy solver; choose one of {', '.join(offered)}")


def routes(solver: str) -> tuple[Route, ...]:
    """The routes of ``solver`` (checked by :func:`check_lp_solver`), then those of the other
    offered solvers that are installed."""
    first, installed = check_lp_solver(solver), installed_solvers()
    others = [name for name in ROUTES if name != first and name in installed]
    return tuple(route for name in (first, *others) for route in ROUTES[name])


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


def _problem_size(variables: int, constraints: int) -> str:
    return f"a problem with {variables:,} variables and {constraints:,} constraints"


def solve(
    problem,
    solver: str,
    what: str,
    variables: int,
    constraints: int,
    verbose: bool | None = None,
    progress: bool = True,
    options: Mapping[str, object] | None = None,
) -> tuple[str, float]:
    """Solve a cvxpy problem; return ``(status, seconds)`` or raise :class:`SolverError`.

    Only the status ``optimal`` is accepted (``optimal_inaccurate``, ``infeasible``, ... and
    solver exceptions all raise), and the message names the status and the problem size
    (cvxpy's own "may be inaccurate" warning is therefore not repeated). ``options`` go to
    the solver (copied: cvxpy edits some in place). Silent unless ``verbose`` (see
    :func:`resolve_verbose`); a bar while a large problem is solved unless ``progress=False``
    (:func:`solving_bar`).
    """
    import cvxpy as cp

    verbose = resolve_verbose(verbose)
    start = time.perf_counter()
    try:
        with solving_bar(what, variables, progress), silenced(verbose), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Solution may be inaccurate", category=UserWarning)
            problem.solve(solver=solver, verbose=verbose, **copy.deepcopy(dict(options or {})))
    except (cp.error.SolverError, ValueError) as error:  # ValueError: an option this release lacks
        reason = f"solver {solver} failed ({error})"
        raise SolverError(f"{what}: {reason} on {_problem_size(variables, constraints)}", reason) from None
    seconds = time.perf_counter() - start
    status = str(problem.status)
    if status != cp.OPTIMAL:
        reason = f"solver {solver} returned status {status!r} (only 'optimal' is accepted)"
        raise SolverError(f"{what}: {reason} on {_problem_size(variables, constraints)}", reason)
    return status, seconds


def certify(condition: bool, what: str, defect: str, solver: str, variables: int, constraints: int) -> None:
    """Raise :class:`SolverError` unless a re-check of the solver's point passed."""
    if not condition:
        reason = f"solver {solver} reported 'optimal' but the re-check failed ({defect})"
        raise SolverError(f"{what}: {reason} on {_problem_size(variables, constraints)}", reason)


# ---------------------------------------------------------------------------- certification


@dataclass(frozen=True, eq=False)
class Certification:
    """How a certified LP optimum was obtained, and its distance to the min-cut.

    Attributes
    ----------
    route, solver : str
        The route that answered (:data:`ROUTES`: solver and settings) and its cvxpy solver.
    min_cut : float
        ``P* = p(T) + 1 - P_D(set(X) ⊆ T)`` by :func:`multidraft.theory.optimal_acceptance`,
        an upper bound on every lossless scheme's acceptance, computed without an LP.
    cut : ndarray of int64
        The certificate set T of the min-cut.
    gap : float
        ``min_cut - value``; ``|gap| <= CERTIFIED_GAP``. The value is that of an exactly
        feasible point (a true lower bound up to rounding), so the optimum lies in
        ``[value, min_cut]``.
    failed : tuple of str
        The routes tried before this one, each with why it was not accepted (empty when the
        first route answered).
    """

    route: str
    solver: str
    min_cut: float
    cut: np.ndarray
    gap: float
    failed: tuple[str, ...] = ()


def min_cut_bound(target: np.ndarray, law):
    """The min-cut optimum P* of ``law`` against the (validated) ``target``, with its certificate
    set: :func:`multidraft.theory.optimal_acceptance` (``auto``; all subsets if the threshold
    search stops at its limit). Raises :class:`SolverError` if neither settles it."""
    from multidraft.theory.optimum import optimal_acceptance

    try:
        return optimal_acceptance(target, law)
    except RuntimeError as error:  # the threshold search's limit: all subsets, if few enough
        try:
            return optimal_acceptance(target, law, method="subsets")
        except ValueError:
            raise SolverError(f"no min-cut bound to certify the LP against ({error})") from None


Result = TypeVar("Result")


def solve_certified(
    problem,
    read: Callable[[str], tuple[Result, float]],
    bound,
    *,
    solver: str,
    what: str,
    size: tuple[int, int],
    verbose: bool | None = None,
    progress: bool = True,
) -> tuple[Result, Certification]:
    """Solve ``problem`` by the :func:`routes` of ``solver`` until one gives a certified optimum.

    For each route: :func:`solve`, then ``read(solver_name)``, which re-checks the point, makes
    it exactly feasible and returns ``(result, value)`` (or raises :class:`SolverError`); the
    value is accepted if ``|bound.value - value| <= CERTIFIED_GAP`` (``bound`` from
    :func:`min_cut_bound`). Returns the result and its :class:`Certification`; raises
    :class:`SolverError` naming every route and why it failed if none is accepted. A value above
    the bound by more than the tolerance is one such failure: never a result.
    """
    min_cut, failed = float(bound.value), []
    for route in routes(solver):
        try:
            solve(problem, route.solver, what, *size, verbose, progress, route.options)
            result, value = read(route.solver)
        except SolverError as error:
            failed.append(f"{route.name}: {error.reason}")
            continue
        gap = min_cut - value
        if abs(gap) <= CERTIFIED_GAP:
            return result, Certification(route.name, route.solver, min_cut, bound.certificate, gap, tuple(failed))
        side = "above" if gap < 0 else "below"
        failed.append(f"{route.name}: value {value:.12g} lies {abs(gap):.3g} {side} the min-cut {min_cut:.12g}")
    raise SolverError(
        f"{what}: no solver route gave an optimum within {CERTIFIED_GAP:g} of the min-cut P* = {min_cut:.12g} "
        f"on {_problem_size(*size)}; tried {'; '.join(failed)}",
        "; ".join(failed),
    )
