"""Two drafts without replacement in closed form: the optimal cut and the law of J at K = 2
without the exponential race (docs/optimal_verifier.md §10, "K = 2 in closed form").

**Pairs.** With K = 2 the drafted set is a pair, and (draw X_1, then X_2 from the rest)

    P(D = {i, z}) = q_i q_z (1/(M - q_i) + 1/(M - q_z)) / M,      M = Σ q (= 1 up to rounding).

**The cut.** Summing over the pairs inside a prefix T (Q = q(T)),

    g(T) = P(D ⊆ T) = Σ_{i∈T} (q_i/M) (Q - q_i)/(M - q_i) = (Q Σ_{i∈T} o_i - Σ_{i∈T} q_i o_i) / M,

o_i = q_i/(M - q_i) (both orders of the pair: i first, then one of T ∖ {i}): two prefix sums
along the scan order, so the scan evaluates every prefix, P* = min_j [p(T_j) + 1 - g(T_j)], in one
O(n) pass with no race and no pruning. Rounding: one token may exceed M/2, and its M - q_i
cancels (1 - 1e-12: 1e-4 relative); its complement is summed from the other tokens instead, and
its terms are formed as o_big · (Q - q_big) with Q - q_big the prefix sum of the *others*
(:func:`~multidraft.theory.laws._kernels.wor_prefix_containment`'s K = 2 form, which this
pass repeats with compensated sums). Every other token has o_i <= 1, so the two sums stay
below 2 and their difference loses at most a few ulps of 1 (absolute).

**J** (the J-curtain's count, :func:`~multidraft.theory.optimum._wor_race.j_law`): U-points
arrive at rate L = q(U) in the iid stream, so P(J >= 1) = 1 - g(T*) and P(J >= 2) = P(the first
two stream points lie in U) = (L / M)².
"""

from __future__ import annotations

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["pair_cut", "pair_containment", "pair_j_law", "pair_masses"]


def pair_masses(draft: np.ndarray) -> tuple[float, int, float]:
    """``(M, i, M - q_i)``: the total mass, the first largest token i and the mass of all the
    others, summed over them (compensated; no cancellation when q_i ≈ M), in one compiled pass."""
    q = np.ascontiguousarray(draft, dtype=np.float64)
    if len(q) == 0:
        raise ValueError("pair_masses: no tokens")
    _compiled()
    total, big, rest = _masses(q, 0.0)
    return float(total), int(big), float(rest)


def pair_containment(q_sorted: np.ndarray, outside: float = 0.0) -> np.ndarray:
    """``g(T_j) = (Q_j Σ_{i<j} o_i - Σ_{i<j} q_i o_i) / M`` for j = 0..n (module docstring),
    q given in scan order, M = Σ q + ``outside`` (mass of tokens not given, never in a
    prefix). Raises ``ValueError`` when fewer than two tokens (counting ``outside`` as one) carry
    mass: no pair can be drafted.

    >>> pair_containment(np.array([0.5, 0.25, 0.25])).round(6).tolist()
    [0.0, 0.0, 0.416667, 1.0]
    """
    q = np.ascontiguousarray(q_sorted, dtype=np.float64)
    if np.count_nonzero(q) + (outside > 0) < 2:
        raise ValueError("pair_containment: two drafts without replacement need two tokens with positive mass")
    out = np.empty(len(q) + 1)
    _compiled()
    _pair_prefixes(q, float(outside), np.zeros(0), 0, out)
    return out


def pair_cut(p_sorted: np.ndarray, q_sorted: np.ndarray, draftable: int) -> tuple[int, float, float]:
    """``(j*, P*, g(T_{j*}))``: the first prefix j <= ``draftable`` minimising
    ``P_j + 1 - g(T_j)`` (P_j summed left to right, as the pruned scan's
    :func:`~multidraft.theory.optimum._wor_sums.prefix_bounds`), P* capped at 1: the full scan
    at K = 2 in one compiled pass (module docstring), no array of the prefixes."""
    _compiled()
    q = np.ascontiguousarray(q_sorted, dtype=np.float64)
    best, value, contained, _ = _pair_prefixes(q, 0.0, np.ascontiguousarray(p_sorted, dtype=np.float64), int(draftable), np.zeros(0))
    return int(best), float(min(value, 1.0)), float(contained)


