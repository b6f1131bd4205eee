"""The front/back selection rule for drafts without replacement: its law in one compiled pass.

**The rule.** Let T* be the min-cut prefix (decreasing q/p; the prefix theorem of
:class:`~multidraft.theory.laws.WithoutReplacement`) and U = Ω ∖ T*. Give the tokens positions:
U first, then T*, each part by decreasing p/q (ties by token id). The *active part* of a draft
set D is U if D meets U, else T*. Every drafted token y of the active part flips a coin, "front"
with probability α_y; the winner is the first front token in position order, or, when no coin
says front, the *last* drafted token of the active part.

**Its law.** With the drafts as the first K arrivals of an exponential race (token y arrives at
rate q_y; the K-th arrival at time t), the token at position j wins with probability

    r_j = α_j A_j + (1 - α_j) B_j,
    A_j = P(y_j ∈ D, E_j, no earlier drafted token of its part is front),
    B_j = A_j's event and no later token of its part drafted,

with E_j = ∅ in U and E_j = {D ∩ U = ∅} in T*. A_j and B_j depend only on the α of *earlier*
positions, so ``α_j = clip((p_j - B_j) / (A_j - B_j), 0, 1)`` (aiming r_j at p_j) is fitted in
one forward pass. Each is an integral over t of coefficients of x^{K-1} in products over the
tokens of ``a + b x`` (a = e^{-q t}: not drafted; b = c (1 - e^{-q t}): drafted and allowed,
c = 1, 1 - α or 0) and of one arrival density ``ρ = c q e^{-q t}``; the pass keeps these
truncated polynomials ([G, K] per node set) for the prefix, and for the suffix at √n
checkpoints, so it costs O(n · G · K) time and O(√n · G · K) memory. The integral is the
trapezoid rule in u = log t. The transcendentals are the cost at small K: each token's
``e^{-q t} - 1`` is computed once per pass over its block (``e^{-qt}`` from it where qt <= 1/2,
exactly in absolute terms), and ``e^{-t · (mass after y in its part)}`` as a running product
restarted exactly at every block end (relative error below √n ulps).

Whatever the α, r is the exact law of the rule (to the quadrature's rounding), so the
canonical single-draft step against r is lossless. The clipping may bind, and then Σ min(p, r)
can fall short of P*: the caller compares with the alternatives (see
:func:`multidraft.theory.verifier.optimal_selection_rule`).
"""

from __future__ import annotations

import math

import numpy as np

from multidraft.theory.laws._kernels import race_step
from multidraft.theory._numba import compile_in_place

__all__ = ["front_back_nodes", "front_back_pass", "front_back_head"]

#: Largest trapezoid step in u = log t (0.2: the law agreed with exact enumeration to 5e-14 on
#: 2,000 random instances; :func:`~multidraft.theory.laws._kernels.race_step` may ask for less).
MAX_STEP = 0.2


