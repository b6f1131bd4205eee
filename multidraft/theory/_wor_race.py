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
exponentially): the step from :func:`~multidraft.theory._kernels.race_step`'s error bound
(absolute discretisation error below 1e-14 for the scan; for the J-law the bound's k-term grows
by at most 2^K, so the tolerance is divided by 2^K), the ends where the integrand is below 1e-18.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from multidraft.theory._kernels import RACE_TOLERANCE, race_step, ratio_order

__all__ = ["OptimalCut", "optimal_cut", "full_scan_cut", "j_law", "count_law"]


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
        Prefixes evaluated exactly (the rest were pruned by the bounds).
    """

    order: np.ndarray
    size: int
    value: float
    contained: float
    candidates: int


#: Exact probes that tighten the pruning bound before the candidate pass, and the candidate
#: count below which no probe is worth its race.
_PROBES, _FEW = 8, 64


def _top_masses(sorted_draft: np.ndarray, k: int) -> np.ndarray:
    """``M[j, i]`` = mass of the i largest tokens among the first j (i = 0..K-1, j = 0..n)."""
    return _kernels()["top_masses"](np.ascontiguousarray(sorted_draft, dtype=np.float64), int(k))


def _bounds(p_sorted: np.ndarray, q_sorted: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prefix masses (P_j, Q_j) and the lower/upper bounds on every prefix's cut (module docstring)."""
    prefix_p = np.concatenate([[0.0], np.cumsum(p_sorted)])
    prefix_q = np.concatenate([[0.0], np.cumsum(q_sorted)])
    np.minimum(prefix_q, 1.0, out=prefix_q)
    top = _top_masses(q_sorted, k)  # [n + 1, K]
    lower = prefix_p + 1.0 - prefix_q**k
    upper = prefix_p + 1.0 - np.prod(np.maximum(prefix_q[:, None] - top, 0.0), axis=1)
    return prefix_p, lower, upper


def _outside_mass(q_sorted: np.ndarray) -> np.ndarray:
    """``λ_j = q(Ω ∖ T_j)`` for j = 0..n, summed from the tail (no cancelling 1 - Q)."""
    return np.concatenate([np.cumsum(q_sorted[::-1])[::-1], [0.0]])