def pair_j_law(q_tstar: np.ndarray, outside: float, contained: float | None = None) -> np.ndarray:
    """``[P(J = 0), P(J = 1), P(J = 2)] = [g, 1 - g - (L/M)², (L/M)²]`` with g = g(T*) by
    :func:`pair_containment` (module docstring), L = ``outside`` > 0, M = L + Σ ``q_tstar``.
    ``contained``: g(T*) when the caller has it (the wor rule: the cut's
    :attr:`~multidraft.theory.optimum._wor_race.OptimalCut.contained`, the same g from the scan's
    prefix sums, equal to rounding), then no pass over T*."""
    q_tstar = np.ascontiguousarray(q_tstar, dtype=np.float64)
    if not outside > 0:
        raise ValueError(f"pair_j_law: the U mass must be positive, got {outside}")
    if contained is not None:
        contained = float(contained)
    elif np.count_nonzero(q_tstar) + 1 < 2:  # T* without mass: J ≡ 2
        contained = 0.0
    else:
        _compiled()
        contained = float(_pair_prefixes(q_tstar, float(outside), np.zeros(0), 0, np.zeros(0))[3])
    total = outside + float(q_tstar.sum())
    both = min((outside / total) ** 2, 1.0 - contained)
    return np.array([contained, max(1.0 - contained - both, 0.0), both])


def _compiled() -> None:
    """Compile the kernel below on first use (:func:`~multidraft.theory._numba.compile_in_place`)."""
    compile_in_place(globals(), KERNELS)


def _add(total, error, x):
    """Neumaier's compensated step: ``(total + x, error + what that addition dropped)``."""
    s = total + x
    if abs(total) >= abs(x):
        error += (total - s) + x
    else:
        error += (x - s) + total
    return s, error


def _masses(q, outside):
    """``(M, big, M - q_big)``: the total mass (with ``outside``), the first largest token, and
    the mass of all the others summed (compensated, in one pass: the running maximum's mass
    joins the others when a larger token comes), which does not cancel when q_big ≈ M."""
    big, rest, error = -1, outside, 0.0
    for i in range(q.shape[0]):
        if big < 0:
            big = i
        elif q[i] > q[big]:
            rest, error = _add(rest, error, q[big])
            big = i
        else:
            rest, error = _add(rest, error, q[i])
    rest += error
    return rest + q[big], big, rest


def _pair_prefixes(q, outside, p, limit, out):
    """g(T_j) for j = 0..n (module docstring), written to ``out`` when it has room; a prefix
    holding every token of positive mass (and no ``outside``) has g = 1 exactly, as in the race.
    With ``p`` given, the cut values ``P_j + 1 - g(T_j)`` (P_j the plain left-to-right sum) are
    scanned for the first least one at j <= ``limit``. Returns ``(j*, its value, its g, g(T_n))``.
    The sums Q_j, Σ o_i, Σ q_i o_i and the others' prefix mass are compensated."""
    n = q.shape[0]
    total, big, rest = _masses(q, outside)
    last = n - 1  # the last token of positive mass, found from the end
    while last >= 0 and not q[last] > 0:
        last -= 1
    big_odds = q[big] / rest if rest > 0 else 0.0
    prefix, prefix_error, odds, odds_error, squares, squares_error = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    others, others_error, prefix_p = 0.0, 0.0, 0.0
    seen = False
    write, scan = out.shape[0] > n, p.shape[0] > 0
    if write:
        out[0] = 0.0
    best, best_value, best_g, g = 0, 1.0, 0.0, 0.0
    for i in range(n):
        prefix, prefix_error = _add(prefix, prefix_error, q[i])
        if i == big:
            seen = True
        else:
            o = q[i] / (total - q[i])
            odds, odds_error = _add(odds, odds_error, o)
            squares, squares_error = _add(squares, squares_error, q[i] * o)
            others, others_error = _add(others, others_error, q[i])
        g = (prefix + prefix_error) * (odds + odds_error) - (squares + squares_error)
        if seen:
            g += big_odds * (others + others_error)
        g = min(max(g / total, 0.0), 1.0) if i < last or outside > 0 else 1.0  # every draft inside: 1 exactly
        if write:
            out[i + 1] = g
        if scan:
            prefix_p += p[i]
            value = prefix_p + 1.0 - g
            if i < limit and value < best_value:
                best, best_value, best_g = i + 1, value, g
    return best, best_value, best_g, g


#: The compiled kernels of this module.
KERNELS = ("_add", "_masses", "_pair_prefixes")
