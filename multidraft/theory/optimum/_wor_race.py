"""Exponential-race quantities for drafts without replacement: the optimal cut by a pruned exact
scan, and the law of the J-curtain's count J.

**The race.** K draws without replacement from q are the K earliest arrivals of independent
clocks τ_a = E_a / q_a. N_T(t), the number of tokens of T arrived by t, is Poisson-binomial with
probabilities 1 - e^{-q_a t}; its law truncated at K - 1 is the product of ``e^{-q_a t} +
(1 - e^{-q_a t}) x`` over a ∈ T modulo x^K (convex combinations only: stable).

**The optimal cut** (docs/optimal_verifier.md §7). ``P* = min_j [p(T_j) + 1 - g(T_j)]`` over the
prefixes T_j of the decreasing-q/p order, ``g(T) = P(set(X) ⊆ T) = ∫ λ e^{-λt} P(N_T(t) >= K) dt``
with λ = 1 - q(T). Two bounds prune the scan without changing its answer:

* ``g(T) <= q(T)^K`` (each draw lands in T with probability at most q(T)), so the iid cut
  ``p(T) + 1 - q(T)^K`` is a *lower* bound on the cut of T;
* ``g(T) >= Π_{i<K} (q(T) - M_i(T))_+`` (M_i: mass of the i largest tokens of T; the i-th draw
  lands in T with probability at least q(T) - M_i(T)), an *upper* bound on the cut.

Every prefix whose lower bound exceeds the smallest upper bound B is beaten by the prefix that
attains B, so only the *candidates* (lower bound <= B) are evaluated exactly: one compiled pass
over the tokens up to the last candidate, the integral accumulated at candidates only. The
answer is the full scan's by construction (tests compare the two).

**The law of J** (the J-curtain, docs/optimal_verifier.md §8). U-points (first arrivals and
repeats of U tokens in the iid stream) form a Poisson process of rate L = q(U) independent of
the race on T*; J counts them up to the first time that they and the distinct T*-arrivals number
K, so ``P(J >= j) = P(N_{T*}(Γ_j) <= K - j)`` with Γ_j ~ Gamma(j, L):

    P(J >= j) = ∫ L^j t^{j-1} e^{-Lt} / (j-1)! · P(N_{T*}(t) <= K - j) dt,   j = 1..K.

``P(J >= 1) = h(U) = 1 - g(T*)``, which the scan computes independently (a check).

**Quadrature.** Trapezoid rule in u = log t (integrands analytic in a strip, decaying doubly
exponentially): the step from :func:`~multidraft.theory.laws._kernels.race_step`'s error bound
(absolute discretisation error below 1e-14 for the scan; for the J-law the bound's k-term grows
by at most 2^K, so the tolerance is divided by 2^K), the ends where the integrand is below 1e-18.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from multidraft.theory.laws._kernels import RACE_TOLERANCE, race_step, ratio_order
from multidraft.theory.optimum import _wor_moments
from multidraft.theory._numba import compile_in_place
from multidraft.theory.optimum._wor_pairs import pair_cut, pair_j_law
from multidraft.theory.optimum._wor_moments import ROUNDING, SERIES_LIMIT, light_split, moment_order, stirling_weights
from multidraft.theory.optimum._wor_sums import gather_checked, outside_mass, prefix_bounds, race_spread, radix_order_64, scan_keys, tighten_bounds

__all__ = ["OptimalCut", "optimal_cut", "full_scan_cut", "j_law", "race_j_law", "count_law"]


@dataclass(frozen=True)
class OptimalCut:
    """The min-cut prefix of the decreasing-q/p order for drafts without replacement.

    Attributes
    ----------
    order : ndarray [n] int64
        Tokens by decreasing q/p (p = 0 < q first, q = 0 last).
    size : int
        |T*|: T* = ``order[:size]``.
    value : float
        P* = p(T*) + 1 - g(T*).
    contained : float
        g(T*) = P(set(X) ⊆ T*).
    candidates : int
        Prefixes the bounds leave as candidates (the rest were pruned); of these, only the
        ones whose lower bound is within the tolerance of the best cut found are evaluated.
    p_sorted, q_sorted : ndarray [n] or None
        p and q in scan order (``target[order]``, ``draft[order]``), as the scan gathered them
        (None where not given): the rule's parts read them instead of gathering again.
    """

    order: np.ndarray
    size: int
    value: float
    contained: float
    candidates: int
    p_sorted: np.ndarray | None = field(default=None, repr=False, compare=False)
    q_sorted: np.ndarray | None = field(default=None, repr=False, compare=False)


#: Exact probes that tighten the pruning bound before the candidate pass, and the candidate
#: count below which no probe is worth its race.
_PROBES, _FEW = 8, 64


def scan_order(target: np.ndarray, draft: np.ndarray, sort: Callable[[np.ndarray], np.ndarray | None] | None = None) -> np.ndarray:
    """The scan order of :func:`~multidraft.theory.laws._kernels.ratio_order` (decreasing q/p,
    p = 0 < q first, p = q = 0 last) by a radix sort of the keys ``-q/p``: their bits made
    order-preserving as unsigned integers (sign bit set for positives, all bits flipped for
    negatives, NaN the largest), then six stable counting passes of 11 bits, O(n) (an argsort
    at n = 49152 took 2.3 ms, a quarter of the cut). Distinct keys have one order; where two
    keys tie, ``ratio_order`` itself is taken, so that the scan -- whose argmin over a tie
    class's prefixes can turn on the rounding of their sums (p = q: T* = ∅ or Ω, both at P* = 1)
    -- is the one it always was. ``sort``: another stable ascending sort of the keys (NaN last)
    to try first (the verifier passes one of two or three passes,
    :func:`~multidraft.theory.verifier._wor_parts.radix_order`; the result is the same), which
    may decline by returning None.

    >>> scan_order(np.array([0.5, 0.25, 0.125, 0.0]), np.array([0.25, 0.25, 0.0, 0.5])).tolist()
    [3, 1, 0, 2]
    """
    return _sorted_by_scan(np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64), sort)[0]


def _sorted_by_scan(p: np.ndarray, q: np.ndarray, sort) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(order, p[order], q[order], draftable)`` for :func:`scan_order`, ``draftable`` =
    ``np.count_nonzero(q[order])``: the gathers, the check for ties and the count in one compiled
    pass (:func:`~multidraft.theory.optimum._wor_sums.gather_checked`; numpy's ``key[order]``,
    two gathers and the count were four passes)."""
    p, q = np.ascontiguousarray(p), np.ascontiguousarray(q)
    key = scan_keys(p, q)
    order = None if sort is None else sort(key)
    if order is None:
        order = radix_order_64(key)
    p_sorted, q_sorted = np.empty(len(p)), np.empty(len(q))
    tie, draftable = gather_checked(p, q, np.ascontiguousarray(order, dtype=np.int64), p_sorted, q_sorted)
    if tie:
        order = ratio_order(p, q)
        p_sorted, q_sorted = p[order], q[order]
        draftable = int(np.count_nonzero(q_sorted))
    return order, p_sorted, q_sorted, draftable


