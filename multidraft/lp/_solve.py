"""Shared solver plumbing for the LPs of :mod:`multidraft.lp`: errors, size guard, cvxpy call.

Every LP here is solved through one gate, :func:`solve`, which accepts only an ``optimal``
status; callers then re-check the returned point (marginals, bounds, objective) before they
return a number (STYLE.md, "Never trust a solver's word alone").
"""

from __future__ import annotations

import time

import numpy as np

__all__ = [
    "SolverError",
    "ProblemTooLargeError",
    "MAX_VARIABLES",
    "FEASIBILITY_TOLERANCE",
    "check_size",
    "check_solver",
    "solve",
    "certify",
    "SMALL_LP_BACKENDS",
    "solve_small_lp",
    "as_target",
]

#: Default limit on the number of LP variables built before :class:`ProblemTooLargeError`.
MAX_VARIABLES = 2_000_000
#: Largest accepted violation of a marginal / bound when a solver's point is re-checked.
FEASIBILITY_TOLERANCE = 1e-6


class SolverError(RuntimeError):
    """An LP solver did not return a certified optimum (status other than optimal, or a
    point that fails the re-check). The message names the status and the problem size."""


class ProblemTooLargeError(ValueError):
    """An exact LP would be too large to build; the message gives the estimated size and
    suggests the closed-form optimum (sorted scan / min-cut) instead."""


def as_target(target: object, n: int) -> np.ndarray:
    """Validate the target distribution p against a vocabulary of size n."""
    from multidraft.theory.distributions import as_distribution

    p = as_distribution(target, "target")
    if len(p) != n:
        raise ValueError(f"target: length {len(p)} does not match the vocabulary n={n} of the drafts")
    return p


def check_size(what: str, variables: int, constraints: int, max_variables: int) -> None:
    """Raise :class:`ProblemTooLargeError` when ``variables > max_variables``."""
    if variables > max_variables:
        raise ProblemTooLargeError(
            f"{what}: about {variables:,} variables and {constraints:,} constraints exceed the limit "
            f"max_variables={max_variables:,}; for the optimal acceptance use "
            "multidraft.theory.optimal_acceptance(target, law, method='sorted') (O(n log n) prefix scan) "
            "or method='subsets' (min-cut over all token sets, n <= 22)"
        )


def check_solver(solver: str) -> str:
    """Return ``solver`` if cvxpy has it installed, else raise ``ValueError`` listing the valid ones."""
    import cvxpy as cp

    installed = cp.installed_solvers()
    if not isinstance(solver, str) or solver.upper() not in installed:
        raise ValueError(f"solver: {solver!r} is not an installed cvxpy solver; choose one of {', '.join(installed)}")
    return solver.upper()


def solve(problem, solver: str, what: str, variables: int, constraints: int) -> tuple[str, float]:
    """Solve a cvxpy problem; return ``(status, seconds)`` or raise :class:`SolverError`.

    Only the status ``optimal`` is accepted (``optimal_inaccurate``, ``infeasible``, ... and
    solver exceptions all raise), and the message names the status and the problem size.
    """
    import cvxpy as cp

    start = time.perf_counter()
    try:
        problem.solve(solver=solver)
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


#: Backends of :func:`solve_small_lp`.
SMALL_LP_BACKENDS = ("highspy", "linprog")


def solve_small_lp(
    cost: np.ndarray,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    row_upper: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    backend: str,
    what: str,
) -> tuple[np.ndarray, float]:
    """``min cost·x  s.t.  A x <= row_upper,  lower <= x <= upper`` for a small dense-ish LP,
    with HiGHS called without a modelling layer; returns ``(x, objective)``.

    ``columns = (start, index, value)`` is A in compressed-column form (as HiGHS takes it).
    ``backend="highspy"`` passes the model to HiGHS's own Python binding (about 1 ms per call);
    ``"linprog"`` goes through ``scipy.optimize.linprog(method="highs")`` (the same solver, but
    its option validation costs about 2-3 ms per call). Any status other than optimal raises
    :class:`SolverError` naming the status and the size.
    """
    rows, count = len(row_upper), len(cost)
    if backend == "highspy":
        import highspy

        highs = highspy.Highs()
        highs.setOptionValue("output_flag", False)
        model = highspy.HighsLp()
        model.num_col_, model.num_row_ = count, rows
        model.col_cost_, model.col_lower_, model.col_upper_ = cost, lower, upper
        model.row_lower_, model.row_upper_ = np.full(rows, -highspy.kHighsInf), row_upper
        model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        model.a_matrix_.start_, model.a_matrix_.index_, model.a_matrix_.value_ = columns
        highs.passModel(model)
        highs.run()
        status = highs.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:
            raise SolverError(
                f"{what}: HiGHS returned status {highs.modelStatusToString(status)!r} (only 'Optimal' is "
                f"accepted) on a problem with {count} variables and {rows} constraints"
            )
        x = np.asarray(highs.getSolution().col_value, dtype=np.float64)
        return x, float(cost @ x)
    if backend == "linprog":
        import scipy.sparse as sp
        from scipy.optimize import linprog

        matrix = sp.csc_matrix((columns[2], columns[1], columns[0]), shape=(rows, count))
        result = linprog(cost, A_ub=matrix, b_ub=row_upper, bounds=np.stack([lower, upper], axis=1), method="highs")
        if result.status != 0:
            raise SolverError(
                f"{what}: linprog(method='highs') returned status {result.status} ({result.message}) on a "
                f"problem with {count} variables and {rows} constraints"
            )
        return np.asarray(result.x, dtype=np.float64), float(result.fun)
    raise ValueError(f"backend: unknown small-LP backend {backend!r}; choose one of {', '.join(SMALL_LP_BACKENDS)}")
