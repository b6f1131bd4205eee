"""The canonical split of the truncated selection: the Euclidean projection of the target onto
the laws that selections among the inner draft tuples can induce.

Those laws form a polymatroid base polytope (the load vectors of spreading each tuple's mass
over its tokens: bipartite flow, Hall's theorem), shifted by the fixed part. Over a base
polytope, the projection of p, ``r* = argmin ‖r - p‖²``, minimises every separable convex
function of ``r - p`` with one shape for all coordinates, among them ``Σ (p - r)_+``; so r*
maximises the acceptance ``Σ min(p, r)`` and, being unique, does not depend on the algorithm
that finds it (Fujishige, "Submodular Functions and Optimization", 2nd ed., Section 8;
Groenevelt 1991; the exchange argument is in :mod:`multidraft.lp.truncated`).

Two routes: Wolfe's minimum-norm-point algorithm, whose linear step over a base polytope is a
greedy rule (:func:`min_norm_split`, numpy and scipy only), and the same projection as a QP
through cvxpy (:func:`projection_by_solver`, to check that the split does not depend on the
algorithm). ``inner`` is the truncation's set of inner tuples (``tuples [T, K]`` in rank space
0..s-1, and the (tuple, rank) pairs ``pair_tuple``, ``pair_rank``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["min_norm_split", "projection_by_solver"]


def _greedy_split(tuples: np.ndarray, mass: np.ndarray, priority: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """A vertex of the achievable loads: each tuple's mass to its token of best (smallest)
    ``priority``. Returns the loads [s] and the chosen rank of each tuple [T]."""
    first = tuples[np.arange(len(tuples)), np.argmin(priority[tuples], axis=1)]
    return np.bincount(first, weights=mass, minlength=s), first


def min_norm_split(p_in: np.ndarray, fixed: np.ndarray, inner, mass: np.ndarray) -> np.ndarray:
    """The canonical split ``share [T, s]`` (fraction of each tuple's mass given to each rank)
    whose loads r = fixed + Σ_t mass_t share_t are the projection ``argmin ‖r - p_in‖²``.

    Wolfe's minimum-norm-point algorithm (Wolfe 1976; Fujishige & Isotani 2011 for base
    polytopes) on the achievable loads shifted by ``p_in``: linear minimisation over a base
    polytope is the greedy rule (:func:`_greedy_split`: send each tuple to its token of least
    weight), and the iterate is kept as a convex combination of such vertices, re-minimised
    over their affine hull (:class:`_ActiveSet`, at most s + 1 points). It ends when no vertex
    improves the iterate: ``<x, x - q> <= 1e-13 max ‖vertex‖²``, which bounds
    ``‖x - x*‖² <= <x, x - q>``; in practice the optimal face is found exactly and the affine
    minimiser is the projection to rounding. The share is the same convex combination of the
    vertices' priority orders, so the loads it induces are the returned iterate by construction.
    """
    s, tuples = len(p_in), inner.tuples
    scale = max(float(p_in.max()), float(fixed.max()), float(mass.max()), np.finfo(float).tiny)
    shift, base, weights_of = p_in / scale, fixed / scale, mass / scale

    def vertex(direction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        priority = np.empty(s, dtype=np.int64)
        priority[np.lexsort((np.arange(s), direction))] = np.arange(s)  # ties: the better rank
        loads, first = _greedy_split(tuples, weights_of, priority, s)
        return base + loads - shift, first

    point, first = vertex(shift - base)  # start: the ranks with the largest deficit first
    active = _ActiveSet(point)
    firsts = [first]
    x, largest = point, float(point @ point)
    for _ in range(50 * (s + 1)):
        candidate, first = vertex(x)
        largest = max(largest, float(candidate @ candidate))
        if x @ x - x @ candidate <= 1e-13 * largest or not active.add(candidate):
            break
        firsts.append(first)
        while True:  # minor cycle: affine minimiser, pulled back into the convex hull
            alpha = active.affine_minimiser()
            if np.all(alpha > 1e-14):
                active.coefficients = alpha
                break
            low = alpha <= 1e-14
            old = active.coefficients
            theta = np.min(old[low] / (old[low] - alpha[low]))
            keep = active.move(theta * alpha + (1.0 - theta) * old)
            firsts = [f for f, kept in zip(firsts, keep) if kept]
        x = active.coefficients @ active.points
    coefficients = _affine_minimiser(active.points)  # a last, QR-accurate affine solve
    if not np.all(coefficients > 0):
        coefficients = active.coefficients
    share = np.zeros((len(tuples), s))
    rows = np.arange(len(tuples))
    for coefficient, first in zip(coefficients, firsts):
        share[rows, first] += coefficient
    return share / share.sum(axis=1, keepdims=True)  # rows sum to one exactly, entries <= 1


class _ActiveSet:
    """The points Wolfe's algorithm keeps (``points [m, s]``), their convex coefficients, and
    the Cholesky factor of ``G = 1 + P Pᵀ``, whose solve ``G u = 1`` gives the affine
    minimiser ``u / Σ u`` (Wolfe 1976): a point is added in O(m s + m²), a solve is O(m²)."""

    def __init__(self, point: np.ndarray) -> None:
        self.points = point[None, :].copy()
        self.coefficients = np.ones(1)
        self.gram = np.array([[1.0 + point @ point]])
        self.factor = np.sqrt(self.gram)

    def add(self, point: np.ndarray) -> bool:
        """Append a point (coefficient 0); False when it is affinely dependent on the others."""
        from scipy.linalg import solve_triangular

        column = 1.0 + self.points @ point
        corner = 1.0 + point @ point
        row = solve_triangular(self.factor, column, lower=True)
        pivot = corner - row @ row
        if pivot <= 1e-14 * corner:
            return False
        m = len(self.points)
        factor = np.zeros((m + 1, m + 1))
        factor[:m, :m], factor[m, :m], factor[m, m] = self.factor, row, np.sqrt(pivot)
        gram = np.empty((m + 1, m + 1))
        gram[:m, :m], gram[:m, m], gram[m, :m], gram[m, m] = self.gram, column, column, corner
        self.points = np.vstack([self.points, point])
        self.coefficients = np.append(self.coefficients, 0.0)
        self.factor, self.gram = factor, gram
        return True

    def affine_minimiser(self) -> np.ndarray:
        from scipy.linalg import cho_solve

        u = cho_solve((self.factor, True), np.ones(len(self.points)))
        return u / u.sum()

    def move(self, coefficients: np.ndarray) -> np.ndarray:
        """Take the new convex coefficients and drop the points whose coefficient vanished
        (the factor is then recomputed); returns the mask of the points kept."""
        keep = coefficients > 1e-14
        self.points, self.gram = self.points[keep], self.gram[np.ix_(keep, keep)]
        self.coefficients = coefficients[keep] / coefficients[keep].sum()
        self.factor = np.linalg.cholesky(self.gram)
        return keep


def _affine_minimiser(points: np.ndarray) -> np.ndarray:
    """``α`` with ``Σ α = 1`` minimising ``‖Σ_i α_i points_i‖`` (the nearest point of the affine
    hull to the origin): least squares on the differences to the first point, by a QR
    factorisation (the points Wolfe's algorithm keeps are affinely independent; a rank
    deficiency is handled by the least-squares fallback)."""
    if len(points) == 1:
        return np.ones(1)
    differences = (points[1:] - points[0]).T  # [s, m - 1]
    q, r = np.linalg.qr(differences)
    diagonal = np.abs(np.diag(r))
    if diagonal.min() <= 1e-12 * max(diagonal.max(), 1e-300):
        beta = np.linalg.lstsq(differences, -points[0], rcond=None)[0]
    else:
        beta = np.linalg.solve(r, -(q.T @ points[0]))
    return np.concatenate([[1.0 - beta.sum()], beta])


def projection_by_solver(p_in: np.ndarray, fixed: np.ndarray, inner, mass: np.ndarray, solver: str, what: str) -> np.ndarray:
    """The same projection as :func:`min_norm_split`, as a QP through cvxpy with ``solver``
    (to check that the canonical split does not depend on the algorithm). Returns ``share``."""
    import cvxpy as cp
    import scipy.sparse as sp

    from multidraft.lp._solve import solve

    s, count, pairs = len(p_in), len(inner.tuples), len(inner.pair_tuple)
    scale = max(float(p_in.max()), float(fixed.max()), float(mass.max()), np.finfo(float).tiny)
    columns = np.arange(pairs)
    per_tuple = sp.csr_matrix((np.ones(pairs), (inner.pair_tuple, columns)), shape=(count, pairs))
    per_rank = sp.csr_matrix((np.ones(pairs), (inner.pair_rank, columns)), shape=(s, pairs))
    given = cp.Variable(pairs, nonneg=True)
    loads = fixed / scale + per_rank @ given
    problem = cp.Problem(cp.Minimize(cp.sum_squares(loads - p_in / scale)), [per_tuple @ given == mass / scale])
    solve(problem, solver, what, pairs, count)
    values = np.maximum(np.asarray(given.value, dtype=np.float64), 0.0) * scale
    share = np.zeros((count, s))
    share[inner.pair_tuple, inner.pair_rank] = values
    totals = share.sum(axis=1, keepdims=True)
    return np.where(totals > 0, share / np.where(totals > 0, totals, 1.0), share)