class RaceBasis:
    """What every :class:`PrefixRace` of one scan order shares: the outside masses λ_j
    (j = 0..n), σ of :func:`~multidraft.theory.optimum._wor_sums.race_spread` and the trapezoid
    step from ``race_step``'s bound (both of its forms). The cut's probes and its final race take
    it from :func:`race_basis` once. σ and the step are computed on first use: a cut whose
    candidates all hold the whole draft mass (λ = 0, g = 1 without a race: every P* = 1 node of
    a tree) never needs them (their 0.3-0.5 ms at n = 49152). It keeps the races' checkpoints
    (:meth:`checkpoints`): a P* < 1 node's cut ran 2-9 races over ~49,000 tokens, most of them at
    one node set (0.5 ms each at n = 49152, K = 2)."""

    def __init__(self, q_sorted: np.ndarray, k: int, outside: np.ndarray) -> None:
        self.outside, self._q_sorted, self._k = outside, q_sorted, k
        self._known: dict[tuple[bytes, float], tuple] = {}

    def checkpoints(self, head: np.ndarray, light: np.ndarray, scale: float, t: np.ndarray, a: np.ndarray, prefixes: np.ndarray) -> tuple:
        """``(q, light, scale, starts, marks)`` of the split race over ``head`` (q in scan order,
        ``light`` its mask, ``scale`` its largest light mass) at the nodes ``t``: checkpoints every
        :data:`CHECKPOINT` tokens and at ``prefixes``. A token's factor and powers depend on itself,
        the nodes and the scale only, and enter in token order by the same operations wherever a
        pass starts: a state is the same from any race that reaches it, so those made for the
        same nodes and scale are kept, over the longest head asked (``q``, ``light`` cover it)."""
        key = (t.tobytes(), scale)
        known = self._known.get(key)
        if known is not None and len(known[0]) >= len(head):
            return known
        begin = 0 if known is None else int(known[3][-1])
        starts = np.union1d(np.arange(0, len(head) + 1, CHECKPOINT), prefixes)
        starts = np.union1d(starts[starts >= begin], [begin])
        initial = _empty_prefix(self._k, len(t), a.shape[0]) if known is None else tuple(x[-1] for x in known[4])
        marks = _checkpoints(head, light, scale, a, self._k, t, starts, *initial)
        if known is not None:  # the known marks, then the new ones after their last (its state again)
            starts, marks = np.concatenate([known[3], starts[1:]]), tuple(np.concatenate([old, new[1:]]) for old, new in zip(known[4], marks))
        self._known[key] = (head, light, scale, starts, marks)
        return self._known[key]

    @functools.cached_property
    def _spread_step(self) -> tuple[float, float]:
        spread, least_top = race_spread(self._q_sorted, self._k)
        return spread, race_step(self._k, 1.0, spread=spread, least_top=least_top if least_top > 0 else None)

    @property
    def spread(self) -> float:
        return self._spread_step[0]

    @property
    def step(self) -> float:
        return self._spread_step[1]


