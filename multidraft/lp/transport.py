"""The optimal-transport LP of SpecTr over draft tuples, for any draft law.

Variables π(x, y) >= 0 for draft tuples x (or their multisets, for exchangeable laws) and
tokens y (theory.md, "The optimal-transport LP"; Sun et al., SpecTr, NeurIPS 2023, eq. (3);
Khisti et al., ICLR 2025, Section 2):

    maximise   Σ_x Σ_{y ∈ set(x)} π(x, y)
    subject to Σ_y π(x, y) = D(x),   Σ_x π(x, y) = p(y),   π >= 0.

The optimum is the optimal acceptance P*; by max-flow/min-cut it equals
``multidraft.theory.optimal_acceptance`` (the tests compare both routes). The LP is built with
sparse constraint matrices in one piece (no per-constraint Python loop) and solved by HiGHS
through cvxpy; the returned plan is re-checked against both marginals before it is returned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from multidraft.lp._solve import (
    FEASIBILITY_TOLERANCE,
    MAX_VARIABLES,
    certify,
    check_solver,
    lp_size,
    solve,
)
from multidraft.theory.laws import check_law, membership
from multidraft.theory.limits import SizeEstimate, optimum_advice

__all__ = ["TransportSolution", "transport_lp", "transport_size", "law_tuples"]


@dataclass(frozen=True, eq=False)
class TransportSolution:
    """An optimal coupling of the draft law and the target, certified by its marginals.

    Attributes
    ----------
    acceptance : float
        ``Σ_x Σ_{y ∈ set(x)} π(x, y)``, recomputed from the checked plan (= P*).
    tuples : ndarray, shape (m, K), int64
        Draft tuples; for merged exchangeable laws the sorted multiset representatives.
    tuple_probs : ndarray, shape (m,)
        ``D(x)`` (summed over each multiset when merged).
    plan : ndarray, shape (m, n)
        The coupling π(x, y); rows sum to ``tuple_probs``, columns to the target.
    status, solver : str
        Solver status (always ``"optimal"``) and solver name.
    variables, constraints : int
        LP size: ``m·n`` variables, ``m + n - 1`` equality constraints (one is redundant).
    seconds : float
        Wall time to build, solve and check the LP.
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
        A cvxpy solver name (default HiGHS).
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
        Acceptance, tuples, their probabilities, the plan, status, solver, size, time.

    Raises
    ------
    ValueError
        Bad target or unknown solver.
    ProblemTooLargeError
        When ``m·n > max_variables`` or the memory estimate exceeds the limit; the message
        names the closed-form route that accepts this law.
    SolverError
        Status other than optimal, or a plan whose marginals or objective fail the re-check.

    Examples
    --------
    Uniform drafts, K = 2: acceptance one although TV(p, q) = 1/6 (Khisti et al., Theorem 2).

    >>> from multidraft.theory import IID
    >>> solution = transport_lp([1/3, 1/6, 1/2], IID([1/3, 1/3, 1/3], k=2))
    >>> round(solution.acceptance, 9), solution.status, solution.plan.shape
    (1.0, 'optimal', (6, 3))

    References
    ----------
    Sun et al., "SpecTr: Fast Speculative Decoding via Optimal Transport", NeurIPS 2023;
    Khisti et al., ICLR 2025, Section 2. Size: m·n variables with m ≈ n^K (n^K / K! merged).
    """
    import cvxpy as cp
    import scipy.sparse as sp

    start = time.perf_counter()
    solver = check_solver(solver)
    p = check_law(law).check_target(target)
    n = law.n
    what = transport_size(law, merge_symmetric, max_variables).what

    tuples, probs, merged = law_tuples(law, merge_symmetric)
    m = len(tuples)
    variables, constraints = m * n, m + n - 1
    mask = membership(tuples, n)
    # Flat index of π(i, y) is i*n + y: rows of A_rows sum a tuple's row, A_cols a token's
    # column. The last column constraint is implied by the others (both marginals sum to one)
    # and is dropped: with it, a rounding mismatch of 1e-16 between Σ D and Σ p can make the
    # solver declare the system infeasible. The re-check below tests all n columns.
    rows_matrix = sp.kron(sp.eye(m, format="csr"), np.ones((1, n)), format="csr")
    cols_matrix = sp.kron(np.ones((1, m)), sp.eye(n, format="csr")[:-1], format="csr")
    pi = cp.Variable(variables, nonneg=True)
    problem = cp.Problem(
        cp.Maximize(mask.reshape(-1).astype(np.float64) @ pi),
        [rows_matrix @ pi == probs, cols_matrix @ pi == p[:-1]],
    )
    status, _ = solve(problem, solver, what, variables, constraints, verbose, progress)

    plan = np.asarray(pi.value, dtype=np.float64).reshape(m, n)

    def verify(condition: bool, defect: str) -> None:
        certify(condition, what, defect, solver, variables, constraints)

    verify(plan.min() >= -FEASIBILITY_TOLERANCE, f"negative entry {plan.min():.3g}")
    plan = np.maximum(plan, 0.0)
    row_error = float(np.abs(plan.sum(axis=1) - probs).max())
    col_error = float(np.abs(plan.sum(axis=0) - p).max())
    verify(row_error <= FEASIBILITY_TOLERANCE, f"draft marginal off by {row_error:.3g}")
    verify(col_error <= FEASIBILITY_TOLERANCE, f"target marginal off by {col_error:.3g}")
    acceptance = float(plan[mask].sum())
    gap = abs(acceptance - float(problem.value))
    verify(gap <= FEASIBILITY_TOLERANCE, f"objective differs from the plan by {gap:.3g}")
    return TransportSolution(
        acceptance=min(acceptance, 1.0),
        tuples=tuples,
        tuple_probs=probs,
        plan=plan,
        status=status,
        solver=solver,
        variables=variables,
        constraints=constraints,
        seconds=time.perf_counter() - start,
        merged=merged,
    )
