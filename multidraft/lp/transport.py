"""The optimal-transport LP of SpecTr over draft tuples, for any draft law.

Variables π(x, y) >= 0 for draft tuples x (or their multisets, for exchangeable laws) and
tokens y (theory.md, "The optimal-transport LP"; Sun et al., SpecTr, NeurIPS 2023, eq. (3);
Khisti et al., ICLR 2025, Section 2):

    maximise   Σ_x Σ_{y ∈ set(x)} π(x, y)
    subject to Σ_y π(x, y) = D(x),   Σ_x π(x, y) = p(y),   π >= 0.

The optimum is the optimal acceptance P*; by max-flow/min-cut it equals
``multidraft.theory.optimal_acceptance``. The LP is built with sparse constraint matrices in one
piece (no per-constraint Python loop) and solved by HiGHS through cvxpy. The solver's plan is
re-checked against both marginals, rounded onto the exact couplings (:func:`feasible_plan`), so
its acceptance is a true lower bound, and certified against the min-cut before it is returned
(:func:`multidraft.lp._solve.solve_certified`: another route is tried if it is not within
1e-9).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from multidraft.lp._solve import (
    FEASIBILITY_TOLERANCE,
    MAX_VARIABLES,
    Certification,
    certify,
    check_lp_solver,
    lp_size,
    min_cut_bound,
    solve_certified,
)
from multidraft.theory.laws import SizeEstimate, check_law, membership, optimum_advice

__all__ = ["TransportSolution", "transport_lp", "transport_size", "transport_problem", "feasible_plan", "law_tuples"]


@dataclass(frozen=True, eq=False)
class TransportSolution:
    """An optimal coupling of the draft law and the target, certified by its marginals.

    Attributes
    ----------
    acceptance : float
        ``Σ_x Σ_{y ∈ set(x)} π(x, y)``, recomputed from the plan (= P* within
        :data:`~multidraft.lp._solve.CERTIFIED_GAP`, see ``certification``).
    tuples : ndarray, shape (m, K), int64
        Draft tuples; for merged exchangeable laws the sorted multiset representatives.
    tuple_probs : ndarray, shape (m,)
        ``D(x)`` (summed over each multiset when merged).
    plan : ndarray, shape (m, n)
        The coupling π(x, y) >= 0; rows sum to ``tuple_probs``, columns to the target (up to
        rounding: the solver's point made exactly feasible by :func:`feasible_plan`).
    status, solver : str
        Solver status (always ``"optimal"``) and the solver that answered.
    variables, constraints : int
        LP size: ``m·n`` variables, ``m + n - 1`` equality constraints (one is redundant).
    seconds : float
        Wall time to build, solve and check the LP (and the min-cut that certifies it).
    certification : Certification
        The route that answered, the min-cut P* and its set T, and the gap ``P* - acceptance``.
    merged : bool
        Whether tuples were merged into multisets (then look drafts up in sorted order).
    """

    acceptance: float
    tuples: np.ndarray
    tuple_probs: np.ndarray
    plan: np.ndarray
    status: str
    solver: str
    variables: int
    constraints: int
    seconds: float
    certification: Certification
    merged: bool = False


def law_tuples(law, merge: bool) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(tuples [m, K], probs [m], merged)`` of a law; exchangeable laws (``law.symmetric``)
    are merged into sorted multiset representatives with summed probability when ``merge``."""
    tuples, probs = law.enumerate()
    probs = np.asarray(probs, dtype=np.float64)
    if not (merge and law.symmetric and law.k > 1):
        return tuples, probs, False
    canonical, inverse = np.unique(np.sort(tuples, axis=-1), axis=0, return_inverse=True)
    return canonical, np.bincount(inverse.reshape(-1), weights=probs, minlength=len(canonical)), True


def transport_size(law, merge_symmetric: bool = True, max_variables: int = MAX_VARIABLES) -> SizeEstimate:
    """The transport LP's size for ``law`` (``m·n`` variables, ``m + n`` constraints, m the
    draft tuples counted from the supports), checked against the limits before anything is
    built: raises :class:`ProblemTooLargeError` beyond them, with the route to use instead."""
    m, n = law.tuple_count(merged=merge_symmetric), law.n
    what = f"transport LP ({law.name} law, n={n}, k={law.k})"
    return lp_size(what, m * n, m + n, optimum_advice(law, lp=False), max_variables=max_variables)


def transport_problem(target: np.ndarray, tuples: np.ndarray, probs: np.ndarray):
    """The transport LP as a cvxpy problem: ``(problem, pi, mask)`` with ``pi`` the flat plan
    variable (index ``i·n + y``) and ``mask [m, n]`` the accepted cells ``y ∈ set(x_i)``.

    The last column constraint is implied by the others (both marginals sum to one) and is
    dropped: with it, a rounding mismatch of 1e-16 between Σ D and Σ p can make the solver
    declare the system infeasible. Feasible points are checked against all n columns.
    """
    import cvxpy as cp
    import scipy.sparse as sp

    m, n = len(tuples), len(target)
    mask = membership(tuples, n)
    rows_matrix = sp.kron(sp.eye(m, format="csr"), np.ones((1, n)), format="csr")
    cols_matrix = sp.kron(np.ones((1, m)), sp.eye(n, format="csr")[:-1], format="csr")
    pi = cp.Variable(m * n, nonneg=True)
    problem = cp.Problem(
        cp.Maximize(mask.reshape(-1).astype(np.float64) @ pi),
        [rows_matrix @ pi == probs, cols_matrix @ pi == target[:-1]],
    )
    return problem, pi, mask


def feasible_plan(plan: np.ndarray, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Round a nearly feasible plan onto the couplings of ``rows`` and ``columns`` (Altschuler,
    Weed and Rigollet, NeurIPS 2017, Algorithm 2):

        X = max(plan, 0);  scale each row down to at most its marginal, then each column;
        X += (rows - X 1)(columns - Xᵀ 1)ᵀ / ‖rows - X 1‖₁.

    The result is non-negative with both marginals exact (up to rounding; Σ rows = Σ columns
    assumed), and moves at most ``2 (‖X 1 - rows‖₁ + ‖Xᵀ 1 - columns‖₁)`` of mass (their
    Lemma 7), so its acceptance is a true lower bound on P* that loses at most that much.
    """
    plan = np.maximum(plan, 0.0)
    for axis, marginal in ((1, rows), (0, columns)):
        total = plan.sum(axis=axis)
        factor = np.where(total > marginal, marginal / np.where(total > 0, total, 1.0), 1.0)
        plan = plan * (factor[:, None] if axis == 1 else factor[None, :])
    row_deficit = np.maximum(rows - plan.sum(axis=1), 0.0)
    column_deficit = np.maximum(columns - plan.sum(axis=0), 0.0)
    if row_deficit.sum() > 0:
        plan = plan + np.outer(row_deficit, column_deficit) / row_deficit.sum()
    return plan


def transport_lp(
    target: object,
    law,
    *,
    solver: str = "HIGHS",
    merge_symmetric: bool = True,
    max_variables: int = MAX_VARIABLES,
    verbose: bool | None = None,
    progress: bool = True,
) -> TransportSolution:
    """Solve the SpecTr optimal-transport LP ``max Σ_x Σ_{y ∈ set(x)} π(x, y)`` over couplings
    π of the draft law D and the target p.

    Parameters
    ----------
    target : array_like, shape (n,)
        Target distribution p.
    law : DraftLaw
        Any draft law of :mod:`multidraft.theory.laws`.
    solver : str
        The solver tried first (default HiGHS), one of
        :data:`~multidraft.lp._solve.ROUTES` (HIGHS, SCIPY, CLARABEL; first-order solvers such
        as SCS and OSQP cannot reach the certificate and are refused). If its routes give no
        certified optimum, the other offered solvers are tried; ``solver`` and
        ``certification.route`` on the result say which answered.
    merge_symmetric : bool
        Merge tuples of exchangeable laws (iid, wor) into multisets: ``set(x)`` depends only
        on the multiset, so the optimum is unchanged and the LP shrinks by about K!.
    max_variables : int
        Size guard: the number of variables ``m·n`` (and the memory, about
        :data:`~multidraft.lp._solve.CVXPY_BYTES_PER_VARIABLE` bytes each) is estimated from
        the draft supports before anything is built.
    verbose : bool or None
        Let the solver's log through (None: the setting of :func:`~multidraft.lp.solver_output`,
        silent by default).
    progress : bool
        Show a progress bar on stderr when the LP is large enough to take seconds.

    Returns
    -------
    TransportSolution
        Acceptance, tuples, their probabilities, the plan, status, solver, size, time, and
        the certification: ``|acceptance - P*| <= 1e-9`` with P* the min-cut of
        :func:`multidraft.theory.optimal_acceptance`.

    Raises
    ------
    ValueError
        Bad target, or a solver that is unknown or not offered.
    ProblemTooLargeError
        When ``m·n > max_variables`` or the memory estimate exceeds the limit; the message
        names the closed-form route that accepts this law.
    SolverError
        When no route gives a plan that passes the re-check (status optimal, marginals and
        objective within 1e-6) and, made exactly feasible, lies within 1e-9 of the min-cut
        (a value above it is never returned); the message names each route and its failure.

    Examples
    --------
    Uniform drafts, K = 2: acceptance one although TV(p, q) = 1/6 (Khisti et al., Theorem 2).

    >>> from multidraft.theory import IID
    >>> solution = transport_lp([1/3, 1/6, 1/2], IID([1/3, 1/3, 1/3], k=2))
    >>> round(solution.acceptance, 9), solution.status, solution.plan.shape
    (1.0, 'optimal', (6, 3))
    >>> solution.certification.route, abs(solution.certification.gap) <= 1e-9
    ('HIGHS (presolve off)', True)

    References
    ----------
    Sun et al., "SpecTr: Fast Speculative Decoding via Optimal Transport", NeurIPS 2023;
    Khisti et al., ICLR 2025, Section 2. Size: m·n variables with m ≈ n^K (n^K / K! merged).
    """
    solver = check_lp_solver(solver)
    start = time.perf_counter()
    p = check_law(law).check_target(target)
    n = law.n
    what = transport_size(law, merge_symmetric, max_variables).what

    tuples, probs, merged = law_tuples(law, merge_symmetric)
    m = len(tuples)
    variables, constraints = m * n, m + n - 1
    bound = min_cut_bound(p, law)
    problem, pi, mask = transport_problem(p, tuples, probs)

    def read(solver_name: str) -> tuple[tuple[np.ndarray, float], float]:
        """Re-check the solver's plan, round it onto the couplings, and return it with its value
        (twice: the result and the value to certify)."""

        def verify(condition: bool, defect: str) -> None:
            certify(condition, what, defect, solver_name, variables, constraints)

        raw = np.asarray(pi.value, dtype=np.float64).reshape(m, n)
        verify(raw.min() >= -FEASIBILITY_TOLERANCE, f"negative entry {raw.min():.3g}")
        row_error = float(np.abs(raw.sum(axis=1) - probs).max())
        col_error = float(np.abs(raw.sum(axis=0) - p).max())
        verify(row_error <= FEASIBILITY_TOLERANCE, f"draft marginal off by {row_error:.3g}")
        verify(col_error <= FEASIBILITY_TOLERANCE, f"target marginal off by {col_error:.3g}")
        plan = feasible_plan(raw, probs, p)
        acceptance = min(float(plan[mask].sum()), 1.0)  # rounding may add 1e-16 at P* = 1
        gap = abs(acceptance - float(problem.value))
        verify(gap <= FEASIBILITY_TOLERANCE, f"objective differs from the plan by {gap:.3g}")
        return (plan, acceptance), acceptance

    (plan, acceptance), certification = solve_certified(
        problem, read, bound, solver=solver, what=what, size=(variables, constraints), verbose=verbose, progress=progress
    )
    return TransportSolution(
        acceptance=acceptance,
        tuples=tuples,
        tuple_probs=probs,
        plan=plan,
        status="optimal",
        solver=certification.solver,
        variables=variables,
        constraints=constraints,
        seconds=time.perf_counter() - start,
        certification=certification,
        merged=merged,
    )
