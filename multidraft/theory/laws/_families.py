"""Sampling transforms and random families of distributions.

The transforms (:func:`softmax`, :func:`top_k`, :func:`top_p`) are the ones language-model
sampling applies before a token is drawn; the random families (:func:`dirichlet`,
:func:`zipf`) feed tests and benchmarks. Their inputs are checked by
:mod:`~multidraft.theory.laws._distributions`.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory.laws._distributions import as_distribution, check_count, check_generator, check_number

__all__ = ["softmax", "top_k", "top_p", "dirichlet", "zipf"]


def _check_size(size: object) -> int | None:
    return None if size is None else check_count(size, "size", meaning="the number of distributions")


def softmax(logits: object, temperature: float = 1.0) -> np.ndarray:
    """Temperature softmax ``p_i = exp(l_i / T) / sum_j exp(l_j / T)`` along the last axis.

    ``temperature = 0`` gives the one-hot argmax (greedy decoding). Computed stably by
    subtracting the maximum; ``-inf`` logits get probability zero.

    >>> softmax([0.0, 0.0, float("-inf")])
    array([0.5, 0.5, 0. ])

    Raises ``ValueError`` for a temperature that is negative or not a finite number, and for
    logits that are not numeric, empty, NaN or ``+inf``, or ``-inf`` everywhere in a row.
    """
    temperature = check_number(temperature, "temperature", ">= 0", lambda t: t >= 0)
    try:
        z = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"logits: not a numeric array ({error})") from None
    if z.ndim == 0 or z.shape[-1] == 0:
        raise ValueError(f"logits: expected an array with at least one entry per row, got shape {z.shape}")
    if np.isnan(z).any() or np.isposinf(z).any():
        raise ValueError("logits: contain NaN or +inf entries")
    if np.isneginf(z).all(axis=-1).any():
        raise ValueError("logits: a row is -inf everywhere (no token has positive probability)")
    if temperature == 0:
        return (z == z.max(axis=-1, keepdims=True)).astype(np.float64) / np.sum(
            z == z.max(axis=-1, keepdims=True), axis=-1, keepdims=True
        )
    scaled = (z - z.max(axis=-1, keepdims=True)) / temperature
    weights = np.exp(scaled)
    return weights / weights.sum(axis=-1, keepdims=True)


def top_k(distribution: object, k: int) -> np.ndarray:
    """Keep the ``k`` most likely entries (ties broken by lower index) and renormalise.

    >>> top_k([0.1, 0.6, 0.3], 2)
    array([0.        , 0.66666667, 0.33333333])
    """
    p = as_distribution(distribution, "distribution", batched=True)
    k = check_count(k, "k", meaning="the number of tokens top-k keeps")
    if k >= p.shape[-1]:
        return p
    order = np.argsort(-p, axis=-1, kind="stable")
    keep = np.zeros_like(p, dtype=bool)
    np.put_along_axis(keep, order[..., :k], True, axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def top_p(distribution: object, mass: float) -> np.ndarray:
    """Nucleus filter: keep the smallest prefix of tokens, by decreasing probability, whose
    mass reaches ``mass`` (Holtzman et al., 2020), and renormalise.

    >>> top_p([0.1, 0.6, 0.3], 0.8)
    array([0.        , 0.66666667, 0.33333333])
    """
    p = as_distribution(distribution, "distribution", batched=True)
    mass = check_number(mass, "mass", "in (0, 1] (the nucleus mass of top_p)", lambda m: 0 < m <= 1)
    order = np.argsort(-p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    before = np.cumsum(sorted_p, axis=-1) - sorted_p
    keep_sorted = before < mass
    keep = np.zeros_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    kept = np.where(keep, p, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def dirichlet(n: int, alpha: float, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
    """Draw distributions from a symmetric Dirichlet(alpha) on ``n`` tokens.

    Small ``alpha`` gives sparse, peaked distributions; large ``alpha`` flat ones. ``size``
    rows (shape ``[size, n]``) or one distribution (``size=None``, shape ``[n]``).

    >>> dirichlet(3, 1.0, np.random.default_rng(0)).shape
    (3,)
    >>> dirichlet(3, float("nan"), np.random.default_rng(0))
    Traceback (most recent call last):
    ...
    ValueError: alpha: must be a finite number > 0, got nan
    """
    n = check_count(n, "n", meaning="the vocabulary size")
    alpha = check_number(alpha, "alpha", "> 0", lambda a: a > 0)
    rng = check_generator(rng)
    size = _check_size(size)
    shape = (n,) if size is None else (size, n)
    gamma = rng.standard_gamma(alpha, size=shape)
    # Guard the (astronomically rare) all-underflow row for tiny alpha.
    gamma[..., 0] += (gamma.sum(axis=-1) == 0) * 1.0
    return gamma / gamma.sum(axis=-1, keepdims=True)


def zipf(
    n: int,
    exponent: float = 1.1,
    rng: np.random.Generator | None = None,
    size: int | None = None,
) -> np.ndarray:
    """Zipf-like distribution ``p_(r) ∝ r^(-exponent)`` over ranks, as in language models.

    With ``rng`` the ranks are assigned to tokens by a random permutation per row (so two
    draws share the shape but not the token order); without it token ``i`` has rank ``i + 1``.

    >>> zipf(3, 1.0).round(4).tolist()
    [0.5455, 0.2727, 0.1818]
    >>> zipf(10, float("nan"))
    Traceback (most recent call last):
    ...
    ValueError: exponent: must be a finite number > 0, got nan
    """
    n = check_count(n, "n", meaning="the vocabulary size")
    exponent = check_number(exponent, "exponent", "> 0", lambda e: e > 0)
    rng = None if rng is None else check_generator(rng)
    size = _check_size(size)
    weights = np.arange(1, n + 1, dtype=np.float64) ** (-exponent)
    weights /= weights.sum()
    if rng is None:
        return weights if size is None else np.tile(weights, (size, 1))
    rows = 1 if size is None else size
    out = np.stack([weights[rng.permutation(n)] for _ in range(rows)])
    return out[0] if size is None else out
