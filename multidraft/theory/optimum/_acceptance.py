"""Optimal acceptance of multi-draft speculative sampling, in closed form.

The optimal-transport LP of SpecTr is a max-flow problem (source → draft tuple x with
capacity D(x) → token y ∈ set(x) → sink with capacity p(y)), so max-flow = min-cut gives,
for **any** draft law D (theory.md, "Optimal acceptance in closed form"; Khisti et al.,
ICLR 2025, Theorem 3 and Remark 2; Hu et al. 2025):

    P*(acc) = min_{T ⊆ Ω} [ p(T) + 1 - P_D(set(X) ⊆ T) ].

Three independent routes compute it:

* ``method="subsets"``: all 2^n sets at once (subset sums and a zeta transform; n <= 22).
* ``method="sorted"``: one sort plus a prefix scan, O(n log n) (:func:`prefix_cut` over the
  law's ``prefix_scan``), for laws whose optimal cut is a prefix of one token order: IID and
  WithoutReplacement (order by decreasing q/p; exchange argument in theory.md for iid, proof by
  the exponential race in docs/wor_prefix_structure.md for wor), Greedy (its K-1 fixed tokens
  first, then the rest by q̃/p) and Deterministic (the draft set first).
* ``method="threshold"``: independent drafts (Independent, non-identical, any K; IID too, as a
  cross-check of the sorted scan). Their optimal cut is a
  threshold set of the score ``Σ_i q_i(y) Π_{j≠i} q_j(T) - p(y)``, whose weights depend on the
  cut itself; a branch and bound over boxes of the draft masses ``(q_1(T), ..., q_K(T))``
  finds it (proof of completeness: docs/independent_optimum.md; timings:
  benchmarks/bench_independent.py).

``exact=True`` runs every route in :class:`fractions.Fraction` arithmetic end to end.
Every result carries its certificate: the minimising set T, whose cut value equals the
returned number.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.theory.laws import (
    IID,
    LAWS,
    SUBSETS_LIMIT,
    DraftLaw,
    Field,
    WithoutReplacement,
    as_distribution,
    as_exact_distribution,
    check_k,
    check_law,
    check_number,
    field,
    law_class,
    optimum_advice,
    ratio_order,
    subset_sums,
)
from multidraft.theory.optimum._independent import product_cut

__all__ = [
    "OptimalAcceptance",
    "prefix_cut",
    "UnitAcceptance",
    "METHODS",
    "optimal_acceptance",
    "optimal_acceptance_batch",
    "cut_value",
    "unit_acceptance",
    "single_draft_acceptance",
]

#: Methods accepted by :func:`optimal_acceptance`.
METHODS = ("auto", "sorted", "subsets", "threshold")


@dataclass(frozen=True)
class OptimalAcceptance:
    """The optimal acceptance P* with its min-cut certificate.

    Attributes
    ----------
    value : float or Fraction
        P*(acc) = p(T) + 1 - P_D(set(X) ⊆ T) at the certificate set T.
    certificate : numpy.ndarray of int64 (read-only)
        A minimising token set T, sorted ascending.
    method : str
        ``"sorted"``, ``"subsets"`` or ``"threshold"``.
    exact : bool
        Whether ``value`` is an exact Fraction.
    law : str
        Name of the draft law.
    """

    value: float | Fraction
    certificate: np.ndarray
    method: str
    exact: bool
    law: str

    def __float__(self) -> float:
        return float(self.value)

    def __repr__(self) -> str:
        size = len(self.certificate)
        shown = self.certificate.tolist() if size <= 8 else f"{size} tokens"
        return (
            f"OptimalAcceptance(value={self.value!r}, certificate={shown}, "
            f"method={self.method!r}, exact={self.exact}, law={self.law!r})"
        )


def _certificate(tokens: object, n: int) -> np.ndarray:
    """Sorted, read-only token ids of a set (by a mask scan: O(n), no second sort)."""
    mask = np.zeros(n, dtype=bool)
    mask[np.asarray(tokens, dtype=np.int64)] = True
    out = np.flatnonzero(mask)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class UnitAcceptance:
    """Whether P* = 1 (Theorem 2: p(T) >= P_D(set(X) ⊆ T) for every T), with a witness.

    ``violating_set`` (sorted token ids) is a T with p(T) < P_D(set(X) ⊆ T) when ``holds`` is
    False, else None;
    ``optimum`` is the optimal acceptance that decided it.
    """

    holds: bool
    violating_set: np.ndarray | None
    optimum: OptimalAcceptance


def cut_value(target: object, law: DraftLaw, tokens: object, exact: bool = False) -> float | Fraction:
    """The min-cut objective ``p(T) + 1 - P_D(set(X) ⊆ T)`` of one token set T.

    Any T gives an upper bound on P*; the certificate of :func:`optimal_acceptance` attains it.

    >>> from multidraft.theory.laws import IID
    >>> cut_value(["1/2", "1/2"], IID(["1/2", "1/2"], 2), [0], exact=True)
    Fraction(5, 4)
    """
    p = check_law(law).check_target(target, exact)
    value = _cut(p, law, np.asarray(sorted(set(int(t) for t in tokens)), dtype=np.int64), field(exact))
    return value if exact else float(value)


def _cut(p: np.ndarray, law: DraftLaw, tokens: np.ndarray, field: Field) -> float | Fraction:
    """``p(T) + 1 - P_D(set(X) ⊆ T)`` for sorted distinct ``tokens`` (unclipped)."""
    return field.total(p[tokens]) + field.one - law.set_containment(tokens, field.exact)


def optimal_acceptance(
    target: object, law: DraftLaw, method: str = "auto", exact: bool = False
) -> OptimalAcceptance:
    """Optimal acceptance ``P* = min_{T ⊆ Ω} [p(T) + 1 - P_D(set(X) ⊆ T)]`` with certificate.

    Parameters
    ----------
    target : array_like, shape (n,)
        Target distribution p (Fractions or ``"a/b"`` strings for ``exact=True``).
    law : DraftLaw
        The draft law D (IID, Independent, WithoutReplacement, Greedy, Deterministic).
    method : {"auto", "sorted", "subsets", "threshold"}
        ``sorted``: O(n log n) prefix scan (laws with prefix structure); ``threshold``: the
        branch and bound over threshold sets (laws of independent drafts: Independent, IID);
        ``subsets``: all subsets of the tokens that are draftable and have p > 0 (at most 22
        such tokens); ``auto``: sorted where valid, threshold for Independent laws, else
        subsets.
    exact : bool
        Fraction arithmetic end to end; needs exact target and draft probabilities.

    Returns
    -------
    OptimalAcceptance
        value, certificate set T, method, exactness, law name.

    Raises
    ------
    ValueError
        Bad target, unknown method, a method the law does not support, n too large for subsets.
    RuntimeError
        ``threshold`` could not settle the optimum (a search limit; never a wrong number).

    Examples
    --------
    The uniform-draft example of Khisti et al.: acceptance one although TV(p, q) = 1/6.

    >>> from multidraft.theory.laws import IID
    >>> law = IID(["1/3", "1/3", "1/3"], k=2)
    >>> result = optimal_acceptance(["1/3", "1/6", "1/2"], law, exact=True)
    >>> result.value
    Fraction(1, 1)
    >>> cut_value(["1/3", "1/6", "1/2"], law, result.certificate, exact=True) == result.value
    True

    Two different drafts (Independent law): the threshold search, checked against all subsets.

    >>> from multidraft.theory.laws import Independent
    >>> pair = Independent([["1/5", "3/10", "1/2"], ["1/10", "1/10", "4/5"]])
    >>> found = optimal_acceptance(["1/2", "3/10", "1/5"], pair, exact=True)
    >>> found.value, found.certificate.tolist(), found.method
    (Fraction(39, 50), [1, 2], 'threshold')
    >>> optimal_acceptance(["1/2", "3/10", "1/5"], pair, method="subsets", exact=True).value
    Fraction(39, 50)

    References
    ----------
    Khisti et al., "Multi-Draft Speculative Sampling: Canonical Decomposition and Theoretical
    Limits", ICLR 2025, Theorems 2-3 and Remark 2; Hu et al. 2025. Complexity: sorted
    O(n log n) (WOR with K > 2: O(n·G·K) for G ≈ 150-250 quadrature nodes); subsets O(n 2^n);
    threshold O(n log n) plus O(K n) per deciding round (no proved bound on the number of
    boxes; at most 33 measured).
    Exact mode orders tokens by exact ratios and sums Fractions throughout (the sorted scan
    for WOR with K > 1 enumerates the law's tuples).
    """
    if method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; choose one of {', '.join(METHODS)}")
    p = check_law(law).check_target(target, exact)
    if method == "auto":
        method = "sorted" if law.has_prefix_structure else "threshold" if law.independent_drafts else "subsets"
    if method == "threshold":
        if not law.independent_drafts:
            raise ValueError(
                f"method 'threshold' needs independent drafts (IID, Independent); the {law.name} law "
                "needs method='sorted' or 'subsets'"
            )
        return _threshold(p, law, exact)
    if method == "sorted":
        if not law.has_prefix_structure:
            raise ValueError(
                f"method 'sorted' needs a law with prefix structure (iid, wor, greedy, "
                f"deterministic), not the {law.name} law; {optimum_advice(law)}"
            )
        return _sorted(p, law, exact)
    return _subsets(p, law, exact)


def prefix_cut(target: object, law: DraftLaw, exact: bool = False) -> tuple[np.ndarray, int, float | Fraction]:
    """The sorted scan: ``(order, best, value)`` with ``order`` the law's scan order
    (:meth:`~multidraft.theory.laws.DraftLaw.prefix_scan`), ``T* = order[:best]`` the prefix of
    least cut value and ``value = p(T*) + 1 - P_D(set(X) ⊆ T*)`` = P* (a float clipped at one,
    or a Fraction). Valid for the laws with prefix structure; the one scan behind the optimum's
    ``method="sorted"`` and the optimal verifier. For iid drafts and drafts without replacement
    in floats, ``order`` holds the draft's support only (:func:`_support_scan`).

    >>> from multidraft.theory.laws import IID
    >>> order, best, value = prefix_cut([0.9, 0.1], IID([0.5, 0.5], 2))
    >>> order[:best].tolist(), value
    ([1], 0.85)
    """
    return _prefix_cut(check_law(law).check_target(target, exact), law, exact)


def _prefix_cut(p: np.ndarray, law: DraftLaw, exact: bool) -> tuple[np.ndarray, int, float | Fraction]:
    """:func:`prefix_cut` of a target already checked by ``law.check_target``."""
    if not exact and isinstance(law, _SUPPORT_LAWS):
        order, contained = _support_scan(p, law)
    else:
        order, contained = law.prefix_scan(p, exact)
    values = _prefix_cut_values(p, order, contained)  # p(T_j) - P(set(X) ⊆ T_j)
    best = int(np.argmin(values))
    return order, best, field(exact).probability(1 + values[best])


def _sorted(p, law: DraftLaw, exact: bool) -> OptimalAcceptance:
    order, best, value = _prefix_cut(p, law, exact)
    return OptimalAcceptance(value, _certificate(order[:best], law.n), "sorted", exact, law.name)


#: Laws drawn from one draft q whose scan runs on q's support only (:func:`_support_scan`).
_SUPPORT_LAWS = (IID, WithoutReplacement)


def _support_scan(p: np.ndarray, law: DraftLaw) -> tuple[np.ndarray, np.ndarray]:
    """``law.prefix_scan(p)`` on the draft's support only: the decreasing-q/p order of the
    tokens with q > 0 and the containment of its prefixes (length s + 1).

    A token with q(y) = 0 lies in no draft tuple, so ``P(set(X) ⊆ T)`` does not change when it
    joins T while p(T) can only grow: no prefix through such tokens beats the prefix before
    them, and the scan over the support alone has the same minimum. O(n) to find the support,
    O(s log s) to order it."""
    q = law.draft
    support = np.flatnonzero(q > 0)
    if len(support) == len(q):
        return law.prefix_scan(p)
    order = support[ratio_order(p[support], q[support])]
    return order, law.sorted_prefix_containment(q[order], law.k)


def _prefix_cut_values(p: np.ndarray, order: np.ndarray, contained: np.ndarray) -> np.ndarray:
    """``p(T_j) - contained_j`` for the prefixes T_j of ``order`` along the last axis
    (``[..., n + 1]``; the cut value is one more): a gather, a prefix sum and a subtraction
    into one array, so the scan adds a few passes, and no allocation, to the sort (floats, or
    Fractions in object arrays)."""
    values = np.empty(contained.shape, dtype=contained.dtype)
    values[..., 0] = 0
    if p.ndim == 1:
        np.take(p, order, out=values[1:])
    else:
        values[..., 1:] = np.take_along_axis(p, order, axis=-1)
    np.cumsum(values[..., 1:], axis=-1, out=values[..., 1:])
    return np.subtract(values, contained, out=values)


def _threshold(p, law: DraftLaw, exact: bool) -> OptimalAcceptance:
    """The threshold-set search of :func:`~multidraft.theory.optimum._independent.product_cut` on the
    law's draft marginals; the value is recomputed from the certificate as :func:`cut_value` does."""
    certificate = _certificate(product_cut(p, law.marginals(exact=exact), exact=exact).certificate, law.n)
    value = field(exact).probability(_cut(p, law, certificate, field(exact)))
    return OptimalAcceptance(value, certificate, "threshold", exact, law.name)


def _subsets(p, law: DraftLaw, exact: bool) -> OptimalAcceptance:
    """Minimum of the cut value over all token sets, after an exact reduction: tokens no draft
    can take are never worth including (they only add p), and draftable tokens with
    p = 0 are always worth including, so only the draftable tokens with p > 0 vary."""
    positive = p > 0
    active = np.flatnonzero(law.support & positive)
    forced = np.flatnonzero(law.support & ~positive)
    if len(active) > SUBSETS_LIMIT:
        raise ValueError(
            f"method 'subsets': {len(active)} tokens are both draftable and have p > 0, more than "
            f"the limit of {SUBSETS_LIMIT} (2^n sets); {optimum_advice(law)}"
        )
    values = subset_sums(p[active]) + 1 - law.containment_all_subsets(exact=exact, active=active, forced=forced)
    best = int(np.argmin(values))
    chosen = [int(t) for i, t in enumerate(active) if best >> i & 1]
    value = field(exact).probability(values[best])
    return OptimalAcceptance(value, _certificate(list(forced) + chosen, law.n), "subsets", exact, law.name)


def unit_acceptance(
    target: object, law: DraftLaw, exact: bool = False, tolerance: float = 1e-12
) -> UnitAcceptance:
    """Decide whether the optimal acceptance is one (Theorem 2 and its K-draft form).

    ``P* = 1`` iff ``p(T) >= P_D(set(X) ⊆ T)`` for every T ⊆ Ω. The optimal cut set is a
    violating T whenever one exists, so the decision and the witness come from
    :func:`optimal_acceptance`. In float mode a shortfall below ``tolerance`` counts as one.

    >>> from multidraft.theory.laws import IID
    >>> unit_acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 2), exact=True).holds
    True
    >>> unit_acceptance([0.9, 0.1], IID([0.5, 0.5], 2)).violating_set
    array([1])
    """
    tolerance = check_number(tolerance, "tolerance", "in [0, 1) (a shortfall of P* below 1 that counts as one)", lambda t: 0 <= t < 1)
    optimum = optimal_acceptance(target, law, exact=exact)
    holds = optimum.value == 1 if exact else optimum.value >= 1 - tolerance
    return UnitAcceptance(bool(holds), None if holds else optimum.certificate, optimum)


#: Largest number of entries of the ``[rows, n]`` arrays one block of the batched scan works on
#: (a whole batch at n = 131072 would allocate arrays of 10⁸ bytes, whose page faults cost more
#: than the scan).
_BATCH_BLOCK_ENTRIES = 1 << 19


#: The kinds of law with a batched optimum (``DraftLaw.batched_optimum``): iid, wor.
BATCH_LAWS = tuple(kind for kind, cls in LAWS.items() if cls.batched_optimum)


def optimal_acceptance_batch(target: object, draft: object, k: int, law: str | type[DraftLaw] = "iid") -> np.ndarray:
    """Optimal acceptance for a batch of (p, q) pairs ``[B, n]`` under an iid or wor law.

    The same prefix scan as :func:`optimal_acceptance` (``method="sorted"``) for every row:
    ``P*_b = min_j [p_b(T_j) + 1 - P(set(X) ⊆ T_j)]`` over the prefixes of the decreasing-q/p
    order of row b, vectorised over blocks of rows small enough to stay in cache. ``law`` is a
    law class with ``batched_optimum`` or its kind (:data:`BATCH_LAWS`).

    >>> optimal_acceptance_batch([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]], k=2)
    array([1.  , 0.75])
    """
    k = check_k(k)
    law = law_class(law) if isinstance(law, str) else law
    if not (isinstance(law, type) and issubclass(law, DraftLaw) and law.batched_optimum):
        raise ValueError(f"law: batched optimum supports {', '.join(map(repr, BATCH_LAWS))}, got {law!r}")
    target, draft = (
        values if isinstance(values, np.ndarray) and values.dtype.kind in "fiu" else as_distribution(values, name, batched=True)
        for values, name in ((target, "target"), (draft, "draft"))
    )
    if target.shape != draft.shape or target.ndim != 2:
        raise ValueError(f"target and draft: expected equal shapes [B, n], got {target.shape} and {draft.shape}")
    out = np.empty(target.shape[0])
    block = max(1, _BATCH_BLOCK_ENTRIES // max(target.shape[1], 1))
    for start in range(0, target.shape[0], block):
        rows = slice(start, start + block)
        p = as_distribution(target[rows], "target", batched=True)
        q = as_distribution(draft[rows], "draft", batched=True)
        order = ratio_order(p, q)
        contained = law.sorted_prefix_containment(np.take_along_axis(q, order, axis=-1), k)
        out[rows] = np.minimum(1.0 + _prefix_cut_values(p, order, contained).min(axis=-1), 1.0)
    return out


def single_draft_acceptance(target: object, draft: object, exact: bool = False) -> float | Fraction:
    """Acceptance of single-draft speculative sampling: ``Σ_y min(p(y), q(y)) = 1 - TV(p, q)``.

    (Leviathan et al. 2023; Chen et al. 2023.) Equals :func:`optimal_acceptance` with K = 1.

    >>> single_draft_acceptance(["1/3", "1/6", "1/2"], ["1/3", "1/3", "1/3"], exact=True)
    Fraction(5, 6)
    """
    parse = as_exact_distribution if exact else as_distribution
    p, q = field(exact).array(parse(target, "target")), field(exact).array(parse(draft, "draft"))
    if len(p) != len(q):
        raise ValueError(f"target and draft: lengths differ ({len(p)} vs {len(q)})")
    return field(exact).total(np.minimum(p, q))
