"""Race products over many light tokens from their power sums (docs/optimal_verifier.md §10).

Every race quantity of drafts without replacement is an integral over nodes t of the truncated
product over a set S of tokens

    Φ(t) = Π_{a∈S} (e^{-q_a t} + (1 - e^{-q_a t}) x)  mod x^K

(the law of the number of S-arrivals by t, below K) and of its *arrival companion*
Ψ(t) = Σ_{a∈S} q_a e^{-q_a t} Π_{b≠a} (...) (one of them arriving at t). Token by token they cost
O(|S| G K) for G nodes. For *light* tokens (y_a = q_a t <= θ at every node) the product follows
from the power sums ν_l = Σ_a (q_a/s)^l (s the largest light mass):

    log Φ = -q(S) t + Σ_{m=1}^{K-1} (-1)^{m+1} E_m x^m / m,   E_m = Σ_a (e^{y_a} - 1)^m,
    Ψ = Φ · Σ_{m=0}^{K-1} (-1)^m F_m x^m,                      F_m = Σ_a q_a (e^{y_a} - 1)^m,

(e^{-qt} + (1 - e^{-qt}) x = e^{-qt} (1 + (e^{qt} - 1) x)), and with
(e^y - 1)^m = Σ_{l>=m} a_{l,m} y^l, a_{l,m} = m! S(l, m)/l! (Stirling numbers of the second kind),

    E_m = Σ_{l=m}^{L} a_{l,m} (s t)^l ν_l,   F_m = s Σ_{l=m}^{L} a_{l,m} (s t)^l ν_{l+1}.

That is one O(|S| L) pass for the power sums, then O(K L + K²) per node instead of O(|S| K).

**Truncation.** 0 <= a_{l,m} <= m^l / l! (m! S(l, m) counts surjections, at most m^l maps), so
the terms beyond L add at most (m y)^{L+1} e^{m y}/(L+1)! per token, relative to its own
(e^y - 1)^m >= y^m at most m^{L+1} y^{L+1-m} e^{m y}/(L+1)!; :func:`moment_order` takes the
least L that puts this below 2^-53 for every m < K at y = θ, so E_m and F_m carry rounding
error only.

**Rounding.** Φ is the exponential of an alternating series (Newton's identities), so
cancellation can cost digits when S has few tokens (e_m(u) << h_m(u), u_a = e^{y_a} - 1). The
kernels also return Φ^abs = e^{-q(S) t} exp(Σ |coefficients|) and Ψ^abs (all terms
positive), which bound every partial sum of the expansions: the rounding error of Φ_m, Ψ_m is
at most :data:`ROUNDING` · Φ^abs_m (resp. Ψ^abs_m), and callers turn that into a bound on
their integral and fall back to the exact token-by-token product where it exceeds their
tolerance. On Zipf tails (thousands of light tokens) Φ^abs/Φ is within 1e-3 of 1.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from multidraft.theory._numba import compile_in_place

__all__ = ["LIGHT", "ROUNDING", "moment_order", "stirling_weights", "light_split", "power_sums", "light_products"]

#: Largest y = q t over the nodes for a token to count as light.
LIGHT = 0.25
#: Bound on the relative rounding error of one coefficient of Φ or Ψ, per unit of its
#: all-positive twin (a few operations per term, K <= 64, with a safety factor of 4).
ROUNDING = 1e-14


@functools.lru_cache(maxsize=64)
def moment_order(k: int, light: float = LIGHT) -> int:
    """The least L with ``m^{L+1} y^{L+1-m} e^{m y}/(L+1)! <= 2^-53`` for m = 1..K-1 at y = ``light``
    (module docstring), at least K.

    >>> moment_order(2), moment_order(8)
    (12, 26)
    """
    order = max(k, 1)
    for m in range(1, k):
        while (order + 1) * math.log(m) + (order + 1 - m) * math.log(light) + m * light - math.lgamma(order + 2) > -53 * math.log(2):
            order += 1
    return order


@functools.lru_cache(maxsize=64)
def stirling_weights(order: int, k: int) -> np.ndarray:
    """``a[l, m] = m! S(l, m)/l!`` for l = 0..order + 1, m = 0..k (the coefficients of
    (e^y - 1)^m), by ``a_{l,m} = m (a_{l-1,m} + a_{l-1,m-1})/l``, ``a_{0,0} = 1``. One read-only
    table per (order, k), kept (a fit asks for it five times).

    >>> stirling_weights(3, 2)[:, 2].tolist()  # (e^y - 1)^2 = y^2 + y^3 + ...
    [0.0, 0.0, 1.0, 1.0, 0.5833333333333334]
    """
    a = np.zeros((order + 2, k + 1))
    a[0, 0] = 1.0
    for l in range(1, order + 2):
        m = np.arange(1, k + 1)
        a[l, 1:] = m * (a[l - 1, 1:] + a[l - 1, :-1]) / l
    a.flags.writeable = False
    return a


def light_split(draft: np.ndarray, t_max: float, light: float = LIGHT) -> tuple[np.ndarray, float]:
    """``(mask, scale)``: the tokens with ``q t_max <= light`` (and q > 0), and the largest of
    their masses (1.0 when none), in one compiled pass."""
    draft = np.ascontiguousarray(draft, dtype=np.float64)
    mask = np.empty(len(draft), dtype=bool)
    _compiled()
    return mask, float(_light_split(draft, float(t_max), float(light), mask))


def power_sums(masses: np.ndarray, order: int) -> tuple[np.ndarray, float]:
    """``(ν, s)``: ``ν_l = Σ (q_a/s)^l`` for l = 0..order + 1 (ν_0 = the count), s = max q."""
    masses = np.asarray(masses, dtype=np.float64)
    scale = float(masses.max()) if len(masses) else 1.0
    _compiled()
    return _power_sums(np.ascontiguousarray(masses / scale), int(order)), scale


def light_products(nu: np.ndarray, scale: float, total: float, t: np.ndarray, k: int, a: np.ndarray):
    """``(Φ, Ψ, Φ^abs, Ψ^abs)``, each ``[G, K]``, of the light set with power sums ``nu`` (scale
    ``scale``, mass ``total``) at the nodes ``t`` (module docstring)."""
    g = len(t)
    out = np.zeros((4, g, k))
    _compiled()
    _light_products(nu, float(scale), float(total), np.ascontiguousarray(t, dtype=np.float64), int(k), a, out)
    return out[0], out[1], out[2], out[3]


def _compiled() -> None:
    """Compile the kernels below on first use (:func:`~multidraft.theory._numba.compile_in_place`)."""
    compile_in_place(globals(), KERNELS, inline=INLINED)


#: Largest x = q t for which ``e^{-x} - 1`` comes from :func:`_expm1_series` (absolute error an
#: ulp, so ``e^{-x} = 1 + (e^{-x} - 1)`` too); beyond it, libm.
SERIES_LIMIT = 0.5
#: 1/j! for :func:`_expm1_series`.
_E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9, _E10, _E11, _E12, _E13, _E14, _E15 = (1.0 / math.factorial(j) for j in range(2, 16))


def _expm1_series(y):
    """``e^y - 1`` for -1/2 <= y <= 0 by its Taylor series to y^15 (Horner; the rest is below
    2^-58 relative): a body without calls, inlined, so that a loop over the nodes vectorises
    (libm's ``expm1`` or ``exp`` per node was half the front/back pass at K = 2 and most of the
    prefix race's heavy tokens)."""
    return y * (1.0 + y * (_E2 + y * (_E3 + y * (_E4 + y * (_E5 + y * (_E6 + y * (_E7 + y * (_E8 + y * (
        _E9 + y * (_E10 + y * (_E11 + y * (_E12 + y * (_E13 + y * (_E14 + y * _E15))))))))))))))


def _light_split(q, t_max, light, mask):
    scale = -1.0
    for i in range(q.shape[0]):
        mask[i] = q[i] > 0 and q[i] * t_max <= light
        if mask[i] and q[i] > scale:
            scale = q[i]
    return scale if scale > 0 else 1.0


def _power_sums(ratios, order):
    nu = np.zeros(order + 2)
    _accumulate_powers(ratios, 0, ratios.shape[0], 1.0, nu)
    return nu


def _accumulate_powers(q, lo, hi, scale, nu):
    """``nu[l] += Σ_{lo <= i < hi} (q_i/s)^l``, each token's powers by repeated multiplication
    and added in token order (the numbers of one token at a time), four tokens per sweep over l
    so that their multiplication chains overlap (2x faster than one at a time)."""
    i = lo
    while i + 4 <= hi:
        ratio_a, ratio_b, ratio_c, ratio_d = q[i] / scale, q[i + 1] / scale, q[i + 2] / scale, q[i + 3] / scale
        power_a, power_b, power_c, power_d = 1.0, 1.0, 1.0, 1.0
        for l in range(nu.shape[0]):
            nu[l] = (((nu[l] + power_a) + power_b) + power_c) + power_d
            power_a *= ratio_a
            power_b *= ratio_b
            power_c *= ratio_c
            power_d *= ratio_d
        i += 4
    while i < hi:
        ratio, power = q[i] / scale, 1.0
        for l in range(nu.shape[0]):
            nu[l] += power
            power *= ratio
        i += 1


def _node_products(nu, scale, total, t, k, a, phi, psi, phi_abs, psi_abs, work):
    """Φ, Ψ and their all-positive twins at one node t, into the [K] arrays given; ``work``
    ``[4, L + 1]`` scratch (no allocation per node: the cut evaluates thousands of nodes)."""
    order = nu.shape[0] - 2
    s = scale * t
    powers = work[0]  # (s t)^l ν_l
    shifted = work[1]  # (s t)^l ν_{l+1}
    p = 1.0
    for l in range(order + 1):
        powers[l] = p * nu[l]
        shifted[l] = p * nu[l + 1]
        p *= s
    log_poly = work[2]  # |coefficients| E_m / m of log Φ (sign (-1)^{m+1}), m < K <= L
    companion = work[3]  # F_m
    log_poly[:k] = 0.0
    companion[:k] = 0.0
    for m in range(k):
        e_m, f_m = 0.0, 0.0
        for l in range(m, order + 1):
            e_m += a[l, m] * powers[l]
            f_m += a[l, m] * shifted[l]
        if m > 0:
            log_poly[m] = e_m / m
        companion[m] = scale * f_m
    front = math.exp(-total * t)
    # exp of Σ f_m x^m: g_0 = 1, g_n = (1/n) Σ_{m<=n} m f_m g_{n-m}
    phi[0], phi_abs[0] = 1.0, 1.0
    for n in range(1, k):
        signed, positive = 0.0, 0.0
        for m in range(1, n + 1):
            sign = 1.0 if m % 2 == 1 else -1.0
            signed += m * sign * log_poly[m] * phi[n - m]
            positive += m * log_poly[m] * phi_abs[n - m]
        phi[n], phi_abs[n] = signed / n, positive / n
    for n in range(k):
        phi[n] *= front
        phi_abs[n] *= front
    for n in range(k):
        signed, positive = 0.0, 0.0
        for m in range(n + 1):
            sign = 1.0 if m % 2 == 0 else -1.0
            signed += sign * companion[m] * phi[n - m]
            positive += companion[m] * phi_abs[n - m]
        psi[n], psi_abs[n] = signed, positive


def _light_products(nu, scale, total, t, k, a, out):
    work = np.empty((4, nu.shape[0] - 1))
    for g in range(t.shape[0]):
        _node_products(nu, scale, total, t[g], k, a, out[0, g], out[1, g], out[2, g], out[3, g], work)


#: The compiled kernels of this module (other modules' kernels call ``_node_products``).
KERNELS = ("_expm1_series", "_accumulate_powers", "_light_split", "_power_sums", "_node_products", "_light_products")
#: Kernels copied into their callers (other modules' too: ``_expm1_series``).
INLINED = frozenset({"_expm1_series"})
