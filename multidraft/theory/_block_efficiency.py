"""Block efficiency of speculative decoding -- a single chain and a tree of K drafts -- with the
validation the speed models share. The public face is :mod:`multidraft.theory.speed`, which
re-exports everything public here (formulas and references in its module docstring).
"""

from __future__ import annotations

import numpy as np

from multidraft.theory.laws import SizeEstimate, check_count, check_size

#: Largest number of (K, L) points -- numbers of drafts times the largest draft length -- that
#: :func:`tree_block_efficiency` and :func:`best_configuration` evaluate before refusing (the
#: depth recursion and the latency table are sequential: about 15 µs and 100 bytes a point,
#: so the limit keeps a call under about 2 s). E[tokens] converges geometrically in L, so no
#: useful length comes near it.
MAX_GRID_POINTS = 100_000
#: Peak bytes per (K, L) point (measured: 10^7 points took 1 GB).
_BYTES_PER_POINT = 100


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def _check_grid(ks: int, length: int) -> None:
    """Refuse, through the size guard, ``ks`` numbers of drafts × draft lengths up to ``length``
    beyond :data:`MAX_GRID_POINTS`, before any work (:mod:`multidraft.theory.laws`)."""
    points = ks * length
    estimate = SizeEstimate(
        f"speed model ({ks} value{'s' if ks > 1 else ''} of K, draft lengths up to L={length:,})",
        points,
        points * _BYTES_PER_POINT,
        unit="(K, L) points",
    )
    check_size(
        estimate,
        "the block efficiency converges geometrically in L (the chance of accepting L tokens in a row), "
        "so search shorter drafts, e.g. L <= 1,000",
        max_variables=MAX_GRID_POINTS,
        variables_name="MAX_GRID_POINTS",
    )