def race_basis(q_sorted: np.ndarray, k: int) -> RaceBasis:
    """The :class:`RaceBasis` of the draft masses in scan order."""
    return RaceBasis(q_sorted, k, outside_mass(q_sorted))


def _empty_prefix(k: int, nodes: int, sums: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``(ν, state, mass)`` of a race's empty prefix: no power sums, the product 1, no mass."""
    state = np.zeros((k, nodes))
    state[0, :] = 1.0
    return np.zeros(sums), state, 0.0


def _scan_nodes(k: int, step: float, smallest_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and trapezoid weights (in u = log t, step ``step``) for ``∫ λ e^{-λt} P(N >= K) dt``:
    below ``(1e-18 K!)^{1/(K+1)}`` the integrand in u is below 1e-18, above ``45/λ_min`` likewise."""
    t_lo = (1e-18 * math.factorial(k)) ** (1.0 / (k + 1))
    t_hi = max(45.0 / smallest_rate, 2.0 * t_lo)
    u = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    t = np.exp(u)
    return t, np.full(len(t), step)


#: Tokens between two checkpoints of a prefix race (a prefix costs at most this many token
#: updates beyond its checkpoint).
CHECKPOINT = 256


class PrefixRace:
    """``g(T_j) = P(set(X) ⊆ T_j)`` for prefixes T_j of one scan order, evaluated on demand.

    ``prefixes`` are the prefix sizes it may be asked about: the nodes reach the smallest
    outside mass among those that are not negligible (below), and one compiled pass over the
    tokens up to the last of them stores checkpoints every
    :data:`CHECKPOINT` tokens and at each of those prefixes: the product of the Bernoulli factors
    of the tokens so far that are not light, and the power sums of the light ones (``q t_max <=
    LIGHT``, :mod:`~multidraft.theory._wor_moments`). A prefix it was built for then costs one
    evaluation per node, O(K L + K²) (L = :func:`moment_order`), any other at most CHECKPOINT
    token updates more; sorted prefixes that follow each other continue from the previous one.
    (A prefix's g does not depend on where its product was resumed: every token enters it in
    order, by the same operations.) A prefix whose rounding bound from
    the power sums exceeds ``RACE_TOLERANCE`` is recomputed token by token; ``split=False`` takes
    every token one by one (the reference). Prefixes whose outside mass makes
    ``K λ / σ < RACE_TOLERANCE`` get 1 (within tolerance by that bound on P(some draw falls
    outside), as in the full race).
    """

    def __init__(
        self, q_sorted: np.ndarray, k: int, prefixes: np.ndarray, *, split: bool = True, basis: RaceBasis | None = None
    ) -> None:
        self.k = k
        basis = race_basis(q_sorted, k) if basis is None else basis
        self.outside, self.spread = basis.outside, basis.spread
        prefixes = np.asarray(prefixes, dtype=np.int64)
        live = prefixes[~self.negligible(prefixes)]
        smallest_rate = float(self.outside[live].min()) if len(live) else 1.0
        self.t, self.w = _scan_nodes(k, basis.step, smallest_rate)
        self.head = np.ascontiguousarray(q_sorted[: int(live.max()) if len(live) else 0], dtype=np.float64)
        self.a = stirling_weights(moment_order(k), k)
        self.split = split
        self._live = live
        self._basis = basis
        self._marks = self._checkpoints(split)

    def _checkpoints(self, split: bool) -> tuple:
        """(q, light mask, scale, checkpoint prefixes, marks): the basis's split pass, or token by token."""
        _compiled()
        if split:
            light, scale = light_split(self.head, float(self.t[-1]))
            return self._basis.checkpoints(self.head, light, scale, self.t, self.a, self._live)
        light, starts = np.zeros(len(self.head), dtype=bool), np.zeros(1, dtype=np.int64)
        return self.head, light, 1.0, starts, _checkpoints(self.head, light, 1.0, self.a, self.k, self.t, starts, *_empty_prefix(self.k, len(self.t), self.a.shape[0]))

    def negligible(self, prefixes: np.ndarray) -> np.ndarray:
        """Prefixes whose value is 1 within ``RACE_TOLERANCE``."""
        return self.k * self.outside[prefixes] / max(self.spread, 1e-300) < RACE_TOLERANCE

    def containment(self, prefixes: np.ndarray) -> np.ndarray:
        """g at the given prefix sizes (sorted, 1 <= j <= upto)."""
        prefixes = np.asarray(prefixes, dtype=np.int64)
        out = np.ones(len(prefixes))
        live = prefixes[~self.negligible(prefixes)]
        if len(live) == 0:
            return out
        values, error = self._run(self._marks, live)
        redo = error > RACE_TOLERANCE
        if redo.any():  # token by token, from the start
            values[redo], _ = self._run(self._checkpoints(False), live[redo])
        out[~self.negligible(prefixes)] = values
        return np.clip(out, 0.0, 1.0)

    def _run(self, marks: tuple, prefixes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, light, scale, starts, (nu_marks, state_marks, mass_marks) = marks
        return _containment(
            q, light, scale, self.a, self.k, self.t, self.w, starts, nu_marks, state_marks, mass_marks,
            prefixes, self.outside[prefixes],
        )  # fmt: skip


def containment_at(
    q_sorted: np.ndarray, k: int, prefixes: np.ndarray, *, split: bool = True, basis: RaceBasis | None = None
) -> np.ndarray:
    """``g(T_j)`` at the given prefix sizes j (sorted, 1 <= j <= n), for q in scan order: one
    :class:`PrefixRace` over the first ``max(prefixes)`` tokens (``basis``: its
    :func:`race_basis`, if known)."""
    prefixes = np.asarray(prefixes, dtype=np.int64)
    if len(prefixes) == 0:
        return np.ones(0)
    return PrefixRace(q_sorted, k, prefixes, split=split, basis=basis).containment(prefixes)


def optimal_cut(
    target: np.ndarray, draft: np.ndarray, k: int, *, tolerance: float = 1e-13, sort: Callable[[np.ndarray], np.ndarray | None] | None = None
) -> OptimalCut:
    """The optimal cut of drafts without replacement by the pruned exact scan (module
    docstring). ``tolerance`` widens the candidate set against rounding of the bounds; ``sort``
    as in :func:`scan_order`.

    Complexity: one radix sort (:func:`scan_order`), O(n K) for the bounds, a :class:`PrefixRace`
    per probe and one for the final candidates, each over the first m tokens (m = its last prefix: O(m L) for the light
    tokens, O(G K) per other token), and O(CHECKPOINT L + G K L) per prefix evaluated. (One race
    for all would take its nodes out to the smallest outside mass of any initial candidate: no
    token is light then.) K = 2: every prefix in closed form instead, O(n) after the sort
    (:func:`~multidraft.theory.optimum._wor_pairs.pair_cut`; ``candidates`` counts them all)."""
    p, q = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    order, p_sorted, q_sorted, draftable = _sorted_by_scan(p, q, sort)  # prefixes past the draftable tokens only add p
    if k == 2:  # every prefix in closed form, one pass (_wor_pairs)
        best, value, contained = pair_cut(p_sorted, q_sorted, draftable)
        return OptimalCut(order, best, value, contained, draftable + 1, p_sorted, q_sorted)
    prefix_p, _, lower, upper = prefix_bounds(p_sorted, q_sorted, k)
    bound = float(upper[: draftable + 1].min())
    lower = lower[: draftable + 1]
    basis = race_basis(q_sorted, k)
    # Exact cuts at the most promising prefixes shrink B, and (g convex in the prefix mass along
    # the chain, Lemma 1) their chords lower every other prefix's cut bound. The chords run in
    # x = -λ_j (λ_j the outside mass, summed from the tail): as a prefix sum, Q_j rounds by
    # ~1e-16 per token, which is all of the spacing left when one token holds 1 - 1e-12.
    candidates = np.flatnonzero(lower <= bound + tolerance)
    count, probe = len(candidates), int(candidates[np.argmin(lower[candidates])]) if len(candidates) else -1
    if count > _FEW and probe != 0:  # else no probe: the bound and the candidates stay (every P* = 1 node)
        place = -basis.outside[: draftable + 1]
        known_x, known_g = [float(place[0]), 0.0], [0.0, 1.0]
        for _ in range(_PROBES):
            if count <= _FEW or probe == 0 or place[probe] in known_x:  # probe's bound exact already: no better prefix
                break
            contained = float(containment_at(q_sorted, k, np.array([probe]), basis=basis)[0])
            bound = min(bound, prefix_p[probe] + 1.0 - contained)
            at = int(np.searchsorted(known_x, place[probe]))
            known_x.insert(at, float(place[probe]))
            known_g.insert(at, contained)
            count, probe = tighten_bounds(lower, prefix_p, place, known_x, known_g, bound + tolerance)
        candidates = np.flatnonzero(lower <= bound + tolerance)
    contained = _candidate_containment(q_sorted, k, candidates, lower[candidates], prefix_p, tolerance, basis)
    values = prefix_p[candidates] + 1.0 - contained
    best = int(np.nanargmin(values))
    return OptimalCut(
        order, int(candidates[best]), float(min(values[best], 1.0)), float(contained[best]), len(candidates), p_sorted, q_sorted
    )


def _candidate_containment(q_sorted, k, candidates, lower, prefix_p, tolerance, basis):
    """g at the candidates that can still hold the minimum, NaN at the others: one
    :class:`PrefixRace` over all of them (so each g is what a race over all gives: a prefix's g
    does not depend on which others are asked), first the candidate of least lower bound, then
    those whose lower bound is within ``tolerance`` of its cut (any other's cut, at least its
    bound less the race's error of ~1e-14, exceeds that one: it cannot be the minimum). The race
    is built only if some prefix asked has outside mass λ > 0 (a prefix's g does not depend on
    which others are asked; λ = 0 is negligible in the race, g = 1): at P* = 1 the candidates
    are often ∅ and the draftable end alone, and neither needs a race nor σ."""
    contained = np.full(len(candidates), np.nan)
    contained[candidates == 0] = 0.0
    inner = candidates[candidates > 0]
    if len(inner) == 0:
        return contained
    race = None

    def containment(prefixes):  # the race made on first need: a prefix with λ = 0 has g = 1 (as in the race)
        nonlocal race
        out = np.ones(len(prefixes))
        raced = basis.outside[prefixes] > 0.0
        if raced.any():
            if race is None:
                race = PrefixRace(q_sorted, k, inner, basis=basis)
            out[raced] = race.containment(prefixes[raced])
        return out

    first = int(np.argmin(lower))
    if candidates[first] > 0 and len(inner) > 2:
        contained[first] = containment(candidates[first : first + 1])[0]
    known = ~np.isnan(contained)
    reach = float(np.min(prefix_p[candidates[known]] + 1.0 - contained[known])) if known.any() else np.inf
    ask = np.flatnonzero(~known & (lower <= reach + tolerance))
    contained[ask] = containment(candidates[ask])
    return contained


def full_scan_cut(target: np.ndarray, draft: np.ndarray, k: int) -> OptimalCut:
    """The same cut by evaluating every prefix token by token (the reference of the pruning and
    of the power sums; O(n G K))."""
    p, q = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    order = ratio_order(p, q)
    q_sorted = q[order]
    draftable = int(np.count_nonzero(q_sorted))
    prefixes = np.arange(draftable + 1)
    contained = np.zeros(draftable + 1)
    contained[1:] = containment_at(q_sorted, k, prefixes[1:], split=False)
    values = np.concatenate([[0.0], np.cumsum(p[order])])[: draftable + 1] + 1.0 - contained
    best = int(np.argmin(values))
    return OptimalCut(order, best, float(min(values[best], 1.0)), float(contained[best]), draftable + 1)


def _gamma_nodes(k: int, rate: float, outside: float, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights in u = log t for ``∫ L^j t^j e^{-Lt}/(j-1)! P(N_{T*}(t) <= K-j) du``.

    ``rate`` = L + (the T* mass outside its K - 1 largest tokens, summed over those tokens)
    bounds the decay (``P(N <= m) <= e^{-(q(T*) - M) t} · poly``) and is the σ of ``race_step``;
    ``outside`` = L sets the left end (the integrand is below L t there)."""
    step = race_step(k, 1.0, tolerance / 2.0**k, spread=rate)
    t_lo = 1e-18 / max(outside, 1e-300)
    x = 45.0
    for _ in range(20):  # x^K e^{-x} < 1e-18
        x = 41.5 + k * math.log(x)
    t_hi = max(x / rate, 2.0 * t_lo)
    u = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    return np.exp(u), np.full(len(u), step)


def count_law(q_set: np.ndarray, k: int, t: np.ndarray, *, split: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(P(N_S(t) = m), bound)`` for m < K at every node t (``[G, K]`` each), S the tokens with
    masses ``q_set``: the truncated product of the Bernoulli factors, light tokens by their power
    sums where ``split`` (:mod:`~multidraft.theory._wor_moments`); ``bound`` bounds each entry's
    rounding error."""
    q_set = np.ascontiguousarray(q_set, dtype=np.float64)
    t = np.ascontiguousarray(t, dtype=np.float64)
    light, scale = light_split(q_set, float(t[-1])) if split else (np.zeros(len(q_set), dtype=bool), 1.0)
    order = moment_order(k)
    _compiled()
    return _count_law(q_set, light, scale, stirling_weights(order, k), k, t)


def j_law(q_tstar: np.ndarray, outside: float, k: int, tolerance: float = RACE_TOLERANCE) -> np.ndarray:
    """``c_j = P(J = j)``, j = 0..K, the coefficients of ``G(x) = E[x^J]`` (module docstring),
    for the T* masses ``q_tstar`` and L = ``outside`` = q(U) > 0. Light T* tokens enter by their
    power sums; where the rounding bound of that exceeds ``tolerance`` the product is taken token
    by token. K = 2: :func:`~multidraft.theory.optimum._wor_pairs.pair_j_law` (no quadrature)."""
    q_tstar = np.asarray(q_tstar, dtype=np.float64)
    return pair_j_law(q_tstar, outside) if k == 2 else race_j_law(q_tstar, outside, k, tolerance)


def race_j_law(q_tstar: np.ndarray, outside: float, k: int, tolerance: float = RACE_TOLERANCE) -> np.ndarray:
    """:func:`j_law` by the race's quadrature at any K (K = 2: the reference of the closed form)."""
    at_least = np.zeros(k + 2)
    at_least[0] = 1.0
    if len(q_tstar) == 0:  # T* empty: N ≡ 0, J ≡ K
        at_least[1 : k + 1] = 1.0
    else:
        spread, _ = race_spread(q_tstar, k)
        rate = max(outside + spread, 1e-300)
        t, w = _gamma_nodes(k, rate, outside, tolerance)
        lt = outside * t
        log_weight = np.log(w) - lt
        density = np.exp(log_weight[None, :] + np.arange(1, k + 1)[:, None] * np.log(lt)[None, :]
                          - np.array([math.lgamma(j) for j in range(1, k + 1)])[:, None])  # [K, G]: (Lt)^j e^{-Lt}/(j-1)! du
        law, bound = count_law(q_tstar, k, t)
        if float((density @ bound.sum(axis=1)).max()) > tolerance:
            law, _ = count_law(q_tstar, k, t, split=False)
        counts = np.cumsum(law, axis=1)  # P(N <= m), [G, K]
        for j in range(1, k + 1):
            at_least[j] = float(density[j - 1] @ counts[:, k - j])
    at_least = np.clip(at_least, 0.0, 1.0)
    at_least[1 : k + 1] = np.minimum.accumulate(at_least[1 : k + 1])
    return at_least[: k + 1] - at_least[1 : k + 2]


def _compiled() -> None:
    """Compile the kernels below on first use (:func:`~multidraft.theory._numba.compile_in_place`);
    they call :mod:`~multidraft.theory._wor_moments`'s ``_node_products``."""
    global _node_products, _accumulate_powers, _expm1_series
    _wor_moments._compiled()
    _node_products, _accumulate_powers, _expm1_series = _wor_moments._node_products, _wor_moments._accumulate_powers, _wor_moments._expm1_series
    compile_in_place(globals(), KERNELS)


def _advance(q, light, scale, t, k, state, nu, lo, hi, mass):
    """Tokens ``lo..hi - 1`` into the split product: runs of light tokens into the power sums
    (:func:`~multidraft.theory.optimum._wor_moments._accumulate_powers`), each other token's
    Bernoulli factor into ``state`` (``[K, G]``); returns the light mass, ``mass`` plus theirs in
    token order."""
    stay, rows = np.empty(t.shape[0]), np.arange(k - 1, 0, -1)
    i = lo
    while i < hi:
        if light[i]:
            stop = i + 1
            while stop < hi and light[stop]:
                stop += 1
            _accumulate_powers(q, i, stop, scale, nu)
            for j in range(i, stop):
                mass += q[j]
            i = stop
        else:
            _add_factors(q[i], t, state, stay, rows)
            i += 1
    return mass


def _add_factors(q, t, state, stay, rows):
    """Any other token's Bernoulli factor ``e^{-qt} + (1 - e^{-qt}) x`` into ``state``
    (``[K, G]``, modulo x^K) at every node: the decays first (``stay``; where qt <= 1/2
    ``1 + (e^{-qt} - 1)`` from :func:`~multidraft.theory.optimum._wor_moments._expm1_series`,
    within an ulp of libm's ``exp`` and vectorised, libm's beyond), then each coefficient
    from the top, ``state[m] · stay + state[m - 1] · (1 - stay)``, in a loop over the nodes
    that vectorises. ``rows`` = K - 1, ..., 1 from an array: with an induction variable LLVM
    widens the loop's alias checks over all rows of ``state``, which then always fail (the same
    as :func:`~multidraft.theory.verifier._front_back._factor`). The same operations as node
    by node, so the same bits."""
    nodes = t.shape[0]
    small = nodes
    while small > 0 and q * t[small - 1] > SERIES_LIMIT:
        small -= 1
    for g in range(small):
        stay[g] = 1.0 + _expm1_series(-(q * t[g]))
    for g in range(small, nodes):
        stay[g] = math.exp(-q * t[g])
    for i in range(rows.shape[0]):
        m = rows[i]
        upper, lower = state[m], state[m - 1]
        for g in range(nodes):
            upper[g] = upper[g] * stay[g] + lower[g] * (1.0 - stay[g])
    first = state[0]
    for g in range(nodes):
        first[g] = first[g] * stay[g]


def _product_at(state_g, nu, scale, light_mass, t_g, k, a, out, out_bound, phi, psi, phi_abs, psi_abs, work):
    """The whole product (heavy state × light power sums) at one node, with its rounding
    bound."""
    if nu[0] == 0.0:
        for m in range(k):
            out[m] = state_g[m]
            out_bound[m] = 0.0
        return
    _node_products(nu, scale, light_mass, t_g, k, a, phi, psi, phi_abs, psi_abs, work)
    for m in range(k):
        value, bound = 0.0, 0.0
        for i in range(m + 1):
            value += state_g[i] * phi[m - i]
            bound += state_g[i] * phi_abs[m - i]
        out[m] = value
        out_bound[m] = ROUNDING * bound


def _checkpoints(q, light, scale, a, k, t, starts, nu, state, mass):
    """At the prefixes ``starts`` (sorted): (power sums, product of the other tokens' factors,
    light mass), from their values ``nu``, ``state``, ``mass`` at ``starts[0]`` (copied)."""
    nodes = t.shape[0]
    marks = starts.shape[0]
    nu_marks, state_marks, mass_marks = np.zeros((marks, a.shape[0])), np.zeros((marks, k, nodes)), np.zeros(marks)
    state, nu = state.copy(), nu.copy()
    for mark in range(marks):
        nu_marks[mark], state_marks[mark], mass_marks[mark] = nu, state, mass
        if mark + 1 < marks:
            mass = _advance(q, light, scale, t, k, state, nu, starts[mark], starts[mark + 1], mass)
    return nu_marks, state_marks, mass_marks


def _containment(q, light, scale, a, k, t, w, starts, nu_marks, state_marks, mass_marks, prefixes, lam):
    nodes = t.shape[0]
    state, nu = np.zeros((k, nodes)), np.zeros(a.shape[0])
    phi, psi, phi_abs, psi_abs = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    work = np.empty((4, a.shape[0] - 1))
    law, law_bound = np.empty(k), np.empty(k)
    out, error = np.zeros(prefixes.shape[0]), np.zeros(prefixes.shape[0])
    position, mass = -1, 0.0
    for c in range(prefixes.shape[0]):
        j = prefixes[c]
        mark = np.searchsorted(starts, j, side="right") - 1
        if position < 0 or position > j or j - position > j - starts[mark]:  # restart from the checkpoint
            position = starts[mark]
            nu[:], state[:, :], mass = nu_marks[mark], state_marks[mark], mass_marks[mark]
        mass = _advance(q, light, scale, t, k, state, nu, position, j, mass)
        position = j
        total, bound = 0.0, 0.0
        for g in range(nodes):
            _product_at(state[:, g], nu, scale, mass, t[g], k, a, law, law_bound, phi, psi, phi_abs, psi_abs, work)
            below, below_bound = 0.0, 0.0
            for m in range(k):
                below += law[m]
                below_bound += law_bound[m]
            x = lam[c] * t[g]
            weight = w[g] * x * math.exp(-x)
            total += weight * (1.0 - below)
            bound += weight * below_bound
        out[c] = total
        error[c] = bound
    return out, error


def _count_law(q, light, scale, a, k, t):
    nodes = t.shape[0]
    state = np.zeros((k, nodes))
    state[0, :] = 1.0
    nu = np.zeros(a.shape[0])
    light_mass = _advance(q, light, scale, t, k, state, nu, 0, q.shape[0], 0.0)
    phi, psi, phi_abs, psi_abs = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    work = np.empty((4, a.shape[0] - 1))
    law, bound = np.empty((nodes, k)), np.empty((nodes, k))
    for g in range(nodes):
        _product_at(state[:, g], nu, scale, light_mass, t[g], k, a, law[g], bound[g], phi, psi, phi_abs, psi_abs, work)
    return law, bound


#: The compiled kernels of this module.
KERNELS = (
    "_advance", "_add_factors", "_product_at", "_checkpoints",
    "_containment", "_count_law",
)