def front_back_nodes(draft: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t and weights of ``∫_0^∞ f(t) dt`` by the trapezoid rule in u = log t.

    Below ``t_lo = (1e-18 K!)^{1/K}`` the K-th-arrival integrands (O(t^{K-1}) at 0) times t
    are below 1e-18; above ``46/λ``, λ the draft mass outside the K - 1 largest tokens, the
    K-th arrival has happened except with probability below 1e-18 · K. The step is
    :func:`~multidraft.theory._kernels.race_step`'s with σ = λ *summed over those tokens* and β
    the least of the K - 1 largest: ``1 - M_{K-1}`` cancels when the top tokens hold all but a
    sliver, and then gave a step far too large (or a zero σ).
    """
    positive = np.sort(draft[draft > 0], kind="stable")[::-1]  # the same values; linear when nearly sorted
    spread = max(float(positive[k - 1 :].sum()), 1e-300)
    if k > 1 and len(positive) >= k:
        step = min(MAX_STEP, race_step(k, 1.0, spread=spread, least_top=float(positive[k - 2])))
    else:
        step = MAX_STEP
    t_lo = (1e-18 * math.factorial(k)) ** (1.0 / k)
    u = np.arange(math.log(t_lo), math.log(46.0 / spread) + step, step)
    t = np.exp(u)
    return t, step * t


def front_back_pass(
    target: np.ndarray, draft: np.ndarray, boundary: int, k: int, nodes: np.ndarray, weights: np.ndarray,
    alpha: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(α, r)`` by position for p and q given in position order (U = ``[0, boundary)``).

    ``alpha=None`` fits α (module docstring); otherwise the law of the rule with the given α.
    """
    alpha, r, _, _ = front_back_head(target, draft, boundary, k, nodes, weights, alpha)
    return alpha, r


def front_back_head(
    target: np.ndarray, draft: np.ndarray, boundary: int, k: int, nodes: np.ndarray, weights: np.ndarray,
    alpha: np.ndarray | None = None, suffix: tuple[np.ndarray, np.ndarray, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`front_back_pass` for the *head* of a T* part followed by a tail of tokens not given
    (``boundary < len(draft)``): ``suffix = (Φ, Ψ, mass)`` are the tail's truncated product
    ``Π (e^{-qt} + (1 - e^{-qt}) x)`` and its arrival companion at the nodes (``[G, K]``) and its
    draft mass; the tail's coins say "back". Returns ``(α, r, Φ_pre, Ψ_pre)``, the last two the
    prefix pair after the head (U blocked, coins applied): what the tail's law needs
    (:mod:`~multidraft.theory._wor_tail`)."""
    fit = alpha is None
    given = np.zeros(len(draft)) if fit else np.ascontiguousarray(alpha, dtype=np.float64)
    nodes = np.ascontiguousarray(nodes, dtype=np.float64)
    if suffix is None:
        suffix_phi, suffix_psi, suffix_mass = np.zeros((len(nodes), k)), np.zeros((len(nodes), k)), 0.0
        suffix_phi[:, 0] = 1.0
    else:
        suffix_phi, suffix_psi, suffix_mass = suffix
    compile_in_place(globals(), KERNELS)
    return _pass(
        np.ascontiguousarray(target, dtype=np.float64), np.ascontiguousarray(draft, dtype=np.float64),
        int(boundary), int(k), nodes, np.ascontiguousarray(weights, dtype=np.float64), given, fit,
        np.ascontiguousarray(suffix_phi, dtype=np.float64), np.ascontiguousarray(suffix_psi, dtype=np.float64),
        float(suffix_mass),
    )  # fmt: skip


#: Most token × node decays :func:`_pass` keeps from its first pass for its second (16 MiB).
DECAY_CACHE = 1 << 20

#: Largest q t for which ``e^{-qt}`` is taken as ``1 + expm1(-qt)`` (absolute error one ulp).
_FROM_EXPM1 = 0.5


def _decay(q, t, stay, drawn):
    """``stay = e^{-q t}``, ``drawn = 1 - e^{-q t}`` at every node (one transcendental where qt is
    small)."""
    for g in range(t.shape[0]):
        x = q * t[g]
        d = math.expm1(-x)
        drawn[g] = -d
        stay[g] = 1.0 + d if x <= _FROM_EXPM1 else math.exp(-x)


def _factor(phi, psi, stay, drawn, q, allowed, k):
    """``(Φ, Ψ) <- (Φ (a + b x), Ψ (a + b x) + Φ ρ)`` modulo x^K at every node, in place, for one
    token's factor: a = e^{-qt} (not drafted), b = c (1 - e^{-qt}) (drafted and allowed),
    ρ = c q e^{-qt} (arriving), c = ``allowed``."""
    for g in range(phi.shape[0]):
        a = stay[g]
        b = allowed * drawn[g]
        rho = allowed * q * a
        for m in range(k - 1, 0, -1):
            psi[g, m] = psi[g, m] * a + psi[g, m - 1] * b + phi[g, m] * rho
            phi[g, m] = phi[g, m] * a + phi[g, m - 1] * b
        psi[g, 0] = psi[g, 0] * a + phi[g, 0] * rho
        phi[g, 0] = phi[g, 0] * a


def _member(pre_phi, pre_psi, post_phi, post_psi, q, stay, drawn, w, k, scale):
    """``∫ [x^{K-1}] (q e^{-qt} Φ + (1 - e^{-qt}) x Ψ)`` for Φ, Ψ the products of the prefix and
    the suffix pairs: token y drafted, the K-th arrival at t; ``scale[g]`` multiplies."""
    total = 0.0
    for g in range(w.shape[0]):
        x1 = 0.0
        for m in range(k):
            x1 += pre_phi[g, m] * post_phi[g, k - 1 - m]
        x2 = 0.0
        for m in range(k - 1):
            x2 += pre_psi[g, m] * post_phi[g, k - 2 - m] + pre_phi[g, m] * post_psi[g, k - 2 - m]
        total += w[g] * scale[g] * (q * stay[g] * x1 + drawn[g] * x2)
    return total


def _pass(p, q, boundary, k, t, w, alpha_in, fit, suffix_phi, suffix_psi, suffix_mass):
    n, nodes = q.shape[0], t.shape[0]
    stay, drawn = np.empty(nodes), np.empty(nodes)
    one = np.ones(nodes)
    # Suffix pairs of all free tokens at checkpoints every `block` positions, and the pair of the
    # whole T* part (positions >= boundary).
    block = int(math.sqrt(n)) + 1
    blocks = (n + block - 1) // block
    mark_phi, mark_psi = np.zeros((blocks + 1, nodes, k)), np.zeros((blocks + 1, nodes, k))
    phi, psi = suffix_phi.copy(), suffix_psi.copy()
    tail_phi, tail_psi = phi.copy(), psi.copy()
    mark_phi[blocks], mark_psi[blocks] = phi, psi
    # Every token's decay, kept for the second pass when small enough (the same numbers, half
    # the transcendentals).
    cached = n * nodes <= DECAY_CACHE
    decay_stay, decay_drawn = np.empty((n if cached else 0, nodes)), np.empty((n if cached else 0, nodes))
    for j in range(n - 1, -1, -1):
        if cached:
            stay, drawn = decay_stay[j], decay_drawn[j]
        _decay(q[j], t, stay, drawn)
        _factor(phi, psi, stay, drawn, q[j], 1.0, k)
        if j % block == 0:
            mark_phi[j // block], mark_psi[j // block] = phi, psi
        if j == boundary:
            tail_phi[:, :], tail_psi[:, :] = phi, psi
    # Draft mass after each position inside its part, and the mass of U.
    after = np.zeros(n)
    mass = suffix_mass
    for j in range(n - 1, boundary - 1, -1):
        after[j] = mass
        mass += q[j]
    mass = 0.0
    for j in range(boundary - 1, -1, -1):
        after[j] = mass
        mass += q[j]
    mass_u = mass
    alpha, r = alpha_in.copy(), np.zeros(n)
    pre_phi, pre_psi = np.zeros((nodes, k)), np.zeros((nodes, k))
    pre_phi[:, 0] = 1.0
    empty_phi, empty_psi = np.zeros((nodes, k)), np.zeros((nodes, k))
    empty_phi[:, 0] = 1.0
    post_phi, post_psi = np.zeros((block + 1, nodes, k)), np.zeros((block + 1, nodes, k))
    # Per block: every token's decay and, per position, e^{-t · after[j]} (no later token of
    # its part drafted).
    stays, draws, blocked = np.empty((block, nodes)), np.empty((block, nodes)), np.empty((block, nodes))
    for c in range(blocks):
        lo, hi = c * block, min(c * block + block, n)
        post_phi[hi - lo], post_psi[hi - lo] = mark_phi[c + 1], mark_psi[c + 1]
        for j in range(hi - 1, lo - 1, -1):
            if cached:
                stays[j - lo], draws[j - lo] = decay_stay[j], decay_drawn[j]
            else:
                _decay(q[j], t, stays[j - lo], draws[j - lo])
            if j == hi - 1 or j == boundary - 1:  # restart the running product exactly
                for g in range(nodes):
                    blocked[j - lo, g] = math.exp(-after[j] * t[g])
            else:
                for g in range(nodes):
                    blocked[j - lo, g] = blocked[j + 1 - lo, g] * stays[j + 1 - lo, g]
            if j > lo:
                post_phi[j - lo], post_psi[j - lo] = post_phi[j - lo + 1], post_psi[j - lo + 1]
                _factor(post_phi[j - lo], post_psi[j - lo], stays[j - lo], draws[j - lo], q[j], 1.0, k)
        for j in range(lo, hi):
            i = j - lo
            if j == boundary:  # T*: the event D ∩ U = ∅ blocks every U token
                pre_psi[:, :] = 0.0
                pre_phi[:, :] = 0.0
                for g in range(nodes):
                    pre_phi[g, 0] = math.exp(-mass_u * t[g])
            if q[j] > 0:
                whole = _member(pre_phi, pre_psi, post_phi[i + 1], post_psi[i + 1], q[j], stays[i], draws[i], w, k, one)
                if j < boundary:
                    last = _member(pre_phi, pre_psi, tail_phi, tail_psi, q[j], stays[i], draws[i], w, k, blocked[i])
                else:
                    last = _member(pre_phi, pre_psi, empty_phi, empty_psi, q[j], stays[i], draws[i], w, k, blocked[i])
                if fit:
                    gap = whole - last
                    if gap <= 1e-300:
                        alpha[j] = 1.0
                    else:
                        alpha[j] = min(1.0, max(0.0, (p[j] - last) / gap))
                r[j] = alpha[j] * whole + (1.0 - alpha[j]) * last
            _factor(pre_phi, pre_psi, stays[i], draws[i], q[j], 1.0 - alpha[j], k)
    if boundary >= n:  # no T* token given: the prefix pair of an empty head (U blocked)
        pre_psi[:, :] = 0.0
        pre_phi[:, :] = 0.0
        for g in range(nodes):
            pre_phi[g, 0] = math.exp(-mass_u * t[g])
    return alpha, r, pre_phi, pre_psi


#: The compiled kernels of this module.
KERNELS = ("_decay", "_factor", "_member", "_pass")
