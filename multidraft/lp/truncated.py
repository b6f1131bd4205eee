"""The truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4) for any
number of drafts, and the multi-stage selection built from pair stages.

**Truncation.** Rank the tokens (:func:`rank_key_values`), keep the top s, Ω₁, and fix the
selection of every draft tuple with a token outside Ω₁: it selects its best-ranked token
(``outside="ranked"``, the paper's rule) or, sort-free, its best-ranked token of Ω₁ and the
first draft when it has none (``outside="first"``). Only the tuples inside Ω₁ (s^K of them, or
the multisets for iid drafts) are optimised. Every fixed rule is lossless (Theorem 1: the
single-draft step against the induced law r outputs p exactly).

**The canonical optimum.** The laws r that selections among the inner tuples can induce form a
polymatroid base polytope (the load vectors of spreading each tuple's mass over its tokens:
bipartite flow, Hall's theorem), shifted by the fixed part. Over a base polytope, the
Euclidean projection of p, ``r* = argmin ‖r - p‖²``, minimises every separable convex function
of ``r - p`` with one shape for all coordinates, among them ``Σ (p - r)_+``; so r* maximises
the acceptance ``Σ min(p, r)`` (exchange argument: moving mass from b to a is possible at r*
only if ``r*_a - p_a >= r*_b - p_b``, which rules out an improving move from a token above its
target to one below; Fujishige, "Submodular Functions and Optimization", 2nd ed., Section 8,
and Groenevelt 1991). Unlike a vertex returned by an LP solver, r* is unique, so the law
passed on by each stage of :func:`multistage` is the same whatever algorithm finds it: the
projection replaces the LP and chooses among its optima.

The projection is computed by Wolfe's minimum-norm-point algorithm, whose linear step over a
base polytope is a greedy rule (numpy only); a QP solver through cvxpy is an alternative route.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from multidraft.lp._solve import check_solver
from multidraft.lp.importance import (
    ImportanceSelection,
    _acceptance,
    _certified_intermediate,
    _check_drafts,
)
from multidraft.theory.limits import MAX_MEMORY, SizeEstimate, check_size

__all__ = [
    "RANK_KEYS",
    "OUTSIDE_RULES",
    "MAX_INNER_TUPLES",
    "TRUNCATED_BYTES_PER_ENTRY",
    "TruncatedSelection",
    "MultistageSelection",
    "rank_key_values",
    "truncated_lp",
    "multistage",
]

#: Ranking keys of :func:`truncated_lp`.
RANK_KEYS = ("published", "ratio")
#: Fixed selection rules of :func:`truncated_lp` for tuples with a token outside the top s.
OUTSIDE_RULES = ("ranked", "first")
#: Largest number of inner draft tuples (s^K; the table of selection weights has this many rows).
MAX_INNER_TUPLES = 2_000_000
#: Peak bytes per (inner tuple, kept token) of the split (calibrated by benchmarks/bench_size_guard.py).
TRUNCATED_BYTES_PER_ENTRY = 24


def rank_key_values(target: np.ndarray, drafts: np.ndarray, rank_key: str) -> np.ndarray:
    """Ranking key of :func:`truncated_lp` (larger = ranked first): target ``[..., n]``, drafts
    ``[..., K, n]``.

    * ``"published"``: ``p(k) - Π_i q_i(k)`` (Khisti et al., Section 4, for K = 2): the target
      mass not already delivered by the tuple (k, ..., k).
    * ``"ratio"``: ``p(k) / q̄(k)`` with ``q̄`` the mean of the q_i: under-drafted tokens first
      (the min-cut argument sends every tuple holding a token outside the optimal cut set to
      that token); ``p = 0`` ranks last among the drafted tokens.

    Under both keys a token that no draft can produce (every ``q_i(k) = 0``) ranks last, -inf:
    it is in no draft tuple, so a place among the top s would be wasted on it (the paper sorts
    only the tokens left after the drafts' top-p; otherwise, with top-k drafts, an undrafted
    token of large p could push a drafted one out and s >= the drafts' support would not give
    the full LP).

    >>> rank_key_values(np.array([0.5, 0.5]), np.array([[0.5, 0.5], [1.0, 0.0]]), "published").tolist()
    [0.0, 0.5]
    >>> q = np.array([0.5, 0.5, 0.0])  # two iid drafts that never produce token 2
    >>> np.round(rank_key_values(np.array([0.3, 0.3, 0.4]), np.stack([q, q]), "published"), 6).tolist()
    [0.05, 0.05, -inf]
    """
    drafts = np.atleast_2d(drafts)  # [..., K, n]
    if rank_key == "published":
        key = target - np.prod(drafts, axis=-2)
    elif rank_key == "ratio":
        mean = drafts.mean(axis=-2)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = target / np.where(mean > 0, mean, 1.0)
    else:
        raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(RANK_KEYS)}")
    return np.where(drafts.max(axis=-2) > 0, key, -np.inf)


@dataclass(frozen=True, eq=False)
class TruncatedSelection(ImportanceSelection):
    """Truncated selection for K drafts (Section 4): a canonical optimum over the tuples of the
    top-s tokens, a fixed rule elsewhere.

    Attributes (besides the base ones)
    ----------------------------------
    top : ndarray, shape (s,)
        The kept tokens Ω₁, best ranked first.
    rank : ndarray, shape (n,)
        Rank of every token (``outside="ranked"``); with ``outside="first"`` the tokens outside
        Ω₁ all share rank s (no full sort is made).
    weights : ndarray, shape (s,) * K + (K,)
        ``weights[a_1, ..., a_K, i]``: probability of selecting draft position i when the
        drafts are ``(top[a_1], ..., top[a_K])``; a token at several positions shares its
        weight among them equally.
    s : int
    rank_key, outside : str
    """

    top: np.ndarray
    rank: np.ndarray
    weights: np.ndarray
    s: int
    rank_key: str
    outside: str

    @property
    def k(self) -> int:
        return self.weights.ndim - 1

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        k = self.k
        drafts = _check_drafts(drafts, k, len(self.intermediate))
        ranks = self.rank[drafts.reshape(-1, k)]
        # Outside Ω₁^K: the first position holding the best rank (ties: the same token, or
        # tokens outside Ω₁ under the sort-free rule, where the first draft is selected).
        out = np.zeros(ranks.shape)
        out[np.arange(len(ranks)), np.argmin(ranks, axis=-1)] = 1.0
        inner = np.all(ranks < self.s, axis=-1)
        if inner.any():
            out[inner] = self.weights[tuple(ranks[inner].T)]
        return out.reshape(drafts.shape)


@dataclass(frozen=True, eq=False)
class MultistageSelection(ImportanceSelection):
    """K > 2 drafts combined pairwise: stage j selects between the token kept so far (law
    ``r_{j-1}``) and draft j + 1 (law ``q_{j+1}``); ``intermediate`` is the law after the last
    stage, and ``stages[j]`` the pair selection of stage j."""

    stages: tuple[ImportanceSelection, ...]

    @property
    def k(self) -> int:
        return len(self.stages) + 1

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        drafts = _check_drafts(drafts, self.k, len(self.intermediate))
        flat = drafts.reshape(-1, self.k)
        held = np.zeros(flat.shape)  # P(the token kept after stage j came from position i)
        held[:, 0] = 1.0
        for j, stage in enumerate(self.stages):
            newcomer = flat[:, j + 1]
            for i in range(j + 1):
                keep = stage.selection_probabilities(np.stack([flat[:, i], newcomer], axis=-1))[:, 0]
                held[:, j + 1] += held[:, i] * (1.0 - keep)
                held[:, i] *= keep
        return held.reshape(drafts.shape)


# ---------------------------------------------------------------------------------- inputs


def _distribution(values: object, name: str) -> np.ndarray:
    from multidraft.theory.distributions import as_distribution

    return as_distribution(values, name)


def _drafts(target: object, draft: object, draft2: object | None, k: int | None) -> tuple[np.ndarray, np.ndarray, bool]:
    """``(p, drafts [K, n], iid)`` from a draft law or from one or two draft distributions."""
    from multidraft.theory.distributions import check_count
    from multidraft.theory.laws import IID, DraftLaw, Independent

    if isinstance(draft, DraftLaw):
        if draft2 is not None or k is not None:
            raise ValueError("draft: with a draft law, draft2 and k are taken from the law; leave them unset")
        if not isinstance(draft, (IID, Independent)):
            raise ValueError(f"draft: the truncated LP needs an iid or independent law, got the {draft.name} law")
        drafts, iid = np.array(draft.marginals()), isinstance(draft, IID)
    else:
        first = _distribution(draft, "draft")
        if draft2 is None:
            k = 2 if k is None else check_count(k, "k", meaning="the number of drafts")
            drafts, iid = np.broadcast_to(first, (k, len(first))), True
        else:
            if k not in (None, 2):
                raise ValueError(f"k: two draft distributions make k = 2, got k={k}")
            second = _distribution(draft2, "draft2")
            if len(second) != len(first):
                raise ValueError(f"draft2: length {len(second)} differs from draft's {len(first)}")
            drafts, iid = np.stack([first, second]), False
    p = _distribution(target, "target")
    if len(p) != drafts.shape[1]:
        raise ValueError(f"target: length {len(p)} does not match the vocabulary n={drafts.shape[1]} of the drafts")
    return p, drafts, iid


# --------------------------------------------------------------------------- fixed part of r


def _minimum_rank_law(sorted_drafts: np.ndarray, tails: np.ndarray) -> np.ndarray:
    """``P(min rank of the tuple = j) = Π_i T_i(j) - Π_i T_i(j+1)`` for every rank j, from the
    drafts in rank order ``[..., K, m]`` and their tail masses ``tails[..., i, j] = q_i(rank >= j)``
    (``[..., K, m + 1]``), without cancellation: with ``T_i(j) - T_i(j+1) = q_i(j)``,

        Π_i T_i(j) - Π_i T_i(j+1) = Σ_i (Π_{l<i} T_l(j+1)) q_i(j) (Π_{l>i} T_l(j)),

    every term >= 0 (for K = 2: ``q₁ T₂(j) + T₁(j+1) q₂``). In-place products, O(K m)."""
    *lead, k, m = sorted_drafts.shape
    after = np.empty((*lead, k, m))  # Π_{l>i} T_l(j)
    after[..., -1, :] = 1.0
    for i in range(k - 2, -1, -1):
        np.multiply(after[..., i + 1, :], tails[..., i + 1, :-1], out=after[..., i, :])
    law = np.zeros((*lead, m))
    before = np.ones((*lead, m))  # Π_{l<i} T_l(j+1)
    for i in range(k):
        term = after[..., i, :]
        term *= sorted_drafts[..., i, :]
        term *= before
        law += term
        if i + 1 < k:
            before *= tails[..., i, 1:]
    return law


def _tails(sorted_drafts: np.ndarray, beyond: np.ndarray | float = 0.0) -> np.ndarray:
    """``q_i(rank >= j)`` for j = 0..m from the drafts in rank order ``[..., K, m]`` (summed
    from the tail), plus ``beyond [..., K]``, the mass ranked after all of them."""
    *lead, k, m = sorted_drafts.shape
    tails = np.zeros((*lead, k, m + 1))
    np.cumsum(sorted_drafts[..., ::-1], axis=-1, out=tails[..., -2::-1])
    tails += np.asarray(beyond)[..., None]
    return tails


def _inner_base(top_drafts: np.ndarray, outside_mass: np.ndarray) -> np.ndarray:
    """The fixed part of r on Ω₁ (``[..., s]``): ``P(min rank = j)`` minus its part where every
    draft lies in Ω₁ (that part is optimised), from the drafts of Ω₁ in rank order
    ``[..., K, s]`` and the mass outside Ω₁ ``[..., K]``; the same for both outside rules."""
    law = _minimum_rank_law(top_drafts, _tails(top_drafts, outside_mass))
    return np.maximum(law - _minimum_rank_law(top_drafts, _tails(top_drafts)), 0.0)


def _top_tokens(key: np.ndarray, s: int) -> np.ndarray:
    """The s tokens of largest key along the last axis (``[..., s]``), best first, ties by the
    lower token id (stable), in O(n) per row: an argpartition, a check for a tie across the
    boundary (then the tied tokens of lowest id are kept), and a sort of the s kept."""
    n = key.shape[-1]
    if s >= n:
        chosen = np.broadcast_to(np.arange(n), key.shape)
    else:
        chosen = np.sort(np.argpartition(-key, s - 1, axis=-1)[..., :s], axis=-1)
        kth = np.take_along_axis(key, chosen, axis=-1).min(axis=-1, keepdims=True)
        crossing = (key >= kth).sum(axis=-1) > s  # the s-th key is tied with a token left out
        if crossing.any():
            rows = key[crossing]
            above = rows > kth[crossing]
            tied = rows == kth[crossing]
            tied &= np.cumsum(tied, axis=-1) <= s - above.sum(axis=-1, keepdims=True)
            chosen = np.array(chosen)
            chosen[crossing] = np.nonzero(above | tied)[-1].reshape(-1, s)
    kept = np.take_along_axis(key, chosen, axis=-1)
    return np.take_along_axis(chosen, np.argsort(-kept, axis=-1, kind="stable"), axis=-1)


@dataclass(frozen=True)
class _Ranking:
    top: np.ndarray  # [s] kept tokens, best first
    rank: np.ndarray  # [n]
    outer: np.ndarray  # [n] r from the tuples with a token outside Ω₁ (zero on Ω₁)
    base: np.ndarray  # [s] r on Ω₁ from those tuples


def _stable_order(key: np.ndarray, drafts: np.ndarray, s: int) -> np.ndarray:
    """Tokens by decreasing key, ties by token id, where ties matter: the fast (unstable) sort,
    redone stably when two equal keys meet among drafted tokens or at the edge of Ω₁. (The
    order of tied tokens no draft can produce changes nothing: they get r = 0 either way.)"""
    order = np.argsort(-key)
    ordered = key[order]
    tied = ordered[1:] == ordered[:-1]
    if tied.any():
        drafted = drafts.sum(axis=0)[order] > 0
        if (tied & (drafted[1:] | drafted[:-1])).any() or (0 < s < len(key) and tied[s - 1]):
            order = np.argsort(-key, kind="stable")
    return order


def _outer_ranked(drafts: np.ndarray, order: np.ndarray, s: int) -> np.ndarray:
    """r outside Ω₁ under the ranked rule (``[..., n]``, zero on Ω₁): the token of rank j >= s
    gets ``P(min rank = j)``; ``order [..., n]`` is the full rank order."""
    ordered = np.take_along_axis(drafts, order[..., None, :], axis=-1)
    law = _minimum_rank_law(ordered, _tails(ordered))
    law[..., :s] = 0.0
    outer = np.empty(law.shape)
    np.put_along_axis(outer, order, law, axis=-1)
    return outer


def _outer_first(drafts: np.ndarray, top: np.ndarray, outside_mass: np.ndarray) -> np.ndarray:
    """r outside Ω₁ under the sort-free rule (``[..., n]``, zero on Ω₁): tuples with no token of
    Ω₁ select the first draft, ``r(y) = q_1(y) Π_{i>1} q_i(Ω₂)``."""
    outer = drafts[..., 0, :] * np.prod(outside_mass[..., 1:], axis=-1, keepdims=True)
    np.put_along_axis(outer, top, 0.0, axis=-1)
    return outer


def _rank_and_fix(p: np.ndarray, drafts: np.ndarray, s: int, rank_key: str, outside: str) -> _Ranking:
    """Ω₁, the ranks, and the part of r fixed by the outside rule.

    The kept tokens are the top s of the key, ties broken by the lower token id (a stable
    order, :func:`_stable_order` or :func:`_top_tokens`), so the set does not depend on the
    sorting algorithm.
    """
    n = drafts.shape[1]
    key = rank_key_values(p, drafts, rank_key)
    if outside == "ranked":
        order = _stable_order(key, drafts, s)
        top = order[:s]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        outer = _outer_ranked(drafts, order, s)
    else:
        top = _top_tokens(key, s)
        rank = np.full(n, s, dtype=np.int64)
        rank[top] = np.arange(s)
    top_drafts = drafts[:, top]
    outside_mass = np.maximum(drafts.sum(axis=1) - top_drafts.sum(axis=1), 0.0)
    if outside == "first":
        outer = _outer_first(drafts, top, outside_mass)
    return _Ranking(top, rank, outer, _inner_base(top_drafts, outside_mass))


# ------------------------------------------------------------------------------ inner tuples


@dataclass(frozen=True)
class _InnerTuples:
    """The draft tuples inside Ω₁ in rank space (0..s-1): ``tuples [T, K]``, ordered, or for iid
    drafts one sorted representative per multiset with ``multiplicity`` orderings; ``pairs``
    lists each (tuple, distinct rank) once (the tuple's mass may go to any of its tokens)."""

    tuples: np.ndarray
    multiplicity: np.ndarray
    pair_tuple: np.ndarray
    pair_rank: np.ndarray


def _inner_count(s: int, k: int, iid: bool) -> int:
    """Inner tuples of the top s tokens: the multisets for iid drafts, else all s^K tuples."""
    return math.comb(s + k - 1, k) if iid else s**k


def _inner_memory(s: int, k: int, iid: bool) -> int:
    """Estimated peak bytes of the split over the inner tuples: dense [tuples, s] tables."""
    return _inner_count(s, k, iid) * s * TRUNCATED_BYTES_PER_ENTRY


def _inner_tuples(
    s: int, k: int, iid: bool, max_tuples: int = MAX_INNER_TUPLES, max_memory: int = MAX_MEMORY
) -> _InnerTuples:
    def fits(size: int) -> bool:
        return _inner_count(size, k, iid) <= max_tuples and _inner_memory(size, k, iid) <= max_memory

    if not fits(s):
        largest = 1
        while fits(2 * largest):
            largest *= 2
        step = largest
        while step > 1:  # the largest s that fits, by bisection (count and memory grow in s)
            step //= 2
            if fits(largest + step):
                largest += step
        count, memory = _inner_count(s, k, iid), _inner_memory(s, k, iid)
        estimate = SizeEstimate(f"truncated LP (s={s}, k={k})", count, memory, unit="draft tuples inside the top s tokens")
        check_size(estimate, f"use s <= {largest} (or raise max_tuples / max_memory)", max_variables=max_tuples,
                   max_memory=max_memory, variables_name="max_tuples")  # fmt: skip
    if iid:
        tuples = np.array(list(itertools.combinations_with_replacement(range(s), k)), dtype=np.int64).reshape(-1, k)
        # Orderings of a sorted tuple: K! / Π_j c_j!, with Π_j c_j! the product over positions of
        # the position within its run of equal ranks (1, 2, ... along each run).
        within_run = np.ones(tuples.shape)
        for i in range(1, k):
            within_run[:, i] = np.where(tuples[:, i] == tuples[:, i - 1], within_run[:, i - 1] + 1, 1)
        multiplicity = math.factorial(k) / within_run.prod(axis=1)
    else:
        tuples = np.indices((s,) * k).reshape(k, -1).T.astype(np.int64)
        multiplicity = np.ones(len(tuples))
    codes = np.unique(np.repeat(np.arange(len(tuples)), k) * s + tuples.reshape(-1))
    return _InnerTuples(tuples, multiplicity, codes // s, codes % s)


def _greedy_split(tuples: np.ndarray, mass: np.ndarray, priority: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """A vertex of the achievable loads: each tuple's mass to its token of best (smallest)
    ``priority``. Returns the loads [s] and the chosen rank of each tuple [T]."""
    first = tuples[np.arange(len(tuples)), np.argmin(priority[tuples], axis=1)]
    return np.bincount(first, weights=mass, minlength=s), first


def _min_norm_split(p_in: np.ndarray, fixed: np.ndarray, inner: _InnerTuples, mass: np.ndarray) -> np.ndarray:
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


def _projection_by_solver(p_in: np.ndarray, fixed: np.ndarray, inner: _InnerTuples, mass: np.ndarray, solver: str, what: str) -> np.ndarray:
    """The same projection as :func:`_min_norm_split`, as a QP through cvxpy with ``solver``
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


# ------------------------------------------------------------------------------------ public


def truncated_lp(
    target: object,
    draft: object,
    draft2: object | None = None,
    *,
    k: int | None = None,
    s: int = 5,
    rank_key: str = "published",
    outside: str = "ranked",
    solver: str | None = None,
    max_tuples: int = MAX_INNER_TUPLES,
    max_memory: int = MAX_MEMORY,
) -> TruncatedSelection:
    """Truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4), any K.

    Drafts: ``draft`` alone (K = ``k`` iid drafts, default 2), ``draft`` and ``draft2`` (two
    independent drafts), or ``draft`` a :class:`~multidraft.theory.IID` or
    :class:`~multidraft.theory.Independent` law (K from the law).

    Rank the tokens by ``rank_key`` (:func:`rank_key_values`) and keep the top s, Ω₁. A tuple
    with a token outside Ω₁ gets a fixed selection; with ``outside="ranked"`` (the paper's rule)
    it selects its best-ranked token, which gives, for the token of rank j,

        r_fixed(j) = Π_i T_i(j) - Π_i T_i(j+1)   (minus the inner part for j < s),

    with ``T_i(j) = q_i(tokens of rank >= j)`` (for K = 2:
    ``q₁q₂ + q₁ q₂(A) + q₂ q₁(A)``, A the tokens ranked after). ``outside="first"`` is the
    sort-free O(n) variant: Ω₁ by partition, tuples with a token of Ω₁ select their best-ranked
    one there, tuples without select the first draft, ``r(y) = q₁(y) Π_{i>1} q_i(Ω₂)`` outside.
    The tuples inside Ω₁ (s^K, or the multisets for iid drafts) split their mass among their
    tokens so that r on Ω₁ is the canonical optimum, the projection
    ``argmin ‖r - p‖²`` (module docstring): it maximises ``Σ min(p, r)`` and is unique, so the
    result does not depend on the algorithm that finds it. With the ranked rule the acceptance is
    non-decreasing in s and reaches the optimum of the importance LP at s = n (tested).

    Check: r is recomputed from the split and must be a probability distribution.

    Parameters
    ----------
    target, draft, draft2 : array_like, shape (n,) (or ``draft`` a draft law)
    k : int, optional
        Number of iid drafts when only ``draft`` is given (default 2).
    s : int
        Tokens kept (``s >= n`` keeps all: the full importance LP, solved canonically).
    rank_key : {"published", "ratio"}
    outside : {"ranked", "first"}
    solver : str or None
        None: the projection by Wolfe's minimum-norm-point algorithm over greedy vertices
        (no solver; :func:`_min_norm_split`). A cvxpy solver name that handles QPs: the same
        projection as a QP through cvxpy, the same r up to the solver's tolerance (tested with
        the interior-point ``"CLARABEL"``; HiGHS's QP solver fails on these semidefinite QPs).
    max_tuples, max_memory : int
        Size guard on the inner tuples (``C(s + K - 1, K)`` for iid drafts, else ``s^K``) and
        on the estimated peak memory of the split (tuples × s × ``TRUNCATED_BYTES_PER_ENTRY``),
        checked before anything is built; the refusal names the largest s that fits.

    Returns
    -------
    TruncatedSelection

    Raises
    ------
    ValueError
        Bad distributions, s, k, rank_key, outside or solver.
    ProblemTooLargeError
        More than ``max_tuples`` inner tuples or ``max_memory`` bytes.
    SolverError
        A QP status other than optimal, or a failed re-check.

    Examples
    --------
    >>> selection = truncated_lp([0.5, 0.3, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25], s=2)
    >>> selection.top.tolist(), round(selection.acceptance, 6)
    ([0, 1], 0.9)

    Keeping every token recovers the optimum ``P* = 0.9375`` (min-cut at T = {1, 2, 3}), and
    three iid drafts reach acceptance one (P* = 1: p(T) >= q(T)^3 for every T):

    >>> round(truncated_lp([0.5, 0.3, 0.1, 0.1], [0.25] * 4, s=4).acceptance, 6)
    0.9375
    >>> round(truncated_lp([0.5, 0.3, 0.1, 0.1], [0.25] * 4, k=3, s=4).acceptance, 6)
    1.0

    Complexity: one argsort (O(n) with ``outside="first"``), O(nK) closed forms, and the
    projection over the T inner tuples (s^K, or the multisets): each iteration one greedy
    vertex, O(T K), and a least-squares problem on at most s + 1 points.
    """
    start = time.perf_counter()
    p, drafts, iid = _drafts(target, draft, draft2, k)
    from multidraft.theory.distributions import check_count

    s = check_count(s, "s", meaning="the number of tokens kept")
    if rank_key not in RANK_KEYS:
        raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(RANK_KEYS)}")
    if outside not in OUTSIDE_RULES:
        raise ValueError(f"outside: unknown rule {outside!r}; choose one of {', '.join(OUTSIDE_RULES)}")
    if solver is not None:
        solver = check_solver(solver)
    k, n = drafts.shape
    s = min(s, n)
    what = f"truncated LP (n={n}, k={k}, s={s})"
    inner = _inner_tuples(s, k, iid, max_tuples, max_memory)
    ranking = _rank_and_fix(p, drafts, s, rank_key, outside)
    top_drafts = drafts[:, ranking.top]
    mass = inner.multiplicity * np.prod(top_drafts[np.arange(k)[None, :], inner.tuples], axis=1)
    p_top = p[ranking.top]
    if len(inner.pair_tuple) == len(inner.tuples):  # every inner tuple holds one token: no choice
        share = np.zeros((len(inner.tuples), s))
        share[inner.pair_tuple, inner.pair_rank] = 1.0
    elif solver is None:
        share = _min_norm_split(p_top, ranking.base, inner, mass)
    else:
        share = _projection_by_solver(p_top, ranking.base, inner, mass, solver, what)
    r = ranking.outer.copy()
    r[ranking.top] = ranking.base + mass @ share  # the law the split induces, recomputed
    name = "min-norm point (greedy vertices)" if solver is None else solver
    r = _certified_intermediate(r, what, name, len(inner.pair_tuple), len(inner.tuples))
    return TruncatedSelection(
        acceptance=_acceptance(p, r),
        intermediate=r,
        status="optimal",
        solver=name,
        seconds=time.perf_counter() - start,
        top=ranking.top,
        rank=ranking.rank,
        weights=_selection_table(inner, share, s, k),
        s=s,
        rank_key=rank_key,
        outside=outside,
    )


def _selection_table(inner: _InnerTuples, share: np.ndarray, s: int, k: int) -> np.ndarray:
    """``[s]*K + [K]`` probabilities of selecting each draft position for every ordered inner
    tuple: the share of the token at that position, divided among the positions holding it."""
    ordered = np.indices((s,) * k).reshape(k, -1).T  # every ordered tuple
    if len(inner.tuples) != len(ordered):  # iid: look up each ordering's multiset
        row = np.searchsorted(_codes(inner.tuples, s), _codes(np.sort(ordered, axis=1), s))
    else:
        row = np.arange(len(ordered))
    holders = (ordered[:, :, None] == ordered[:, None, :]).sum(axis=2)  # positions sharing each token
    table = share[row[:, None], ordered] / holders
    return table.reshape((s,) * k + (k,))


def _codes(tuples: np.ndarray, s: int) -> np.ndarray:
    """Mixed-radix codes of rank tuples (sorted codes for sorted multiset rows)."""
    return (tuples * (s ** np.arange(tuples.shape[1] - 1, -1, -1))).sum(axis=1)


def multistage(
    target: object,
    drafts: Sequence,
    *,
    s: int | None = None,
    rank_key: str = "published",
    solver: str | None = None,
) -> MultistageSelection:
    """Multi-stage selection for K >= 2 independent drafts ``X_i ~ q_i`` (Khisti et al., Section 4).

    Stage 1 combines drafts 1 and 2 into a token with law ``r₁``; stage j combines the kept
    token (law ``r_{j-1}``, independent of ``X_{j+1}``) with draft j + 1 into ``r_j``, each
    stage maximising ``Σ min(p, r_j)``. The single-draft step at the end uses ``r_{K-1}``, so
    the scheme is lossless and its acceptance ``Σ min(p, r_{K-1})`` is at most P* (the stages
    are greedy). ``s=None``: every pair of tokens is optimised (:func:`truncated_lp` with
    s = n); an integer s: :func:`truncated_lp` with that s and ``rank_key``.

    **Deterministic.** A stage has many optimal selections and the law it passes on decides
    what later stages can reach; each stage here takes the canonical optimum (the projection of
    p, unique: see the module docstring), so the result does not depend on how it is found:
    ``solver=None`` uses the minimum-norm-point algorithm of :func:`truncated_lp`, a cvxpy
    solver name the same projection as a QP (tested with Clarabel).

    **Not monotone in K with truncation.** With ``s=None`` a stage may always keep the token it
    holds, so adding a draft never lowers the acceptance. With an integer s the fixed rule
    outside Ω₁ is forced on every tuple with a token outside, and a stage can end below the
    law it started from: adding a draft can lower the acceptance (tests/test_lp_truncated.py
    has an instance with s = 1).

    >>> q = [0.4, 0.3, 0.2, 0.1]
    >>> selection = multistage([0.1, 0.2, 0.3, 0.4], [q, q, q])
    >>> selection.k, selection.selection_probabilities([[0, 1, 3]]).shape
    (3, (1, 3))
    """
    start = time.perf_counter()
    if isinstance(drafts, np.ndarray) and drafts.ndim == 1:
        raise ValueError("drafts: multistage needs a list of K >= 2 draft distributions")
    drafts = list(drafts)
    if len(drafts) < 2:
        raise ValueError(f"drafts: multistage needs K >= 2 draft distributions, got {len(drafts)}")
    stages: list[TruncatedSelection] = []
    current = drafts[0]
    for following in drafts[1:]:
        size = len(np.asarray(following)) if s is None else s
        stage = truncated_lp(target, current, following, s=size, rank_key=rank_key, solver=solver)
        stages.append(stage)
        current = stage.intermediate
    last = stages[-1]
    return MultistageSelection(
        acceptance=last.acceptance,
        intermediate=last.intermediate,
        status=last.status,
        solver=last.solver,
        seconds=time.perf_counter() - start,
        stages=tuple(stages),
    )
