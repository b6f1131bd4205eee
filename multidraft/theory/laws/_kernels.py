"""Array kernels behind the draft laws: containment probabilities ``P(set(X) ⊆ T)`` for many
token sets at once.

Pure numpy functions with no law objects: the draft-tuple membership mask, subset sums and
the zeta transform over all 2^n token sets, the ratio orders whose prefixes hold an optimal
min-cut set, and the prefix containment of iid drafts (``q(T_j)^K``) and of drafts without
replacement (a closed form for K = 2, the exponential race for K > 2). The laws in
:mod:`multidraft.theory.laws` call them and re-export the public ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

__all__ = [
    "membership",
    "subset_sums",
    "zeta_transform",
    "ratio_order",
    "exact_ratio_order",
    "iid_prefix_containment",
    "wor_prefix_containment",
    "RACE_TOLERANCE",
    "race_step",
]


def membership(tuples: np.ndarray, n: int) -> np.ndarray:
    """Boolean ``[m, n]`` mask of ``y ∈ set(x)`` for each draft tuple row x of ``tuples [m, K]``.

    >>> membership(np.array([[0, 2], [1, 1]]), 3).astype(int).tolist()
    [[1, 0, 1], [0, 1, 0]]
    """
    mask = np.zeros((len(tuples), n), dtype=bool)
    mask[np.arange(len(tuples))[:, None], tuples] = True
    return mask


def subset_sums(values: Sequence | np.ndarray) -> np.ndarray:
    """``out[mask] = Σ_{i in mask} values[i]`` for all 2^n bitmasks (bit i = token i).

    Built by doubling, O(2^n) additions; works on float arrays and on object arrays of
    Fractions alike.

    >>> subset_sums([1, 10, 100]).tolist()
    [0, 1, 10, 11, 100, 101, 110, 111]
    """
    values = np.asarray(values)
    out = np.zeros(1, dtype=values.dtype if values.dtype != object else object)
    if values.dtype == object:
        out[0] = Fraction(0)
    for value in values:
        out = np.concatenate([out, out + value])
    return out


def zeta_transform(masses: np.ndarray, n: int) -> np.ndarray:
    """Subset-sum (zeta) transform: ``out[T] = Σ_{S ⊆ T} masses[S]`` over bitmasks of n bits.

    Turns the law of ``set(X)`` into all containment probabilities ``P(set(X) ⊆ T)`` in
    O(n 2^n) vectorised additions.

    >>> zeta_transform(np.array([0.0, 0.25, 0.5, 0.25]), 2).tolist()
    [0.0, 0.25, 0.5, 1.0]
    """
    out = np.array(masses, copy=True)
    for bit in range(n):
        view = out.reshape(-1, 2, 1 << bit)
        view[:, 1, :] += view[:, 0, :]
    return out


def ratio_order(target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """Token order by decreasing ``q(y)/p(y)`` (tokens with ``p(y) = 0 < q(y)`` first, those with
    ``p(y) = q(y) = 0`` last).

    Ties may come in any order: for the iid law the min-cut objective is concave in the mass
    included from a tie class, and for the wor law step (5) of the proof in
    :class:`WithoutReplacement` applies; either way taking all or none of the class is optimal,
    and both are prefixes of every tie order. Hence the unstable (introsort) ``argsort``, about
    4x faster than a stable one. Works along the last axis: one division, one negation in
    place (so an ascending sort gives the decreasing order; ``-q/0 = -inf`` comes first and
    ``0/0 = nan`` last), one sort.

    >>> ratio_order(np.array([0.5, 0.25, 0.25, 0.0]), np.array([0.25, 0.25, 0.0, 0.5])).tolist()
    [3, 1, 0, 2]
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.divide(draft, target)
    np.negative(key, out=key)
    return np.argsort(key, axis=-1)


def exact_ratio_order(target: Sequence[Fraction], draft: Sequence[Fraction]) -> np.ndarray:
    """:func:`ratio_order` in exact arithmetic: p = 0 < q first, then decreasing Fraction q/p,
    then the tokens with p = q = 0 (for exact mode, where a float ratio could misorder near-ties).

    >>> exact_ratio_order([Fraction(1, 2), Fraction(1, 2), Fraction(0)], [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)]).tolist()
    [2, 1, 0]
    """

    def key(token: int) -> tuple[int, Fraction]:
        p, q = target[token], draft[token]
        if p > 0:
            return (1, -q / p)
        return (0, Fraction(0)) if q > 0 else (2, Fraction(0))

    return np.array(sorted(range(len(target)), key=key), dtype=np.int64)


