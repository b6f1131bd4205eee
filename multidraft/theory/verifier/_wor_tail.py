"""The uniform tail of the T* side: the law of its light pool tokens as a power series in q.

**The rule.** On rows that draft no U token, the T* side runs front/back (positions by
decreasing p/q, coins α, first "front" wins) on its *head*; the *tail* S (a suffix of the
positions, light pool tokens, coins all "back") takes over when no head coin says front and a
tail token is drafted: the winner is then **uniform among the drafted tail tokens** (front/back
would take the last of them in position order). Head tokens keep their front/back law (it never
looks inside the tail), so the pass over the head (:func:`~multidraft.theory.verifier._front_back.front_back_head`)
is unchanged; only the tail's own law is new.

**Its law.** Drafts are the first K arrivals of the exponential race; at the K-th arrival time t
let ``H_Φ(x)``, ``H_Ψ(x)`` be the prefix pair after the head (U blocked: ``e^{-q(U) t}``; head
token i drafted and back: ``(1 - α_i)(1 - e^{-q_i t}) x``; ``H_Ψ`` one of them arriving at t), and
``T_Φ(w) = Σ τ_m w^m``, ``T_Ψ(w) = Σ σ_m w^m`` the tail's truncated product and arrival companion
(:mod:`~multidraft.theory.optimum._wor_moments`). Mark other tail tokens drafted by z, so that
``1/(1 + N') = ∫_0^1 z^{N'} dz``; taking token y out of the tail product divides by
``e^{-q_y t}(1 + u w)``, ``u = e^{q_y t} - 1``, ``w = x z``. With ``q = q_y``:

    r_y = ∫ dt ∫_0^1 dz { q [x^{K-1}] H_Φ T_Φ/(1 + uw) + u [x^{K-2}] H_Ψ T_Φ/(1 + uw)
                          + u [x^{K-2}] H_Φ z T_Ψ/(1 + uw) - q u [x^{K-2}] H_Φ z T_Φ/(1 + uw)² }

(y arrives at t; y arrived earlier and a head or a tail token arrives at t — the last two terms
are ``(1 - e^{-qt}) T_Ψ^{-y}``, with ``T_Ψ = z ρ_y T_Φ^{-y} + (a_y + b_y w) T_Ψ^{-y}``). The z
integral gives ``1/(j + 1)`` per power z^j, so at each node r_y = Σ_n (A_n q + B_n) u^n
(n < K, :func:`tail_polynomials`), and with ``u^n = Σ_l a_{l,n} (q t)^l`` (Stirling weights)
the whole tail's law is one power series r_y = Σ_l c_l (q_y/s)^l (+ q_y Σ_l d_l (q_y/s)^l):
O(G K L) once, O(L) per token. Light tokens (q t_max <= LIGHT) make the truncation at
L = :func:`~multidraft.theory.optimum._wor_moments.moment_order` exact to rounding, as there.
:func:`tail_law_direct` evaluates the same integral token by token (the reference).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from multidraft.theory._numba import compile_in_place
from multidraft.theory.optimum._wor_moments import LIGHT, ROUNDING, light_products, moment_order, power_sums, stirling_weights

__all__ = ["TailProducts", "tail_products", "tail_polynomials", "tail_rounding", "tail_law", "tail_law_direct"]


class TailProducts(NamedTuple):
    """The tail's products at the nodes (``[G, K]``), their all-positive twins, and its power
    sums ``sums[l] = Σ_y (q_y/scale)^l`` (l = 0..L + 1, ``scale`` = the largest q)."""

    phi: np.ndarray
    psi: np.ndarray
    phi_abs: np.ndarray
    psi_abs: np.ndarray
    sums: np.ndarray
    scale: float


def tail_products(q_tail: np.ndarray, t: np.ndarray, k: int) -> TailProducts:
    """The light tail's ``(T_Φ, T_Ψ, T_Φ^abs, T_Ψ^abs)`` at the nodes (``[G, K]`` each) from its
    power sums, and those sums; ``ROUNDING`` times the all-positive twins bounds each
    coefficient's rounding error (:mod:`~multidraft.theory._wor_moments`)."""
    a = stirling_weights(moment_order(k), k)
    nu, scale = power_sums(q_tail, a.shape[0] - 2)
    return TailProducts(*light_products(nu, scale, float(np.sum(q_tail)), t, k, a), nu, scale)