def _scan_nodes(k: int, top_mass: float, smallest_rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and trapezoid weights (in u = log t) for ``∫ λ e^{-λt} P(N >= K) dt``: below
    ``(1e-18 K!)^{1/(K+1)}`` the integrand in u is below 1e-18, above ``45/λ_min`` likewise."""
    step = race_step(k, top_mass)
    t_lo = (1e-18 * math.factorial(k)) ** (1.0 / (k + 1))
    t_hi = max(45.0 / smallest_rate, 2.0 * t_lo)
    u = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    t = np.exp(u)
    return t, np.full(len(t), step)


def containment_at(q_sorted: np.ndarray, k: int, prefixes: np.ndarray) -> np.ndarray:
    """``g(T_j) = P(set(X) ⊆ T_j)`` at the given prefix sizes j (sorted, 1 <= j <= n), for q in
    scan order: one compiled pass over the first ``max(prefixes)`` tokens.

    Prefixes whose outside mass makes ``K λ / (1 - M_{K-1}) < RACE_TOLERANCE`` get 1 (within
    tolerance by that bound on P(some draw falls outside), as in the full race)."""
    prefixes = np.asarray(prefixes, dtype=np.int64)
    out = np.ones(len(prefixes))
    if len(prefixes) == 0:
        return out
    lam = _outside_mass(q_sorted)[prefixes]
    top = float(np.sort(q_sorted)[::-1][: k - 1].sum())
    negligible = k * lam / max(1.0 - top, 1e-300) < RACE_TOLERANCE
    if negligible.all():
        return out
    t, w = _scan_nodes(k, top, float(lam[~negligible].min()))
    live = prefixes[~negligible]
    out[~negligible] = _kernels()["containment"](
        np.ascontiguousarray(q_sorted[: live[-1]], dtype=np.float64), int(k), t, w, live, lam[~negligible]
    )
    return np.clip(out, 0.0, 1.0)


def optimal_cut(target: np.ndarray, draft: np.ndarray, k: int, *, tolerance: float = 1e-13) -> OptimalCut:
    """The optimal cut of drafts without replacement by the pruned exact scan (module
    docstring). ``tolerance`` widens the candidate set against rounding of the bounds.

    Complexity: one argsort, O(n K) for the bounds, O(m G K) for the race over the first m
    tokens (m = the last candidate; G ≈ 100-200 nodes)."""
    p, q = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    order = ratio_order(p, q)
    p_sorted, q_sorted = p[order], q[order]
    draftable = int(np.count_nonzero(q_sorted))  # prefixes past the draftable tokens only add p
    prefix_p, lower, upper = _bounds(p_sorted, q_sorted, k)
    bound = float(upper[: draftable + 1].min())
    lower, prefix_q = lower[: draftable + 1], np.minimum(np.concatenate([[0.0], np.cumsum(q_sorted)]), 1.0)
    known_q, known_g = [0.0, 1.0], [0.0, 1.0]
    # Exact cuts at the most promising prefixes shrink B, and (g convex in the prefix mass along
    # the chain, Lemma 1) their chords lower every other prefix's cut bound.
    for _ in range(_PROBES):
        candidates = np.flatnonzero(lower <= bound + tolerance)
        if len(candidates) <= _FEW:
            break
        probe = int(candidates[np.argmin(lower[candidates])])
        if probe == 0 or prefix_q[probe] in known_q:  # its lower bound is exact already: no better prefix
            break
        contained = float(containment_at(q_sorted, k, np.array([probe]))[0])
        bound = min(bound, prefix_p[probe] + 1.0 - contained)
        at = int(np.searchsorted(known_q, prefix_q[probe]))
        known_q.insert(at, float(prefix_q[probe]))
        known_g.insert(at, contained)
        chord = np.interp(prefix_q[: draftable + 1], known_q, known_g)
        lower = np.maximum(lower, prefix_p[: draftable + 1] + 1.0 - chord)
    candidates = np.flatnonzero(lower <= bound + tolerance)
    inner = candidates[candidates > 0]
    contained = np.zeros(len(candidates))
    contained[candidates > 0] = containment_at(q_sorted, k, inner)
    values = prefix_p[candidates] + 1.0 - contained
    best = int(np.argmin(values))
    return OptimalCut(order, int(candidates[best]), float(min(values[best], 1.0)), float(contained[best]), len(candidates))


def full_scan_cut(target: np.ndarray, draft: np.ndarray, k: int) -> OptimalCut:
    """The same cut by evaluating every prefix (the pruning's reference; O(n G K))."""
    p, q = np.asarray(target, dtype=np.float64), np.asarray(draft, dtype=np.float64)
    order = ratio_order(p, q)
    q_sorted = q[order]
    draftable = int(np.count_nonzero(q_sorted))
    prefixes = np.arange(draftable + 1)
    contained = np.zeros(draftable + 1)
    contained[1:] = containment_at(q_sorted, k, prefixes[1:])
    values = np.concatenate([[0.0], np.cumsum(p[order])])[: draftable + 1] + 1.0 - contained
    best = int(np.argmin(values))
    return OptimalCut(order, best, float(min(values[best], 1.0)), float(contained[best]), draftable + 1)


def _gamma_nodes(k: int, rate: float, outside: float, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights in u = log t for ``∫ L^j t^j e^{-Lt}/(j-1)! P(N_{T*}(t) <= K-j) du``.

    ``rate`` = L + q(T*) - M_{K-1}(T*) bounds the decay (``P(N <= m) <= e^{-(q(T*) - M) t} ·
    poly``); ``outside`` = L sets the left end (the integrand is below L t there)."""
    step = race_step(k, 1.0 - rate, tolerance / 2.0**k)
    t_lo = 1e-18 / max(outside, 1e-300)
    x = 45.0
    for _ in range(20):  # x^K e^{-x} < 1e-18
        x = 41.5 + k * math.log(x)
    t_hi = max(x / rate, 2.0 * t_lo)
    u = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    return np.exp(u), np.full(len(u), step)


def count_law(q_set: np.ndarray, k: int, t: np.ndarray) -> np.ndarray:
    """``P(N_S(t) = m)`` for m < K at every node t (``[G, K]``), S the tokens with masses
    ``q_set``: the truncated product of the Bernoulli factors, compiled."""
    return _kernels()["count_law"](np.ascontiguousarray(q_set, dtype=np.float64), int(k), np.ascontiguousarray(t))


def j_law(q_tstar: np.ndarray, outside: float, k: int, tolerance: float = RACE_TOLERANCE) -> np.ndarray:
    """``c_j = P(J = j)``, j = 0..K, the coefficients of ``G(x) = E[x^J]`` (module docstring),
    for the T* masses ``q_tstar`` and L = ``outside`` = q(U) > 0."""
    q_tstar = np.asarray(q_tstar, dtype=np.float64)
    at_least = np.zeros(k + 2)
    at_least[0] = 1.0
    if len(q_tstar) == 0:  # T* empty: N ≡ 0, J ≡ K
        at_least[1 : k + 1] = 1.0
    else:
        top = float(np.sort(q_tstar)[::-1][: k - 1].sum())
        rate = max(outside + float(q_tstar.sum()) - top, 1e-300)
        t, w = _gamma_nodes(k, rate, outside, tolerance)
        counts = np.cumsum(count_law(q_tstar, k, t), axis=1)  # P(N <= m), [G, K]
        lt = outside * t
        log_weight = np.log(w) - lt
        for j in range(1, k + 1):
            density = np.exp(log_weight + j * np.log(lt) - math.lgamma(j))  # (Lt)^j e^{-Lt}/(j-1)! · du
            at_least[j] = float(density @ counts[:, k - j])
    at_least = np.clip(at_least, 0.0, 1.0)
    at_least[1 : k + 1] = np.minimum.accumulate(at_least[1 : k + 1])
    return at_least[: k + 1] - at_least[1 : k + 2]


_KERNELS = None


def _kernels() -> dict:
    """The numba-compiled kernels, compiled on first use and cached on disk."""
    global _KERNELS
    if _KERNELS is None:
        import numba

        _KERNELS = _build_kernels(numba.njit(cache=True, nogil=True))
    return _KERNELS


def _build_kernels(jit) -> dict:
    @jit
    def top_masses(q, k):
        n = q.shape[0]
        out = np.zeros((n + 1, k))
        best = np.zeros(k)  # best[0] unused; best[1..k-1] the largest masses so far, decreasing
        for j in range(n):
            value = q[j]
            i = k - 1
            if k > 1 and value > best[k - 1]:
                while i > 1 and best[i - 1] < value:
                    best[i] = best[i - 1]
                    i -= 1
                best[i] = value
            running = 0.0
            for i in range(1, k):
                running += best[i]
                out[j + 1, i] = running
        return out

    @jit
    def bernoulli(state, stay, k):
        """``state <- state · (stay + (1 - stay) x)`` modulo x^K, for one node."""
        drawn = 1.0 - stay
        for m in range(k - 1, 0, -1):
            state[m] = state[m] * stay + state[m - 1] * drawn
        state[0] = state[0] * stay

    @jit
    def containment(q, k, t, w, prefixes, lam):
        nodes = t.shape[0]
        state = np.zeros((nodes, k))
        state[:, 0] = 1.0
        out = np.zeros(prefixes.shape[0])
        c = 0
        for j in range(q.shape[0]):
            for g in range(nodes):
                bernoulli(state[g], math.exp(-q[j] * t[g]), k)
            while c < prefixes.shape[0] and prefixes[c] == j + 1:
                rate = lam[c]
                total = 0.0
                for g in range(nodes):
                    below = 0.0
                    for m in range(k):
                        below += state[g, m]
                    x = rate * t[g]
                    total += w[g] * x * math.exp(-x) * (1.0 - below)
                out[c] = total
                c += 1
        return out

    @jit
    def count_law(q, k, t):
        nodes = t.shape[0]
        state = np.zeros((nodes, k))
        state[:, 0] = 1.0
        for j in range(q.shape[0]):
            for g in range(nodes):
                bernoulli(state[g], math.exp(-q[j] * t[g]), k)
        return state

    return {"top_masses": top_masses, "containment": containment, "count_law": count_law}