def iid_prefix_containment(sorted_draft: np.ndarray, k: int) -> np.ndarray:
    """``P(set(X) ⊆ T_j) = q(T_j)^K`` for every prefix ``T_j`` (j = 0..n) of an order.

    ``sorted_draft`` holds q in the scan order along the last axis; returns ``[..., n + 1]``
    (one array, computed in place: a prefix sum, a clip at one and ⌈log2 K⌉ squarings).
    """
    out = np.empty(sorted_draft.shape[:-1] + (sorted_draft.shape[-1] + 1,))
    out[..., 0] = 0.0
    np.cumsum(sorted_draft, axis=-1, out=out[..., 1:])
    np.minimum(out, 1.0, out=out)
    return _integer_power(out, k)


def _integer_power(values: np.ndarray, k: int) -> np.ndarray:
    """``values ** k`` for a positive integer k by repeated squaring **in place** (``values`` is
    overwritten; a copy is made only when k is not a power of two): a few multiplications,
    several times faster than the general ``np.power`` on large arrays."""
    result = None
    while True:
        if k & 1:
            if result is None and k == 1:
                return values
            result = values.copy() if result is None else np.multiply(result, values, out=result)
        k >>= 1
        if not k:
            return result
        np.multiply(values, values, out=values)


def _wor_k2(sorted_draft: np.ndarray) -> np.ndarray:
    """Closed form for two draws without replacement, as prefix sums:

        P(X_1, X_2 ∈ T) = Σ_{a∈T} q_a (q(T) - q_a) / (1 - q_a).

    Rounding: every token but the largest has q_a <= 1/2, so its odds q_a/(1 - q_a) <= 1 and
    the two prefix sums differ without harmful cancellation. The largest token a* may have
    1 - q_a* tiny; its term is formed as odds_a* · q(T \\ {a*}) with the complement
    1 - q_a* summed from the other entries, so the result is accurate to rounding.
    """
    q = sorted_draft
    largest = np.argmax(q, axis=-1)[..., None]
    others = q.copy()
    np.put_along_axis(others, largest, 0.0, axis=-1)
    big = np.take_along_axis(q, largest, axis=-1)
    big_complement = others.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        odds = np.where(others > 0, others / (1.0 - others), 0.0)
        big_odds = np.where(big_complement > 0, big / big_complement, 0.0)
    c = np.cumsum(q, axis=-1)
    small_terms = c * np.cumsum(odds, axis=-1) - np.cumsum(others * odds, axis=-1)
    big_inside = np.arange(q.shape[-1]) >= largest
    big_term = np.where(big_inside, big_odds * np.cumsum(others, axis=-1), 0.0)
    zero = np.zeros(q.shape[:-1] + (1,))
    return np.clip(np.concatenate([zero, small_terms + big_term], axis=-1), 0.0, 1.0)


#: Bound on the discretisation error of the exponential-race integral (per prefix, absolute).
RACE_TOLERANCE = 1e-14


