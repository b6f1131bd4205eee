"""Quadrature nodes for the front/back pass: the trapezoid rule in u with t = exp(u - e^{-u}).

**What is integrated.** Every law the pass computes (the head's ``whole`` and ``last``, the U
side, the uniform tail's series) is ``r_y = ∫_0^∞ F_y(t) dt`` with, on the real axis,

    F_y(t) = Σ_{(A, i) : y ∈ A ∪ {i}} w_{A,i} q_i e^{-t (Q - q(A))} Π_{a ∈ A} (1 - e^{-q_a t}),

the sum over sets A of K - 1 tokens that arrived before t and the token i ∉ A arriving at t
(Q = Σ q, the race's total mass; blocked tokens and coins only set weights ``w ∈ [0, 1]``, as do
the tail's 1/(1 + N')). Each (A, i) enters the laws of its K tokens only, so
``Σ_y |F_y(t)| <= K D̄(t)`` with D̄ the same sum with every weight 1 and every factor in absolute
value (for real t, D̄ is the density of the K-th arrival of the race).

**The map.** t = φ(u) = exp(u - e^{-u}) (an exp-sinh-type map, Takahasi & Mori 1974): the
integrand g(u) = F(φ(u)) φ'(u), ``φ'(u) = (1 + e^{-u}) φ(u)``, falls double-exponentially at
both ends (F = O(t^{K-1}) at 0, and ``e^{-σ t}`` at ∞), where the trapezoid rule in u = log t
spent ~80 of its 123 nodes at K = 2 on t in [1e-9, 0.05], an interval that holds 1e-3 of the
integral.

**The bound** (Trefethen & Weideman, SIAM Review 56 (2014), Theorem 5.1): g is entire, so
for every η in (0, π/2) the infinite trapezoid sum of step h errs by at most
``2 M(η) / (e^{2πη/h} - 1)`` with M(η) >= ∫ Σ_y |g_y(x + iη')| dx for all |η'| <= η (our M
increases with η for each split f below; each g_y is real on the real axis, so
``g_y(x - iη') = conj g_y(x + iη')`` covers η' < 0; and g → 0 uniformly in the strip as
|x| → ∞, by the near bound below times |φ'| as x → -∞ (cos η' >= cos η > 0) and by
``|t| e^{-σ c |t|}`` as x → +∞, as the theorem requires). On the line Im u = η, with y = e^{-x}, the curve t = φ(x + iη) has
``|t| = exp(x - y cos η)`` (increasing in x) and ``arg t = η + y sin η`` (decreasing to η), and
``|φ'| dx = |1 + e^{-u}| |t| dx <= d|t| / cos η``. Split it where arg t = ψ₀ = η + f (π/2 - η)
(e^{-x₀} = f (π/2 - η)/sin η, ``s₀ = |t(x₀)|``, f in (0, 1) fixed):

* *far* (x >= x₀): t in the sector η <= arg t <= ψ₀ (c = cos ψ₀ > 0), where
  |1 - e^{-q t}| <= min(q |t|, 2), |e^{-m t}| = e^{-m |t| cos(arg t)}, and D̄'s majorant is
  largest at arg t = ψ₀. With σ = Q - M_{K-1} (the mass outside the K - 1 largest tokens,
  summed over them) and β the least of those, and m_A = Q - q(A) >= σ:

  - bound 1: ``Σ_{|A| = K-1} Π_A q_a <= Q^{K-1}/(K-1)!`` and ``∫ s^{K-1} m e^{-c s m} ds =
    (K-1)!/(c^K m^{K-1})``: ``∫ D̄ <= Q^{K-1} / (c^K σ^{K-1})``;
  - bound 2: B = the K - 1 largest tokens. A = B gives ``2^{K-1} ∫ σ e^{-c s σ} ds =
    2^{K-1}/c``; A with j < K - 1 tokens of B misses one of B, so m_A >= β, and its tokens outside
    B give ``σ^{K-1-j}/(K-1-j)!``: ``C(K-1, j) 2^j (σ/(cβ))^{K-1-j}/c``; summed,
    ``(2 + σ/(cβ))^{K-1} / c`` (about 2^{K-1}/c when σ is 1e-60);

* *near* (x < x₀): |t| <= s₀, and for any complex t, |e^{-m t}| <= e^{m|t|} and
  |1 - e^{-qt}| <= q |t| e^{q|t|}, so ``D̄ <= Q^K |t|^{K-1} e^{Q|t|}/(K-1)!`` and this part gives
  at most ``(Q s₀)^K e^{Q s₀} / (K! cos η)`` times K.

So ``M(η) = K/cos η · [min(bound 1, bound 2) + (Q s₀)^K e^{Q s₀}/K!]``, and the step returned is
the largest h with ``2 M(η)/(e^{2πη/h} - 1) <= tolerance`` for some η on a grid and f in
:data:`SPLITS`: ``Σ_y |error of r_y| <= tolerance`` (:data:`PASS_TOLERANCE`) for the infinite sum
(the theorem applied to ``Σ_y s_y g_y``, s_y = ±1 the signs of the errors).

**The ends.** For real t, ``Σ_y g_y(u) <= K (1 + e^{-u}) t D̄(t)``. Left: ``D̄ <= Q^K t^{K-1}/(K-1)!``
and this majorant of g increases with u (log-derivative > 2K - 1 for u <= 0), so the nodes below
the first node u_lo (where it is <= :data:`END`) add at most ``END/(2K - 1)``. Right: for
t >= (K + 1)/σ, ``D̄ <= σ e^{-tσ} min(Q^{K-1} t^{K-1}/(K-1)!, 1 + Σ_{j<K-1} C(K-1, j) (tσ)^{K-1-j}/(K-1-j)!)``
(m e^{-tm} is decreasing in m >= σ >= 1/t; bound 2 as above with |1 - e^{-qt}| <= min(qt, 1)), whose
log-derivative in u is <= K - σt <= -1, so the nodes above the last node u_hi (where it is
<= END) add at most END. Both are far below the tolerance.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["PASS_TOLERANCE", "END", "RIGHT_STEP", "RIGHT_POINTS", "pass_step", "pass_ends", "pass_nodes"]

#: Bound on the discretisation error of a pass, summed over its tokens (absolute).
PASS_TOLERANCE = 1e-14
#: Bound on the integrand (summed over the tokens) at the first and last node.
END = 1e-18
#: The grid :func:`pass_ends` searches for the last node: log t = its start + RIGHT_STEP · i,
#: i < RIGHT_POINTS (out to e^40 past the start).
RIGHT_STEP, RIGHT_POINTS = 0.04, 1000
#: Where the far part of the line starts: arg t = η + f (π/2 - η), for each f tried.
SPLITS = (0.3, 0.5, 0.7)
_ETA = np.linspace(0.005, 0.5 * np.pi - 0.005, 200)


def pass_step(k: int, spread: float, least_top: float | None, total: float = 1.0, tolerance: float = PASS_TOLERANCE) -> float:
    """Largest step h in u (t = exp(u - e^{-u})) whose discretisation error, summed over the
    pass's tokens, is provably at most ``tolerance`` (module docstring):

        2 M(η) / (e^{2πη/h} - 1) <= tolerance,
        M(η) = K/cos η · [min(Q^{K-1}/(c^K σ^{K-1}), (2 + σ/(cβ))^{K-1}/c) + (Q s₀)^K e^{Q s₀}/K!],

    c = cos ψ₀, ψ₀ = η + f (π/2 - η), s₀ = exp(-log y₀ - y₀ cos η), y₀ = f (π/2 - η)/sin η.

    ``spread`` is σ (summed over the tokens outside the K - 1 largest), ``least_top`` β (the
    least of those, ``None``: bound 1 only), ``total`` Q. Source: Trefethen & Weideman (2014),
    Theorem 5.1. Raises ``ValueError`` for k < 1 or a non-positive spread or total.

    >>> round(pass_step(2, 0.5, 0.5), 3), round(pass_step(8, 1e-60, 0.1), 3)
    (0.193, 0.185)
    """
    if k < 1 or not spread > 0 or not total > 0:
        raise ValueError(f"pass_step: need k >= 1, spread > 0 and total > 0 (got {k}, {spread}, {total})")
    eta = _ETA[:, None]
    f = np.asarray(SPLITS)[None, :]
    psi = eta + f * (0.5 * np.pi - eta)
    log_c = np.log(np.cos(psi))
    log_sigma, log_total = math.log(spread), math.log(total)
    far = (k - 1) * log_total - k * log_c - (k - 1) * log_sigma
    if least_top is not None and least_top > 0:
        rho = np.exp(log_sigma - log_c - math.log(least_top))
        far = np.minimum(far, (k - 1) * np.log(2.0 + rho) - log_c)
    y0 = f * (0.5 * np.pi - eta) / np.sin(eta)
    s0 = np.exp(-np.log(y0) - y0 * np.cos(eta))
    near = k * (log_total + np.log(s0)) + total * s0 - math.lgamma(k + 1)
    log_m = math.log(k) - np.log(np.cos(eta)) + np.logaddexp(far, near)
    steps = 2.0 * np.pi * eta / np.logaddexp(0.0, math.log(2.0 / tolerance) + log_m)
    return float(steps.max())


def pass_ends(k: int, spread: float, least_top: float | None, total: float = 1.0) -> tuple[float, float]:
    """``(u_lo, u_hi)``: the first and last node, where the majorants of the module docstring's
    *ends* fall to :data:`END` (u_lo <= 0 <= u_hi, ``φ(u_hi) >= (K + 1)/σ``)."""
    lgk = math.lgamma(k)
    # Left: log K + log(1 + e^{-u}) + K log Q + K log t - log (K-1)!, t = exp(u - e^{-u}); increasing in u.
    u = -np.arange(0.0, 12.0, 0.02)
    left = math.log(k) + np.log1p(np.exp(-u)) + k * math.log(total) + k * (u - np.exp(-u)) - lgk
    u_lo = float(u[np.argmax(left <= math.log(END))])
    # Right: from t = max((K + 1)/σ, e) up, log 2K + log t + log D̄(t) (1 + e^{-u} <= 2 for u >= 0),
    # in logs (σ may be 1e-300).
    log_t = max(math.log(k + 1) - math.log(spread), 1.0) + RIGHT_STEP * np.arange(RIGHT_POINTS)
    x = np.exp(log_t + math.log(spread))  # tσ
    log_d = (k - 1) * (math.log(total) + log_t) - lgk
    if least_top is not None and least_top > 0:
        m = np.arange(k - 1, 0, -1)[:, None]  # tokens of A outside B, for j = 0..K-2 tokens of B
        terms = np.array([math.log(math.comb(k - 1, j)) - math.lgamma(k - j) for j in range(k - 1)])[:, None] + m * np.log(x)
        log_d = np.minimum(log_d, np.logaddexp.reduce(np.vstack([np.zeros((1, len(x))), terms]), axis=0))
    right = math.log(2 * k) + log_t + math.log(spread) - x + log_d
    below = right <= math.log(END)
    if not below.any():
        raise ValueError(f"pass_ends: no end below {END} within e^40 (K={k}, σ={spread})")
    log_t = float(log_t[np.argmax(below)])
    u_hi = log_t
    for _ in range(60):  # u - e^{-u} = log t: a contraction for u >= 1 (factor e^{-1})
        u_hi = log_t + math.exp(-u_hi)
    return u_lo, u_hi


def pass_nodes(k: int, spread: float, least_top: float | None, total: float = 1.0, *, lanes: int = 1, step: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Nodes t and weights w of ``∫_0^∞ F(t) dt ≈ Σ w F(t)``: u from u_lo to u_hi
    (:func:`pass_ends`) in equal steps of at most h (:func:`pass_step`, or ``step``), their
    number a multiple of ``lanes`` (a smaller step: free accuracy where the pass pads its nodes
    to whole vectors), ``t = exp(u - e^{-u})``, ``w = h (1 + e^{-u}) t``."""
    h = pass_step(k, spread, least_top, total) if step is None else step
    u_lo, u_hi = pass_ends(k, spread, least_top, total)
    count = lanes * math.ceil((math.ceil((u_hi - u_lo) / h) + 1) / lanes)
    h = (u_hi - u_lo) / (count - 1)
    u = u_lo + h * np.arange(count)
    decay = np.exp(-u)
    t = np.exp(u - decay)
    return t, h * (1.0 + decay) * t