def tail_polynomials(pre_phi, pre_psi, tail_phi, tail_psi, k: int, *, absolute: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)``, ``[G, K]`` each: r_y's integrand at every node is ``Σ_n (A_n q_y + B_n) u^n``
    (module docstring). ``absolute=True`` adds every term's absolute value instead (with
    ``ROUNDING`` times the tail's twins as ``tail_phi``, ``tail_psi``, a bound on the error that
    their rounding causes, u >= 0 being a bound on itself)."""
    compile_in_place(globals(), KERNELS)
    return _tail_polynomials(
        np.ascontiguousarray(pre_phi), np.ascontiguousarray(pre_psi), np.ascontiguousarray(tail_phi),
        np.ascontiguousarray(tail_psi), int(k), bool(absolute),
    )  # fmt: skip


def tail_rounding(products: TailProducts, t, w, pre_phi, pre_psi, k: int) -> float:
    """A bound on ``Σ_y |error of r_y|`` from the rounding of the tail's power-sum products:
    the series of :func:`tail_law` for the all-positive bound polynomials, summed over the tail
    through its power sums, ``Σ_l c_l ν_l + s d_l ν_{l+1}`` (O(L), not O(|S| L))."""
    bound = tail_polynomials(np.abs(pre_phi), np.abs(pre_psi), ROUNDING * products.phi_abs, ROUNDING * products.psi_abs, k, absolute=True)
    c, d = _series(t, w, bound, k, products.scale)
    sums = products.sums
    return float(c @ sums[: len(c)] + products.scale * (d @ sums[1 : len(d) + 1]))


def _series(t, w, polynomials, k: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``(c, d)``: r_y = Σ_l (c_l + q_y d_l) (q_y/scale)^l (module docstring)."""
    order = moment_order(k)
    a = stirling_weights(order, k)[: order + 1, :k]  # [L + 1, K]
    A, B = polynomials
    powers = (scale * t)[None, :] ** np.arange(order + 1)[:, None] * w[None, :]  # [L + 1, G]
    return np.einsum("ln,lg,gn->l", a, powers, B), np.einsum("ln,lg,gn->l", a, powers, A)


def tail_law(q_tail, t, w, polynomials, k: int) -> np.ndarray:
    """r_y for the light tail tokens ``q_tail`` by the power series (module docstring); ``t``,
    ``w`` the nodes and weights, ``polynomials`` from :func:`tail_polynomials`."""
    q_tail = np.asarray(q_tail, dtype=np.float64)
    if len(q_tail) == 0:
        return np.zeros(0)
    scale = float(q_tail.max())
    c, d = _series(t, w, polynomials, k, scale)
    compile_in_place(globals(), KERNELS)
    value = np.zeros(len(q_tail))
    _horner(q_tail, q_tail / scale, np.ascontiguousarray(c), np.ascontiguousarray(d), value)
    return value


#: Tokens per chunk of :func:`_horner` (its three arrays stay in the L1 cache).
CHUNK = 512


def _horner(q, ratio, c, d, value):
    """``value = Σ_l (c_l + q d_l) ratio^l`` by Horner from the top, ``value <- value · ratio +
    (c_l + q d_l)``, one degree at a time over a chunk of tokens (a loop that vectorises -- over
    views of the chunk from 0: indexed from ``lo`` it compiled to scalar code, 5x slower; every
    token sees the same operations in the same order as token by token)."""
    for lo in range(0, q.shape[0], CHUNK):
        hi = min(lo + CHUNK, q.shape[0])
        chunk_value, chunk_ratio, chunk_q = value[lo:hi], ratio[lo:hi], q[lo:hi]
        for l in range(c.shape[0] - 1, -1, -1):
            c_l, d_l = c[l], d[l]
            for i in range(hi - lo):
                chunk_value[i] = chunk_value[i] * chunk_ratio[i] + (c_l + chunk_q[i] * d_l)


def tail_law_direct(q_tail, t, w, polynomials, k: int) -> np.ndarray:
    """The same integral token by token with ``u = e^{q t} - 1`` at every node (O(|S| G K); the
    reference of :func:`tail_law`)."""
    q_tail = np.asarray(q_tail, dtype=np.float64)
    A, B = polynomials
    u = np.expm1(q_tail[:, None] * t[None, :])  # [S, G]
    powers = u[:, :, None] ** np.arange(k)[None, None, :]  # [S, G, K]
    integrand = np.einsum("sgn,gn->sg", powers, B) + q_tail[:, None] * np.einsum("sgn,gn->sg", powers, A)
    return integrand @ w


def _tail_polynomials(h, psi, tau, sigma, k, absolute):
    nodes = h.shape[0]
    A, B = np.zeros((nodes, k)), np.zeros((nodes, k))
    minus = 1.0 if absolute else -1.0
    for g in range(nodes):
        for n in range(k):
            sign = 1.0 if n % 2 == 0 or absolute else -1.0
            first = 0.0  # q [x^{K-1}] H_Φ T_Φ (-u w)^n: w^j = x^j z^j, ∫ z^j = 1/(j + 1)
            for j in range(n, k):
                first += h[g, k - 1 - j] * tau[g, j - n] / (j + 1)
            A[g, n] += sign * first
            if n + 1 < k:
                back, squared = 0.0, 0.0
                for j in range(n, k - 1):
                    # u [x^{K-2}] (H_Ψ T_Φ + H_Φ z T_Ψ)/(1 + uw); - q u [x^{K-2}] H_Φ z T_Φ/(1 + uw)^2
                    back += psi[g, k - 2 - j] * tau[g, j - n] / (j + 1) + h[g, k - 2 - j] * sigma[g, j - n] / (j + 2)
                    squared += h[g, k - 2 - j] * tau[g, j - n] / (j + 2)
                B[g, n + 1] += sign * back
                A[g, n + 1] += minus * sign * (n + 1) * squared
    return A, B


#: The compiled kernels of this module.
KERNELS = ("_tail_polynomials", "_horner")
