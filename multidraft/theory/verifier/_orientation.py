"""The optimal per-draft laws of two independent drafts by an ascent on one draft's law (issue 33).

Drafts ``X_1 ~ q_1``, ``X_2 ~ q_2`` independently, target p. A rule orients each draft pair
``(y, y')`` (draft 1 drew y, draft 2 drew y'): its per-draft laws ``x_1(y) = P(draft 1 selected,
X_1 = y)``, ``x_2`` likewise, are exactly the pairs that satisfy (GR)
``x_1(A_1) + x_2(A_2) <= h(q_1(A_1), q_2(A_2))``, ``h(a, b) = a + b - ab``, with
``x_1(Ω) + x_2(Ω) = 1``, and one staircase path realises any such pair
(:mod:`._staircase`, docs/nonidentical_verifier.md §4c). This module finds an optimal pair.

**Draft 2's law as the variable.** Write ``x_2 = q_2 (1 - ρ)``, ``ρ ∈ [0, 1]^n`` (ρ_j: the share of
draft 2's token j that goes to draft 1). For a set ``A_1`` of draft-1 mass a the worst ``A_2``
holds the tokens with ``1 - ρ_j > 1 - a``, so (GR) is the one-dimensional condition

    x_1(A) <= K_ρ(q_1(A)) for every A,      K_ρ(a) = Σ_j q_2(j) min(ρ_j, a)            (1)

(K concave, increasing, ``K(1) = 1 - x_2(Ω)``): draft 1's laws are the polymatroid ``P(K_ρ ∘ q_1)``.
With ``c = (p - x_2)_+`` and the polymatroid-box theorem, the best acceptance given ρ is

    V(ρ) = Σ_y min(p, x_2) + c(Ω) + min_k [K_ρ(A_k) - C_k]                                 (2)

with ``A_k``, ``C_k`` the prefix sums of ``q_1`` and c over the tokens by decreasing ``c / q_1``
(``K - C`` is concave between those prefixes, so its minimum over all masses sits at one). V is
concave in ρ (a minimum over (a, fractional set z) of ``K_ρ(a) - Σ z_j c_j(ρ)``, each concave) and

    g_j = q_2(j) (1{ρ_j < A_k*} - 1{j among the first k* tokens, c_j > 0})                  (3)

is a supergradient at the minimising prefix k*. Every rule's ``x_2`` is some ``q_2 (1 - ρ)``, and
V(ρ) is reached by the staircase from that ``x_2`` (draft 1's curtain along it has weight
``q_2({ρ > s})``, whose integral is K_ρ), so **P* = max_ρ V(ρ)**. :func:`ascend` climbs V by
projected supergradient steps with Polyak's step ``γ (P* - V) / |g|^2``, γ in (0, 2) (P* is known from the
threshold search); V is polyhedral, so its maxima are weakly sharp and the distance to them
shrinks geometrically (Polyak 1969; Burke & Ferris 1993). :func:`ascent_staircase` lets the two
drafts' laws take turns (the same construction with the roles swapped, each turn started from the
staircase's best answer to the last). That the turns end *at* P* (1-94 steps of the last turn on
every instance measured) is measured (docs/nonidentical_verifier.md §4e), not proved; whatever
they reach, the staircase's law is exact.

Checks: :func:`gr_excess` decides (GR) for given laws in O(n log n) by (1), without token orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.verifier._independent_rule import _stable_order
from multidraft.theory.verifier._staircase import _density_order as _staircase_order
from multidraft.theory.verifier._staircase import fit_staircase

__all__ = ["Ascent", "AscentStaircase", "response", "gr_excess", "ascend", "ascent_staircase", "ascent_split", "first_climbed", "ITERATIONS", "REACH", "STEP", "SWITCH"]

#: Most supergradient steps of :func:`ascend` (each two sorts, warm-started after the first).
ITERATIONS = 500
#: Above this share of tokens whose key changed, a step's sort is timsort from the last order
#: instead of :func:`_merge_moved`.
MERGE_SHARE = 0.25
#: :func:`ascend` stops this close to P* (the staircase's law is exact either way).
REACH = 1e-13
#: Most steps of one turn of :func:`ascent_staircase` before the other draft's law is climbed.
SWITCH = 100
#: Polyak's step is scaled by this (any factor in (0, 2) keeps the convergence; 1.5 took 9-15
#: steps where 1 took 13-27 on four Zipf pairs at n = 49152, docs §4e).
STEP = 1.5


@dataclass(frozen=True)
class Ascent:
    """Result of :func:`ascend`: draft 2's law ``law2 = q_2 (1 - rho)``, its best acceptance
    ``value`` = V(rho) (draft 1's best law against it), the steps taken, and whether ``value``
    came within :data:`REACH` of the optimum it was given."""

    law2: np.ndarray
    rho: np.ndarray
    value: float
    steps: int
    reached: bool


def _share_given(law: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``ρ = 1 - min(law / q, 1)``, the share of each token's draft mass that the draft gives away
    (0 where q = 0)."""
    return np.where(q > 0, 1.0 - np.minimum(law / np.where(q > 0, q, 1.0), 1.0), 0.0)


def _argsort(key: np.ndarray, hint: np.ndarray) -> np.ndarray:
    """Stable argsort of ``key`` started from the order ``hint`` (the previous step's: timsort
    then meets long runs, about 4x faster at n = 49152 than from scratch); ties in hint order."""
    return hint[np.argsort(key[hint], kind="stable")]


def _resort(key: np.ndarray, order: np.ndarray, moved: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(stable increasing order of key, key)`` from the last step's ``order``, where only the
    ``count`` tokens marked ``moved`` may have changed their key (few: 1-1,000 of 49,152 per step
    of the ascent at n = 49152): they are sorted among themselves and merged into the others'
    order (:func:`_merge_moved`, O(n + m log m)); ties stay in the last order, which is
    ``_argsort(key, order)``'s permutation exactly. Where more than :data:`MERGE_SHARE` of the
    tokens moved, that timsort."""
    if count > MERGE_SHARE * len(key):
        return _argsort(key, order), key
    compile_in_place(globals(), ["_merge_moved"])
    return _merge_moved(order, key, moved), key


def _merge_moved(order, key, moved):
    """``order`` (increasing in the previous keys, which only the ``moved`` tokens changed)
    re-sorted by ``key``: the moved tokens, in ``order``'s order, sorted stably among
    themselves, merged into the others (ties by position in ``order``). Compiled on first use."""
    n = order.shape[0]
    m = 0
    for i in range(n):
        if moved[order[i]]:
            m += 1
    tokens = np.empty(m, dtype=np.int64)
    place = np.empty(m, dtype=np.int64)  # each moved token's position in order
    j = 0
    for i in range(n):
        if moved[order[i]]:
            tokens[j], place[j] = order[i], i
            j += 1
    rank = np.argsort(key[tokens], kind="mergesort")
    out = np.empty(n, dtype=np.int64)
    i, j = 0, 0
    for k in range(n):
        while i < n and moved[order[i]]:
            i += 1
        if j < m:
            t = tokens[rank[j]]
            if i == n or key[t] < key[order[i]] or (key[t] == key[order[i]] and place[rank[j]] < i):
                out[k] = t
                j += 1
                continue
        out[k] = order[i]
        i += 1
    return out


def _k_at(q2: np.ndarray, rho: np.ndarray, a: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``K(a) = Σ_j q_2(j) min(ρ_j, a)`` at every entry of ``a`` (``order``: ρ ascending):
    O((n + len(a)) log n)."""
    sorted_rho, mass = rho[order], q2[order]
    below = np.concatenate([[0.0], np.cumsum(mass * sorted_rho)])
    total = np.concatenate([[0.0], np.cumsum(mass)])
    count = np.searchsorted(sorted_rho, a, side="left")  # tokens with ρ_j < a
    return below[count] + a * (total[-1] - total[count])


def _density_order(q: np.ndarray, law: np.ndarray) -> np.ndarray:
    """Tokens by decreasing ``law / q`` (``law > 0 = q`` first), ties in id order."""
    return np.argsort(_minus_density(q, law), kind="stable")


def _minus_density(q: np.ndarray, law: np.ndarray) -> np.ndarray:
    """``-law / q`` (``-inf`` where ``law > 0 = q``, 0 where both vanish): the key of :func:`_density_order`."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(q > 0, law / np.where(q > 0, q, 1.0), np.where(law > 0, np.inf, 0.0))


def _first_orders(q1: np.ndarray, short: np.ndarray, rho: np.ndarray) -> tuple:
    """The first step's ``(order, key)`` pairs: :func:`_density_order` of ``short`` and the
    increasing order of ρ, by the radix sorts of :func:`._staircase._density_order` (where every
    ``q_1 > 0``; else numpy's) and :func:`._independent_rule._stable_order` (``ρ / 1``): the
    same permutations, ties in id order, ~10x faster than numpy's at n = 49152."""
    key = _minus_density(q1, short)
    by_density = _staircase_order(short, q1, np.arange(len(q1))) if (q1 > 0).all() else np.argsort(key, kind="stable")
    return (by_density, key), (_stable_order(rho, np.ones(len(rho))), rho)


def _min_slack(order, q1, short, by_rho, rho, q2):
    """``(k*, min_k [K(A_k) - C_k], A_k*)``: the minimum of eq. (2) over the n + 1 prefixes of
    ``order`` (A, C: prefix sums of ``q1``, ``short``), with K read off ρ in the order ``by_rho``
    (ascending) by one merge: O(n). Sums sequential, as numpy's cumsum. Compiled on first use."""
    n = order.shape[0]
    total = 0.0
    for j in range(n):
        total += q2[by_rho[j]]
    below, passed, j = 0.0, 0.0, 0  # Σ q_2 ρ and Σ q_2 over the ρ_j < a met so far
    a, c, best, best_k, best_a = 0.0, 0.0, 0.0, 0, 0.0
    for i in range(n + 1):
        while j < n and rho[by_rho[j]] < a:
            below += q2[by_rho[j]] * rho[by_rho[j]]
            passed += q2[by_rho[j]]
            j += 1
        slack = below + a * (total - passed) - c
        if slack < best:
            best, best_k, best_a = slack, i, a
        if i < n:
            a += q1[order[i]]
            c += short[order[i]]
    return best_k, best, best_a


def response(p: np.ndarray, q1: np.ndarray, q2: np.ndarray, rho: np.ndarray) -> tuple[float, np.ndarray]:
    """``(V(ρ), g)``: the best acceptance ``max Σ min(p, x_1 + x_2)`` over draft-1 laws x_1 that
    satisfy (GR) with ``x_2 = q_2 (1 - ρ)``, eq. (2) of the module docstring, and a supergradient
    g of the concave V at ρ, eq. (3). ``p, q1, q2``: distributions of length n; ``ρ`` in [0, 1]^n.

    Source: (GR) of docs/nonidentical_verifier.md §4c reduced to one dimension (§4e, Lemma 6);
    V is what the staircase from ``x_2`` reaches (:func:`._staircase.fit_staircase`, draft 1's
    curtain against ``(p - x_2)_+``). Complexity O(n log n): two sorts (radix) and one compiled O(n) merge.

    Uniform drafts on two tokens with p = (0.75, 0.25) give ``P* = 0.75 + 0.25 = 1`` when draft 2
    keeps all it drew of token 0 and gives token 1 away:

    >>> import numpy as np
    >>> value, g = response(np.array([0.75, 0.25]), np.full(2, 0.5), np.full(2, 0.5), np.array([0.0, 1.0]))
    >>> round(value, 12)
    1.0
    """
    return _response(p, q1, q2, rho, (None, None))[:2]


def _response(p: np.ndarray, q1: np.ndarray, q2: np.ndarray, rho: np.ndarray, hints: tuple) -> tuple[float, np.ndarray, tuple]:
    """:func:`response` and its two orders (decreasing ``(p - x_2)_+ / q_1``, increasing ρ) with
    their keys, each sort started from ``hints`` (the previous step's ``(order, key)`` pairs, or
    None: :func:`_first_orders`)."""
    compile_in_place(globals(), ["_min_slack"])
    law2 = q2 * (1.0 - rho)
    short = np.maximum(p - law2, 0.0)
    if hints[0] is None:
        by_density, by_rho = _first_orders(q1, short, rho)
    else:  # only the tokens whose ρ moved change their keys
        (order, last), (rho_order, last_rho) = hints
        moved = rho != last_rho
        changed = np.flatnonzero(moved)
        key = last.copy()
        key[changed] = _minus_density(q1[changed], short[changed])
        by_density, by_rho = _resort(key, order, moved, len(changed)), _resort(rho, rho_order, moved, len(changed))
    order = by_density[0]
    k, slack, a = _min_slack(order, q1, short, by_rho[0], rho, q2)
    value = float(np.minimum(p, law2).sum() + short.sum() + slack)
    first = np.zeros(len(p), dtype=bool)
    first[order[:k]] = True
    g = q2 * ((rho < a).astype(float) - (first & (short > 0)))
    return value, g, (by_density, by_rho)


def gr_excess(qs: tuple, laws: tuple) -> float:
    """``max_{A_1, A_2} [x_1(A_1) + x_2(A_2) - h(q_1(A_1), q_2(A_2))]`` over all pairs of
    (fractional) token sets: ``<= 0`` iff the laws satisfy (GR). By eq. (1) of the module
    docstring it equals ``max_a [X_1(a) - K(a)]`` with ``X_1(a)`` the largest x_1-mass on draft-1
    mass a and ``ρ = 1 - x_2 / q_2``; ``X_1`` is linear between the prefixes of the decreasing
    ``x_1 / q_1`` order and K concave, so the maximum sits at one of the n + 1 prefixes.

    ``qs = (q_1, q_2)``, ``laws = (x_1, x_2)``: arrays of length n, ``0 <= x_i``; a token with
    ``x_2 > q_2 + 1e-12`` is refused (no rule gives draft 2 more than it drew). The total
    ``x_1(Ω) + x_2(Ω) = 1`` is not part of (GR) and is not checked here. O(n log n).

    Source: docs/nonidentical_verifier.md §4e (Lemma 6); an independent route to the prefix-pair
    check of :func:`._ordered_split.prefix_pair_violation`, which needs the density orders.

    >>> import numpy as np
    >>> q = np.full(2, 0.5)
    >>> round(gr_excess((q, q), (np.array([0.5, 0.0]), np.array([0.25, 0.25]))), 12)  # draft 1 selected iff it drew token 0
    0.0
    >>> gr_excess((q, q), (np.array([0.5, 0.0]), np.array([0.0, 0.5]))) > 0  # each draft always wins its token
    True
    """
    q1, q2 = (np.asarray(q, dtype=float) for q in qs)
    x1, x2 = (np.asarray(x, dtype=float) for x in laws)
    if not q1.shape == q2.shape == x1.shape == x2.shape or q1.ndim != 1:
        raise ValueError(f"gr_excess: drafts and laws must be 1-D of one length, got shapes {[a.shape for a in (q1, q2, x1, x2)]}")
    if (x1 < 0).any() or (x2 < 0).any():
        raise ValueError("gr_excess: laws must be non-negative")
    if (x2 > q2 + 1e-12).any():  # a law read off pieces rounds by ~1e-18 beyond tiny masses
        raise ValueError("gr_excess: draft 2's law exceeds its draft mass on some token (x_2 <= q_2 for every rule)")
    rho = _share_given(x2, q2)
    order = _density_order(q1, x1)
    masses, sums = (np.concatenate([[0.0], np.cumsum(v[order])]) for v in (q1, x1))
    return float((sums - _k_at(q2, rho, masses, np.argsort(rho, kind="stable"))).max())


def _check(p: np.ndarray, q1: np.ndarray, q2: np.ndarray, optimum: float, iterations: int) -> None:
    if not p.ndim == 1 or not p.shape == q1.shape == q2.shape:
        raise ValueError(f"ascend: target and drafts must be 1-D of one length, got shapes {p.shape}, {q1.shape}, {q2.shape}")
    if not np.isfinite(optimum) or not 0.0 <= optimum <= 1.0 + 1e-12:
        raise ValueError(f"ascend: optimum must be P* in [0, 1], got {optimum!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
        raise ValueError(f"ascend: iterations must be an integer >= 1, got {iterations!r}")


def ascend(
    target: np.ndarray, draft1: np.ndarray, draft2: np.ndarray, optimum: float, *, iterations: int = ITERATIONS, start: np.ndarray | None = None
) -> Ascent:
    """Projected supergradient ascent on ``V(ρ)`` (module docstring) with Polyak's step:

        ρ ← clip(ρ + γ (P* - V(ρ)) / |g|^2 · g, 0, 1),  γ = :data:`STEP`,  from ``x_2 = min(p, q_2)``,

    stopping within :data:`REACH` of ``optimum`` (P*), at a stationary point (g = 0, or a step
    the box stops: then ρ maximises V), or after ``iterations`` steps; returns the best ρ seen.
    ``start``: the first ρ instead (length n, in [0, 1]).

    ``target``, ``draft1``, ``draft2``: distributions of length n (float arrays summing to 1);
    ``optimum``: P* (:func:`multidraft.theory.optimum.product_cut`). Raises ``ValueError`` for
    other shapes, an optimum outside [0, 1], ``iterations`` that is not an integer >= 1, or a
    ``start`` of another length or outside [0, 1].

    Source: docs/nonidentical_verifier.md §4e; Polyak, "Minimization of unsmooth functionals"
    (1969). Complexity: the first step two radix sorts, O(n); each later one O(n + m log m), m the
    tokens whose ρ moved (their keys re-sorted and merged into the last orders, 1-1,000 of 49,152
    on the Zipf pairs); 1-15 steps on the 15 Zipf pairs at n = 49152 (§4e).

    >>> import numpy as np
    >>> p, q1, q2 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])
    >>> out = ascend(p, q1, q2, 0.78)
    >>> round(out.value, 12), out.reached
    (0.78, True)
    """
    p, q1, q2 = (np.asarray(x, dtype=float) for x in (target, draft1, draft2))
    _check(p, q1, q2, optimum, iterations)
    if start is None:
        rho = _share_given(p, q2)
    else:
        rho = np.asarray(start, dtype=float)
        if rho.shape != p.shape or not np.all((rho >= 0.0) & (rho <= 1.0)):
            raise ValueError(f"ascend: start must be a length-{len(p)} array in [0, 1]")
    best_value, best_rho, steps, hints = -np.inf, rho, 0, (None, None)
    for steps in range(1, iterations + 1):
        value, g, hints = _response(p, q1, q2, rho, hints)
        if value > best_value:
            best_value, best_rho = value, rho
        norm = float((g * g).sum())  # not g @ g: BLAS's threads cost 8 ms CPU at n = 49152 on a loaded machine
        if optimum - value <= REACH or norm == 0.0:
            break
        step = np.clip(rho + STEP * (optimum - value) / norm * g, 0.0, 1.0)
        if np.array_equal(step, rho):
            break
        rho = step
    return Ascent(q2 * (1.0 - best_rho), best_rho, best_value, steps, bool(optimum - best_value <= REACH))


@dataclass(frozen=True)
class AscentStaircase:
    """Result of :func:`ascent_staircase`: the staircase's per-draft laws and layouts (read off its
    pieces), the draft ``fixed`` whose law was climbed in the turn that built it (1: draft 2's; 0:
    draft 1's) and that turn's :class:`Ascent` (whose ``law2`` is the climbed draft's law: that
    draft is ``draft2`` of :func:`ascend`)."""

    law1: np.ndarray
    law2: np.ndarray
    layouts: tuple
    fixed: int
    ascent: Ascent


def first_climbed(qs: tuple) -> int:
    """The draft whose law :func:`ascent_staircase` climbs first: the flatter one, of smaller
    collision probability ``Σ q²`` (1, draft 2's, on a tie; no logarithms, O(n)). Measured, not
    proved (docs/nonidentical_verifier.md §4e): on the 15 Zipf pairs at n = 49152 the ascent on the
    flatter draft's law reached P* in 1-15 steps, on the other's in 1-12 where the drafts are
    alike and not within 500 steps on 0.5/1.2, 0.5/1.6, 0.5/2.0 and 0.8/2.0.

    >>> import numpy as np
    >>> first_climbed((np.array([0.5, 0.5]), np.array([0.9, 0.1]))), first_climbed((np.array([0.9, 0.1]), np.array([0.5, 0.5])))
    (0, 1)
    """
    collision = [float((q * q).sum()) for q in qs]  # not q @ q: BLAS's threads (see ascend)
    return 0 if collision[0] < collision[1] else 1


def ascent_staircase(p: np.ndarray, qs: tuple, parts: tuple, optimum: float, iterations: int = ITERATIONS) -> AscentStaircase:
    """One staircase path from alternating ascents: :func:`ascend` on the law of the draft of
    :func:`first_climbed` (the flatter one; say draft 2) for at most :data:`SWITCH` steps, the
    staircase from it (:func:`._staircase.fit_staircase`: draft 2 side by side by density, draft
    1's curtain against ``(p - x_2)_+``, so draft 1's law is its best answer), and, unless the
    ascent reached the optimum, the ascent on draft 1's law started from that best answer, and so
    on, the drafts taking turns, until the optimum or ``iterations`` steps in all;
    the best exact path is returned. A staircase that does not tile hands the turn to the other
    draft from its own start (``x = min(p, q)``). Both laws are read off the pieces, so the
    acceptance ``Σ min(p, law1 + law2)`` is the path's own (exact, lossless whatever the ascents
    reached).

    ``parts`` = (U, T*) as token ids, ``optimum`` = P*. At an optimal law a U draft beats every T*
    draft (complementary slackness), so the staircase's clipping into the parts' boxes leaves it
    unchanged and the path reaches V = P*. Raises ``RuntimeError`` if no staircase tiles.

    Why turns (docs §4e): the ascent on one draft's law can crawl (on random Dirichlet instances
    at n = 4096, 4 of 24 still 2e-6 to 1e-5 short after 500 steps; on the Zipf pairs, the colder
    draft's law), and the turn to the other draft, started from the best answer, ends in 5-91
    steps. (The turns were first needed for a staircase that did not tile, n = 49152, 0.8/1.2; the
    stack pass tiles it since branch ``stairfast``, and a staircase that does not tile still hands
    the turn on.)
    """
    fixed, start, spent, best, value = first_climbed(qs), None, 0, None, -np.inf
    while spent < iterations:
        out = ascend(p, qs[1 - fixed], qs[fixed], optimum, iterations=min(SWITCH, iterations - spent), start=start)
        spent += out.steps
        turn, fixed, start = fixed, 1 - fixed, None  # the other draft next, from its own start unless this staircase tiles
        try:
            law1, law2, layouts = fit_staircase(p, qs, parts, out.law2, turn)
        except RuntimeError:
            continue
        acceptance = float(np.minimum(p, law1 + law2).sum())
        if acceptance > value:
            best, value = AscentStaircase(law1, law2, layouts, turn, out), acceptance
        if out.reached:
            break
        start = _share_given((law1, law2)[fixed], qs[fixed])
    if best is None:
        raise RuntimeError("ascent_staircase: no staircase from the ascents' laws tiles")
    return best


def ascent_split(p: np.ndarray, qs: tuple, parts: tuple, optimum: float, iterations: int = ITERATIONS) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-draft laws ``(x_1, x_2, Σ min(p, x_1 + x_2))`` of the staircase of
    :func:`ascent_staircase`: the contract of :func:`._ordered_split.ordered_split`'s return,
    which it can replace. Same inputs and errors as :func:`ascent_staircase`.

    >>> import numpy as np
    >>> p, q1, q2 = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.1, 0.8])
    >>> x1, x2, value = ascent_split(p, (q1, q2), (np.array([0]), np.array([1, 2])), 0.78)
    >>> round(value, 12)
    0.78
    """
    out = ascent_staircase(p, qs, parts, optimum, iterations)
    return out.law1, out.law2, float(np.minimum(p, out.law1 + out.law2).sum())