def race_step(
    k: int,
    top_mass: float,
    tolerance: float = RACE_TOLERANCE,
    *,
    spread: float | np.ndarray | None = None,
    least_top: float | np.ndarray | None = None,
) -> float:
    """Trapezoid step h in y = log t whose discretisation error provably stays below ``tolerance``.

    The integrand ``f(y) = λ t e^{-λt} P(N_T(t) >= k)``, ``t = e^y`` (see :func:`_wor_race`) is
    entire, and the trapezoidal rule errs by at most ``2 M(η) / (e^{2πη/h} - 1)`` for every
    ``η < π/2`` (Trefethen & Weideman, "The exponentially convergent trapezoidal rule", SIAM
    Review 56 (2014), Theorem 5.1), where ``M(η) >= ∫ |f| dx`` on the line ``Im y = η``
    (``t = s e^{iη}``, ``c = cos η > 0``); the step returned is the largest h for which some η on
    a grid of (0, π/2) meets ``tolerance``. Write ``P(N >= k) = 1 - P(N < k)``: the first part
    integrates to ``1/c``; expand ``P(N < k)`` over the sets A ⊆ T of m < k arrivals, where
    ``|e^{-q_a t}| = e^{-q_a s c}`` and ``∫ λ s^{m+1} e^{-s c q(Ω \\ A)} ds/s = λ m! / (c q(Ω \\ A))^{m+1}``
    (``λ + q(T \\ A) = q(Ω \\ A)``). Two bounds on the sum, both valid, of which the smaller is used:

    * ``|1 - e^{-q_a t}| <= q_a s`` for every a ∈ A, ``q(Ω \\ A) >= 1 - M_{k-1}`` =: σ (``M_{k-1}``
      the mass of the k - 1 largest draft tokens, σ the ``spread``) and
      ``Σ_{|A|=m} m! Π_A q_a <= 1``: ``M(η) <= 1/c + k / (c σ)^k``;
    * with B the k - 1 largest tokens and β the least of them (``least_top``):
      ``|1 - e^{-q_a t}| <= 2`` on B, ``q_a s`` off B. A = B (the only A ⊇ B) contributes at most
      ``2^{k-1} λ / (c q(Ω \\ B)) <= 2^{k-1}/c``; any other A misses a token of B, so
      ``q(Ω \\ A) >= β``, and with ``λ <= q(Ω \\ A)`` and ``Σ_{|A ∖ B|=m} Π q_a <= σ^m/m!`` the sets with
      j tokens of B contribute at most ``C(k-1, j) 2^j Σ_{m <= k-1-j} (σ/(cβ))^m / c``.

    The first bound grows like ``σ^{-k}`` when the top tokens hold all but a sliver σ of the mass
    (1e-60 is reached by peaked softmaxes); the second stays of order ``3^{k-1}/c`` there, as long
    as σ <= β. So the step, and the cost ∝ 1/h, grow only logarithmically: about 0.21 at k = 4,
    0.18 at k = 8 and 0.15 at k = 16 for a spread-out q, 0.09 at k = 16 when the top tokens hold
    90%.

    Parameters
    ----------
    k : int
        Number of draws (>= 2).
    top_mass : float
        ``M_{k-1}``; used only when ``spread`` is not given (``σ = 1 - M_{k-1}`` then, which
        cancels when the top tokens hold all but 1e-16: pass ``spread`` summed from the others).
    tolerance : float
        Bound on the discretisation error.
    spread, least_top : float or ndarray, optional
        σ (summed over the tokens outside the top k - 1) and β, one value or one per row; the
        step is the smallest over the rows. Without ``least_top`` only the first bound is used.

    >>> round(race_step(4, 0.0), 3), round(race_step(16, 0.0), 3)
    (0.213, 0.145)
    >>> round(race_step(8, 1.0, spread=1e-60), 4), round(race_step(8, 1.0, spread=1e-60, least_top=0.1), 3)
    (0.0083, 0.219)
    """
    eta = np.linspace(0.005, 0.5 * np.pi - 0.005, 400)
    cosine = np.cos(eta)
    sigma = np.atleast_1d(np.asarray(1.0 - top_mass if spread is None else spread, dtype=np.float64)).reshape(-1, 1)
    sigma = np.maximum(sigma, np.finfo(np.float64).tiny)
    log_bound = np.logaddexp(-np.log(cosine), math.log(k) - k * np.log(cosine * sigma))  # log M(η), first bound
    if least_top is not None:
        beta = np.atleast_1d(np.asarray(least_top, dtype=np.float64)).reshape(-1, 1)
        log_rho = np.log(sigma) - np.log(cosine) - np.log(np.maximum(beta, np.finfo(np.float64).tiny))  # log σ/(cβ)
        terms = [math.log(1 + 2 ** (k - 1)) + np.zeros_like(log_rho)]
        for j in range(k - 1):
            powers = np.arange(k - j)[:, None, None] * log_rho  # m = 0..k-1-j
            terms.append(math.log(math.comb(k - 1, j)) + j * math.log(2) + np.logaddexp.reduce(powers, axis=0))
        second = np.logaddexp.reduce(np.stack(terms), axis=0) - np.log(cosine)
        log_bound = np.minimum(log_bound, second)
    # 2M / (e^{2πη/h} - 1) <= tolerance  <=>  h <= 2πη / log(1 + 2M/tolerance).
    steps = 2.0 * np.pi * eta / np.logaddexp(0.0, math.log(2.0 / tolerance) + log_bound)
    return float(steps.max(axis=-1).min())