def _check_probabilities(values: object, name: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers in [0, 1], got {values!r}") from None
    if array.size == 0:
        raise ValueError(f"{name}: expected at least one value, got an empty sequence")
    if not np.isfinite(array).all():
        raise ValueError(f"{name}: values must be finite numbers in [0, 1], got {values!r}")
    bad = (array < 0.0) | (array > 1.0)
    if bad.any():
        raise ValueError(f"{name}: values must lie in [0, 1], got {float(array[bad].flat[0])!r}")
    return array


def _check_acceptance_by_live(acceptance: object) -> np.ndarray:
    """1-D array a with a[j-1] = acceptance of the token-level scheme with j live drafts."""
    array = _check_probabilities(acceptance, "acceptance")
    if array.ndim > 1:
        raise ValueError(
            f"acceptance: expected a number or a 1-D sequence (one value per number of live "
            f"drafts), got shape {array.shape}"
        )
    return np.atleast_1d(array)


def _check_nonnegative(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")
    return float(value)


def _check_survival(survival: object) -> float:
    value = _check_probabilities(survival, "survival")
    if value.ndim != 0:
        raise ValueError(f"survival: expected one probability, got shape {value.shape}")
    return float(value)


# --------------------------------------------------------------------------------------------
# single chain
# --------------------------------------------------------------------------------------------


def chain_block_efficiency(acceptance: object, length: int) -> float | np.ndarray:
    """Expected tokens per target call of one draft chain: ``Σ_{i=0}^{L} α^i = (1 - α^{L+1}) / (1 - α)``.

    Each of the L drafted tokens is accepted independently with probability α until the first
    rejection; the target then adds one token. Exact edge cases: ``L + 1`` at α = 1 and ``1`` at
    α = 0. Evaluated as ``-expm1((L+1)·log1p(-(1-α))) / (1-α)`` so that α close to 1 loses no
    digits to cancellation.

    Parameters
    ----------
    acceptance : float or array_like
        Per-token acceptance α in [0, 1] (vectorised over an array).
    length : int
        Draft length L >= 1.

    Returns
    -------
    float or numpy.ndarray
        Block efficiency in [1, L + 1], same shape as ``acceptance``.

    Raises
    ------
    ValueError
        α outside [0, 1] or not finite; L not an integer >= 1.

    Examples
    --------
    >>> chain_block_efficiency(0.5, 3)        # 1 + 1/2 + 1/4 + 1/8
    1.875
    >>> chain_block_efficiency([0.0, 1.0], 4).tolist()
    [1.0, 5.0]

    References
    ----------
    Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding",
    ICML 2023, Eq. (1).
    """
    alpha = _check_probabilities(acceptance, "acceptance")
    length = check_count(length, "length")
    rejection = 1.0 - alpha
    with np.errstate(divide="ignore", invalid="ignore"):
        closed = -np.expm1((length + 1) * np.log1p(-rejection)) / rejection
    result = np.where(rejection == 0.0, float(length + 1), closed)
    return float(result) if result.ndim == 0 else result


def walltime_improvement(acceptance: object, length: int, cost_ratio: float) -> float | np.ndarray:
    """Leviathan's expected walltime improvement ``(1 - α^{L+1}) / ((1 - α)(L·c + 1))``.

    One iteration costs L draft steps (each c target calls) plus one target call and emits
    :func:`chain_block_efficiency` tokens; plain decoding emits one token per target call.

    Parameters
    ----------
    acceptance : float or array_like
        Per-token acceptance α in [0, 1].
    length : int
        Draft length L >= 1.
    cost_ratio : float
        c = (time of one draft step) / (time of one target call), c >= 0.

    Returns
    -------
    float or numpy.ndarray
        The improvement factor (> 1 means faster than plain decoding).

    Raises
    ------
    ValueError
        α outside [0, 1], L < 1, c negative or not finite.

    Examples
    --------
    A speedup needs α > c: at α = c = 0.5 no L gains.

    >>> round(walltime_improvement(0.8, 4, 0.05), 6)     # 3.3616 / 1.2
    2.801333
    >>> max(walltime_improvement(0.5, L, 0.5) for L in range(1, 20))
    1.0

    References
    ----------
    Leviathan, Kalman and Matias, ICML 2023, Theorem 3.8 and Corollary 3.9.
    """
    cost = _check_nonnegative(cost_ratio, "cost_ratio")
    return chain_block_efficiency(acceptance, length) / (length * cost + 1.0)


# --------------------------------------------------------------------------------------------
# trees of K drafts
# --------------------------------------------------------------------------------------------


def _survivor_transition(k: int, survival: float) -> np.ndarray:
    """T[j-1, j'-1] = P(j' live after an acceptance | j live) = Binomial(j - 1, ρ) at j' - 1."""
    from scipy.special import comb

    others = np.arange(k)[:, None]  # j - 1 other live drafts (rows)
    kept = np.arange(k)[None, :]  # j' - 1 of them stay live (columns)
    possible = kept <= others
    pmf = comb(others, kept) * survival**kept * (1.0 - survival) ** np.where(possible, others - kept, 0)
    return np.where(possible, pmf, 0.0)


def _accepted_through_depth(acceptance: np.ndarray, length: int, survival: float) -> np.ndarray:
    """P(depths 1..d all accepted) for d = 1..L under the i.i.d. tree model (forward recursion)."""
    k = acceptance.size
    transition = _survivor_transition(k, survival)
    live = np.zeros(k)
    live[-1] = 1.0  # all K drafts are live at depth 1
    reached = np.empty(length)
    for depth in range(length):
        accepted = live * acceptance  # mass accepted at this depth, by number of live drafts
        reached[depth] = accepted.sum()
        live = accepted @ transition
    return reached


def tree_block_efficiency(acceptance: object, length: int, survival: float = 0.0) -> float:
    """Expected tokens per target call of K draft sequences of length L in the i.i.d. tree model.

    **The i.i.d. tree model.** K draft sequences of length L are verified in one target call.
    At depth d = 1, ..., L the drafts whose first d - 1 tokens equal the accepted prefix are
    *live*; all K are live at depth 1. At each depth, independently of everything before:

    1. with j live drafts, the token-level scheme accepts (emits a token equal to one of the
       live drafts' tokens) with probability a_j = ``acceptance[j - 1]``, the same at every
       depth; otherwise the iteration stops and emits the residual token the scheme drew;
    2. after an acceptance the selected draft stays live and each of the other j - 1 live drafts
       stays live independently with probability ρ = ``survival`` (it proposed the same token),
       so J' = 1 + Binomial(j - 1, ρ).

    After L accepted depths the target adds one token. Writing v_d(j) for the probability that
    depths 1..d-1 were all accepted and j drafts are live at depth d (v_1 = e_K)::

        E[tokens] = 1 + Σ_{d=1}^{L} Σ_j v_d(j) a_j,     v_{d+1}(j') = Σ_j v_d(j) a_j T(j, j'),

    with T(j, j') = Binomial(j-1, ρ) at j' - 1. Special cases checked in the tests:
    K = 1 gives :func:`chain_block_efficiency` (α = a_1); ρ = 0 (distinct sibling tokens, e.g.
    drafts without replacement) gives ``1 + a_K (1 - a_1^L) / (1 - a_1)``; ρ = 1 gives the chain
    with α = a_K. It is non-decreasing in every a_j and in L.

    Parameters
    ----------
    acceptance : float or sequence of float, length K
        a_j for j = 1..K live drafts, each in [0, 1] (e.g. the exact acceptance of a scheme with
        j drafts from :mod:`multidraft.schemes`, or measured acceptance by number of drafts).
    length : int
        Draft length L >= 1.
    survival : float
        ρ in [0, 1]: probability that a non-selected live draft agrees with the accepted token.

    Returns
    -------
    float
        Block efficiency in [1, L + 1].

    Raises
    ------
    ValueError
        Any a_j outside [0, 1], L < 1, ρ outside [0, 1].
    ProblemTooLargeError
        L above :data:`MAX_GRID_POINTS` (refused before any work).

    Examples
    --------
    >>> tree_block_efficiency([0.6], 3) == chain_block_efficiency(0.6, 3)
    True
    >>> round(tree_block_efficiency([0.6, 0.8], 3), 12)   # 1 + 0.8 (1 + 0.6 + 0.36)
    2.568

    References
    ----------
    Miao et al., "SpecInfer", ASPLOS 2024 (token trees); Sun et al., "SpecTr", NeurIPS 2023
    (block efficiency of K draft sequences); Khisti et al., ICLR 2025 (token-level acceptance
    of K drafts). Complexity O(L·K²).
    """
    a = _check_acceptance_by_live(acceptance)
    length = check_count(length, "length")
    rho = _check_survival(survival)
    _check_grid(1, length)
    return float(1.0 + _accepted_through_depth(a, length, rho).sum())