def _race_nodes(k: int, smallest_rate: float, step: float) -> np.ndarray:
    """Trapezoid nodes t_l = exp(y_l) covering the exponential-race integrand."""
    # Below t_lo the integrand lambda t e^{-lambda t} P(N >= k) <= t^{k+1}/k! < 1e-18.
    t_lo = (1e-18 * math.factorial(k)) ** (1.0 / (k + 1))
    t_hi = 45.0 / smallest_rate  # lambda t e^{-lambda t} < 1e-18 beyond this
    y = np.arange(math.log(t_lo), math.log(t_hi) + step, step)
    return np.exp(y)


def _multiply_truncated(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Product of polynomials in x (coefficients along the first axis) modulo x^k."""
    k = left.shape[0]
    out = np.zeros(np.broadcast_shapes(left.shape, right.shape))
    for i in range(k):
        out[i:] += left[i] * right[: k - i]
    return out


def _bernoulli_step(state: np.ndarray, success: np.ndarray, scratch: np.ndarray) -> None:
    """Multiply, in place, the truncated count law (coefficients along the first axis) by one
    Bernoulli factor ``(1 - π) + π x``: ``c_m <- c_m + π (c_{m-1} - c_m)``, ``c_0 <- (1 - π) c_0``.
    Works on contiguous coefficient planes with one scratch plane, so it stays in cache."""
    for m in range(state.shape[0] - 1, 0, -1):
        np.subtract(state[m - 1], state[m], out=scratch)
        scratch *= success
        state[m] += scratch
    np.subtract(1.0, success, out=scratch)
    state[0] *= scratch


def _wor_race(sorted_draft: np.ndarray, k: int, step: float | None = None) -> np.ndarray:
    """Exponential-race evaluation of ``P(first k draws without replacement all lie in T_j)``.

    Successive sampling without replacement from q is the arrival order of independent
    exponential clocks E_a / q_a. The first k arrivals all lie in T iff the k-th arrival in T
    precedes the first arrival outside T, which comes at rate λ = 1 - q(T):

        P = ∫_0^∞ λ e^{-λ t} P(N_T(t) >= k) dt,   N_T(t) ~ PoissonBinomial(1 - e^{-q_a t}, a ∈ T).

    The integral is taken by the trapezoidal rule in y = log t (spectrally accurate: the
    integrand is analytic in a strip and decays doubly exponentially), with nodes shared by
    all prefixes. The law of N_T(t) truncated at k - 1 is the product of the factors
    ``(1 - π_a) + π_a x`` modulo x^k; its prefix products come from a blocked scan (√n blocks
    scanned in lock-step, then block offsets, then a second lock-step pass that adds each
    prefix's weighted tail into its integral), so Python loops run √n times, never over the
    vocabulary, and memory stays O(√n · nodes · k). The recurrence forms convex combinations
    only, so it is numerically stable. Prefixes with ``k λ / (1 - M_{k-1}) < RACE_TOLERANCE``
    (M_{k-1}: mass of the k - 1 largest draft tokens, ``1 - M_{k-1}`` summed over the other
    tokens) get the value 1, which that bound on ``P(some of the first k draws falls outside
    T)`` shows to be within tolerance.

    Accuracy: the step comes from :func:`race_step` (default ``step=None``), which bounds the
    discretisation error by ``RACE_TOLERANCE``; the nodes cut off below ``t_lo`` and above
    ``t_hi`` add less than 1e-17, and rounding grows with n (about 1e-14 at n = 2000, 4e-13 at
    n = 131072); tested to 1e-12 against the closed form ``C(m, k)/C(n, k)`` for uniform q,
    k = 2..16, n up to 20000, and against exact subset sums (tests/test_theory_race.py). A fixed
    step does not do: 0.25 errs by 1e-11 at k = 8 and 1e-8 at k = 16.
    Cost O(n · G · k) for G ≈ 150-250 nodes (more as k or M_{k-1} grows).
    """
    q = sorted_draft
    *lead, n = q.shape
    # Mass outside each prefix, summed from the tail for accuracy: lam[..., j] = q(Ω \ T_j).
    lam = np.concatenate([np.cumsum(q[..., ::-1], axis=-1)[..., ::-1], np.zeros((*lead, 1))], axis=-1)
    # σ = 1 - M_{k-1}, summed over the n - k + 1 smallest tokens (1 - M_{k-1} would cancel when the
    # k - 1 largest hold all but 1e-60, and make every prefix look negligible), and β, the least
    # of the k - 1 largest.
    ordered = np.partition(q, n - k, axis=-1)
    spread = ordered[..., : n - k + 1].sum(axis=-1, keepdims=True)
    least_top = ordered[..., n - k + 1 :].min(axis=-1, keepdims=True)
    step = race_step(k, 1.0, spread=spread, least_top=least_top) if step is None else step
    negligible = k * lam / np.maximum(spread, 1e-300) < RACE_TOLERANCE
    rates = np.where(negligible, np.inf, lam)
    smallest = float(np.min(rates)) if np.isfinite(rates).any() else 1.0
    t = _race_nodes(k, smallest, step)  # [G]

    block = max(1, math.isqrt(n))
    blocks = -(-n // block)
    padded_q = np.zeros((*lead, blocks * block))
    padded_q[..., :n] = q
    padded_q = padded_q.reshape(*lead, blocks, block)
    padded_rate = np.zeros((*lead, blocks * block))
    padded_rate[..., :n] = np.where(np.isfinite(rates[..., 1:]), rates[..., 1:], 0.0)
    padded_rate = padded_rate.reshape(*lead, blocks, block)

    def success(b: int) -> np.ndarray:  # π_a(t) = 1 - e^{-q_a t} for position b of every block
        return -np.expm1(-padded_q[..., b, None] * t)

    # Pass 1: the truncated product over each whole block (coefficients first: [k, ..., blocks, G]).
    state = np.zeros((k, *lead, blocks, len(t)))
    state[0] = 1.0
    scratch = np.empty(state.shape[1:])
    for b in range(block):
        _bernoulli_step(state, success(b), scratch)
    # Offsets: the product over all earlier blocks (a loop over √n blocks).
    offsets = np.empty_like(state)
    running = np.zeros((k, *lead, len(t)))
    running[0] = 1.0
    for c in range(blocks):
        offsets[..., c, :] = running
        running = _multiply_truncated(running, state[..., c, :])
    # Pass 2: rescan from the offsets, integrating each prefix's P(N >= k) as it goes.
    state = offsets
    integral = np.zeros((*lead, blocks, block))
    for b in range(block):
        _bernoulli_step(state, success(b), scratch)
        rate = padded_rate[..., b, None]
        weights = step * rate * t * np.exp(-rate * t)
        integral[..., b] = np.sum(weights * (1.0 - state.sum(axis=0)), axis=-1)
    result = np.concatenate([np.zeros((*lead, 1)), integral.reshape(*lead, -1)[..., :n]], axis=-1)
    return np.clip(np.where(negligible, 1.0, result), 0.0, 1.0)


def wor_prefix_containment(sorted_draft: np.ndarray, k: int) -> np.ndarray:
    """``P(set(X) ⊆ T_j)`` for every prefix of an order, X drawn without replacement from q.

    K = 1: q(T). K = 2: the closed form ``Σ_{a∈T} q_a (q(T) - q_a)/(1 - q_a)`` (prefix sums,
    exact up to rounding). K > 2: the exponential-race integral (see :func:`_wor_race`), with
    a step chosen by an error bound (:func:`race_step`): absolute error below 1e-12 for every
    K. Accepts ``[..., n]``; returns ``[..., n + 1]``.
    """
    if k == 1:
        return iid_prefix_containment(sorted_draft, 1)
    if k == 2:
        return _wor_k2(sorted_draft)
    return _wor_race(sorted_draft, k)
