"""Draft laws: how the K draft tokens X = (X_1, ..., X_K) are drawn.

A draft law D on Ω^K (Ω = {0, ..., n-1}) is everything the optimal acceptance depends on:
by max-flow/min-cut (see :mod:`multidraft.theory.optimal`) only the containment
probabilities ``P_D(set(X) ⊆ T)`` matter. Every law here can

* ``sample(rng, size)`` draft tuples,
* give ``containment(sets)`` for a boolean mask ``[..., n]`` of token sets (vectorised),
* ``enumerate()`` its tuples with probabilities (small n; exact Fractions on request),
* ``containment_all_subsets()`` for every T ⊆ Ω (n <= 22) as an array indexed by bitmask,
* give the law of each draft, ``marginal(position)`` (all K: ``marginals()``), and count its
  tuples without listing them, ``tuple_count(merged)``,
* and, since every law here except :class:`Independent` has an optimal cut that is a prefix of
  one token order, give ``scan_order(target)`` and ``prefix_containment(order)``.

The array kernels behind these answers (subset sums, the zeta transform, ratio orders, the
prefix containment of iid drafts and of drafts without replacement) live in
:mod:`multidraft.theory._kernels` and are re-exported here.

Laws (theory.md, "Notation"): :class:`IID` (SpecTr, SpecInfer, Khisti et al.),
:class:`Independent` (non-identical drafts), :class:`WithoutReplacement` (Gumbel-top-K;
Jeon et al. 2024), :class:`Greedy` (Hu et al. 2025) and :class:`Deterministic` (top-k trees).
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from multidraft.theory._kernels import (
    exact_ratio_order,
    iid_prefix_containment,
    membership,
    ratio_order,
    subset_sums,
    wor_prefix_containment,
    zeta_transform,
)
from multidraft.theory.distributions import (
    MASS_FLOOR,
    as_distribution,
    as_exact_distribution,
    check_count,
    check_generator,
    is_exact_input,
)
from multidraft.theory.limits import SizeEstimate, check_size, optimum_advice

__all__ = [
    "DraftLaw",
    "IID",
    "Independent",
    "WithoutReplacement",
    "Greedy",
    "Deterministic",
    "LAWS",
    "law_class",
    "law_for",
    "ENUMERATION_LIMIT",
    "check_k",
    "check_law",
    "SUBSETS_LIMIT",
    "ratio_order",
    "exact_ratio_order",
    "membership",
    "subset_sums",
    "zeta_transform",
    "iid_prefix_containment",
    "wor_prefix_containment",
]

#: Most draft tuples :meth:`DraftLaw.enumerate` will list before refusing.
ENUMERATION_LIMIT = 2_000_000
#: Largest vocabulary for which all 2^n token sets are enumerated.
SUBSETS_LIMIT = 22


def check_law(law: object, name: str = "law") -> DraftLaw:
    """Return ``law`` if it is a :class:`DraftLaw`, else raise ``TypeError`` saying how to build one.

    >>> check_law([0.5, 0.5])
    Traceback (most recent call last):
    ...
    TypeError: law: expected a draft law (IID, Independent, WithoutReplacement, Greedy or Deterministic from multidraft.theory), got list; build one, e.g. IID(draft, k=2)
    """
    if not isinstance(law, DraftLaw):
        raise TypeError(
            f"{name}: expected a draft law (IID, Independent, WithoutReplacement, Greedy or Deterministic "
            f"from multidraft.theory), got {type(law).__name__}; build one, e.g. IID(draft, k=2)"
        )
    return law


def check_k(k: int) -> int:
    """The number of drafts ``k`` as an ``int``, checked ``>= 1`` by :func:`check_count`."""
    return check_count(k, "k", meaning="the number of drafts")


def _validated(draft: object, name: str, normalize: bool) -> tuple[np.ndarray, tuple[Fraction, ...] | None]:
    """Float copy of a draft distribution plus its exact Fractions when given exactly.

    A positive exact entry below :data:`~multidraft.theory.distributions.MASS_FLOOR` (1e-300)
    is kept as ``MASS_FLOOR`` in the float copy, so that every support
    decision made on it (enumeration, support masks, K <= support size) agrees with the exact
    law, and the float copy keeps the invariants of :func:`as_distribution`.
    """
    if is_exact_input(draft) or (isinstance(draft, str) and "." not in draft):
        exact = as_exact_distribution(draft, name, normalize=normalize)
        return np.array([max(float(x), MASS_FLOOR) if x > 0 else 0.0 for x in exact]), exact
    return as_distribution(draft, name, normalize=normalize), None


class DraftLaw(ABC):
    """A law of K draft tokens on Ω = {0, ..., n-1}.

    Subclasses set ``k``, ``n`` and ``name`` (the law's *kind*, its key in :data:`LAWS`) and
    implement sampling, enumeration and containment. ``exact`` is True when the law was given
    exact (Fraction) probabilities. What kind of law an object is, is decided here, by its
    class: other modules ask the law (its flags and methods) or dispatch on the class, never on
    ``name``.
    """

    k: int
    n: int
    name: str
    #: Built from draft distributions (:meth:`from_drafts`); False for a fixed set of tokens.
    takes_distributions: bool = True
    #: Built from one draft distribution per draft (:meth:`from_drafts` keeps them apart);
    #: False for the laws of one shared draft distribution.
    one_distribution_per_draft: bool = False
    #: The optimum has a batched form over rows of (p, q): the law is fixed by one draft
    #: distribution q and K, and its scan order is the decreasing-q/p order
    #: (:meth:`sorted_prefix_containment`; :func:`~multidraft.theory.optimal_acceptance_batch`).
    batched_optimum: bool = False
    #: The laws whose optimal min-cut set is a prefix of :meth:`scan_order`.
    has_prefix_structure: bool = True
    #: Exchangeable laws (merge tuples into multisets in LPs).
    symmetric: bool = True
    #: The drafts X_1, ..., X_K are independent: the law is the product of its :meth:`marginals`
    #: (so ``P(set(X) ⊆ T) = Π_i P(X_i ∈ T)``).
    independent_drafts: bool = False

    @property
    @abstractmethod
    def exact(self) -> bool:
        """Whether exact Fraction probabilities are available."""

    @classmethod
    def from_drafts(cls, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> DraftLaw:
        """The law of this kind over ``drafts``, the draft distributions of the K drafts
        (:func:`law_for`). A law of one shared distribution reads the first (the others are
        the same distribution, e.g. the drafts of one model at one prefix); ``k`` defaults to
        ``len(drafts)``."""
        drafts = list(drafts)
        if not drafts:
            raise ValueError(f"drafts: the {cls.name} law needs at least one draft distribution")
        return cls(drafts[0], len(drafts) if k is None else k, normalize=normalize)

    def check_target(self, target: object, exact: bool = False) -> np.ndarray:
        """The target p checked against this law: a distribution of length n.

        Returns a float64 array, or with ``exact`` an object array of Fractions (the target
        given as Fractions, integers or ``"a/b"`` strings, and the law exact). The one check of
        a target against a law; every entry point that takes ``(target, law)`` calls it.

        >>> IID([0.5, 0.5], 2).check_target([0.2, 0.3, 0.5])
        Traceback (most recent call last):
        ...
        ValueError: target: length 3 does not match the draft law's vocabulary n=2
        """
        if exact:
            p = np.array(as_exact_distribution(target, "target"), dtype=object)
            self._require_exact()
        else:
            p = as_distribution(target, "target")
        if len(p) != self.n:
            raise ValueError(f"target: length {len(p)} does not match the draft law's vocabulary n={self.n}")
        return p

    def single_draft(self) -> DraftLaw:
        """The law of one draft from the same draft model: ``IID(q, 1)`` with q the first
        draft's distribution before the law's rule (q itself for the laws of one draft
        distribution, q_1 for :class:`Independent`); exact when this law is. The baseline
        that single-draft speculative sampling runs on."""
        return IID(self._first_distribution(), 1)

    def _first_distribution(self) -> object:
        """The distribution the first draft model drafts from (exact Fractions when given)."""
        return self.marginal(0, self.exact)

    @abstractmethod
    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Draw draft tuples: int64 array ``[k]`` or ``[size, k]`` (``size >= 0``)."""

    @staticmethod
    def _sample_count(rng: object, size: object) -> int:
        """The number of tuples :meth:`sample` draws (1 for ``size=None``), once ``rng`` is
        checked to be a ``numpy.random.Generator`` (``TypeError``) and ``size`` a count >= 0
        (``ValueError`` naming it)."""
        check_generator(rng)
        return 1 if size is None else check_count(size, "size", minimum=0, meaning="the number of draft tuples")

    @abstractmethod
    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """All tuples of positive probability: ``(tuples [m, k] int64, probs [m])``.

        With ``exact=True`` the probabilities are an object array of Fractions.
        """

    def _enumeration_guard(self, count: int) -> None:
        """Refuse (:class:`~multidraft.theory.limits.ProblemTooLargeError`) to list more than
        ``ENUMERATION_LIMIT`` tuples: ``count`` rows of K int64 tokens and a float64 probability."""
        estimate = SizeEstimate(
            f"enumerating the {self.name} law (n={self.n}, k={self.k})", count, count * 8 * (self.k + 1), unit="draft tuples"
        )
        check_size(estimate, optimum_advice(self, lp=False), max_variables=ENUMERATION_LIMIT, variables_name="ENUMERATION_LIMIT")

    def containment(self, sets: np.ndarray) -> np.ndarray:
        """``P(set(X) ⊆ T)`` for boolean masks ``sets[..., n]`` (default: by enumeration)."""
        sets = self._check_sets(sets)
        tuples, probs = self.enumerate()
        inside = np.all(sets[..., tuples], axis=-1)  # [..., m]
        return inside.astype(np.float64) @ probs

    def containment_exact(self, tokens: object) -> Fraction:
        """Exact ``P(set(X) ⊆ T)`` for one token set ``T`` (an iterable of token ids)."""
        self._require_exact()
        mask = np.zeros(self.n, dtype=bool)
        mask[list(tokens)] = True
        tuples, probs = self.enumerate(exact=True)
        inside = np.all(mask[tuples], axis=-1)
        return sum(probs[inside].tolist(), Fraction(0))

    @property
    @abstractmethod
    def support(self) -> np.ndarray:
        """Boolean mask ``[n]`` of the tokens that appear in some draft tuple of positive probability."""

    @abstractmethod
    def tuple_count(self, merged: bool = False) -> int:
        """Number of draft tuples of positive probability, counted from the supports without
        enumerating them (how large an LP over the tuples is before it is built).

        With ``merged``, an exchangeable law (``symmetric``) counts multisets: the rows left once
        tuples that differ only by order are merged. Other laws ignore ``merged``.
        """

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """The law of one draft: ``P(X_position = y)`` for every token y (shape [n]).

        ``position`` runs over 0..k-1. Generic route: the probabilities of :meth:`enumerate`
        summed by ``X_position`` (small n; Fractions with ``exact=True``), which is exact for
        every law; the laws with a closed form override it (O(n), any vocabulary).

        >>> WithoutReplacement([0.5, 0.25, 0.25], k=2).marginal(1).tolist()
        [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
        """
        position = self._check_position(position)
        tuples, probs = self.enumerate(exact=exact)
        if exact:
            out = np.array([Fraction(0)] * self.n, dtype=object)
            for token, prob in zip(tuples[:, position].tolist(), probs.tolist()):
                out[token] += prob
            return out
        out = np.zeros(self.n)
        np.add.at(out, tuples[:, position], probs)
        return out

    def marginals(self, exact: bool = False) -> np.ndarray:
        """The K marginals ``[k, n]``, row i the law of ``X_i`` (:meth:`marginal`).

        For the product laws (:class:`IID`, :class:`Independent`) the rows are the draft
        distributions themselves and determine the law.
        """
        return np.stack([self.marginal(i, exact) for i in range(self.k)])

    def _check_position(self, position: int) -> int:
        position = check_count(position, "position", minimum=0)
        if position >= self.k:
            raise ValueError(
                f"position: the {self.name} law with k={self.k} has draft positions 0..{self.k - 1}, got {position}"
            )
        return position

    def _one_hot(self, token: int, exact: bool) -> np.ndarray:
        """The law of a draft fixed to ``token`` (floats, or Fractions with ``exact``)."""
        if exact:
            out = np.array([Fraction(0)] * self.n, dtype=object)
            out[token] = Fraction(1)
            return out
        out = np.zeros(self.n)
        out[token] = 1.0
        return out

    def containment_all_subsets(
        self, exact: bool = False, active: np.ndarray | None = None, forced: np.ndarray | None = None
    ) -> np.ndarray:
        """``P(set(X) ⊆ forced ∪ S)`` for every subset S of the ``active`` tokens.

        Returns an array over the 2^|active| bitmasks (bit i = ``active[i]``); ``forced`` tokens
        are in every set. Defaults: all tokens active, none forced (|active| <= SUBSETS_LIMIT).
        Generic route: the law of ``set(X)`` from :meth:`enumerate`, then the zeta transform.
        """
        active, forced = self._subset_frame(active, forced)
        tuples, probs = self.enumerate(exact=exact)
        bit_of = np.full(self.n, -1, dtype=np.int64)  # -1: outside every set
        bit_of[forced] = 0
        bit_of[active] = np.left_shift(1, np.arange(len(active)))
        bits = bit_of[tuples]
        rows = np.all(bits >= 0, axis=-1)
        bits = np.bitwise_or.reduce(bits[rows], axis=-1) if rows.any() else np.zeros(0, np.int64)
        masses = np.zeros(1 << len(active), dtype=object if exact else np.float64)
        if exact:
            masses[:] = Fraction(0)
            for bit, prob in zip(bits.tolist(), probs[rows].tolist()):
                masses[bit] += prob
        else:
            np.add.at(masses, bits, probs[rows])
        return zeta_transform(masses, len(active))

    def _subset_frame(self, active: np.ndarray | None, forced: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        active = np.arange(self.n) if active is None else np.asarray(active, dtype=np.int64)
        forced = np.zeros(0, np.int64) if forced is None else np.asarray(forced, dtype=np.int64)
        if len(active) > SUBSETS_LIMIT:
            raise ValueError(
                f"subsets: {len(active)} active tokens exceed the limit of {SUBSETS_LIMIT} "
                f"(2^n token sets); {optimum_advice(self)}"
            )
        return active, forced

    def scan_order(self, target: object, exact: bool = False) -> np.ndarray:
        """A token order whose prefixes contain an optimal min-cut set for this law
        (``target`` a float array, or a sequence of Fractions with ``exact=True``)."""
        raise NotImplementedError(f"{self.name} law has no single-order prefix structure")

    def prefix_containment(self, order: np.ndarray, exact: bool = False) -> np.ndarray:
        """``P(set(X) ⊆ T_j)`` for the prefixes ``T_j`` of ``order`` (length n + 1)."""
        raise NotImplementedError(f"{self.name} law has no prefix containment")

    def _enumerated_prefix_containment(self, order: np.ndarray, exact: bool) -> np.ndarray:
        """Prefix containment from :meth:`enumerate` in O(m k + n): a tuple lies in the prefix
        T_j iff j exceeds the largest rank of its tokens, so the masses bucketed by that rank
        and summed cumulatively give every prefix at once."""
        tuples, probs = self.enumerate(exact=exact)
        rank = np.empty(self.n, dtype=np.int64)
        rank[np.asarray(order)] = np.arange(self.n)
        needed = rank[tuples].max(axis=-1) + 1
        masses = np.zeros(self.n + 1, dtype=object if exact else np.float64)
        if exact:
            masses[:] = Fraction(0)
            for j, prob in zip(needed.tolist(), probs.tolist()):
                masses[j] += prob
        else:
            np.add.at(masses, needed, probs)
        return np.cumsum(masses)

    def check_tuple(self, drafts: Sequence[int]) -> np.ndarray:
        """Validate one observed draft tuple: length k, tokens in range, positive probability."""
        drafts = np.asarray(drafts)
        if drafts.shape != (self.k,):
            raise ValueError(f"drafts: expected {self.k} draft tokens (k={self.k}), got shape {drafts.shape}")
        if not np.issubdtype(drafts.dtype, np.integer):
            raise ValueError(f"drafts: token ids must be integers, got dtype {drafts.dtype}")
        if (drafts < 0).any() or (drafts >= self.n).any():
            raise ValueError(f"drafts: token ids must lie in [0, {self.n}), got {drafts.tolist()}")
        if not self._tuple_possible(drafts):
            raise ValueError(f"drafts: {drafts.tolist()} has probability zero under the {self.name} law")
        return drafts.astype(np.int64)

    @abstractmethod
    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        """Whether a tuple of the right shape has positive probability."""

    def _require_exact(self) -> None:
        if not self.exact:
            raise ValueError(
                f"{self.name} law: exact mode needs draft probabilities given as Fractions, "
                "integers or 'a/b' strings"
            )

    def _check_sets(self, sets: np.ndarray) -> np.ndarray:
        sets = np.asarray(sets, dtype=bool)
        if sets.shape[-1] != self.n:
            raise ValueError(f"sets: expected masks of length n={self.n}, got shape {sets.shape}")
        return sets


def _product_enumeration(drafts: Sequence[np.ndarray], exact_drafts: Sequence | None, guard) -> tuple[np.ndarray, np.ndarray]:
    """Tuples of independent coordinates with the product probability."""
    supports = [np.flatnonzero(q > 0) for q in drafts]
    guard(math.prod(len(s) for s in supports))
    grids = np.meshgrid(*supports, indexing="ij")
    tuples = np.stack([g.reshape(-1) for g in grids], axis=-1).astype(np.int64)
    if exact_drafts is None:
        probs = np.ones(len(tuples))
        for i, q in enumerate(drafts):
            probs = probs * q[tuples[:, i]]
        return tuples, probs
    probs = np.empty(len(tuples), dtype=object)
    for row, tup in enumerate(tuples.tolist()):
        probs[row] = math.prod((exact_drafts[i][t] for i, t in enumerate(tup)), start=Fraction(1))
    return tuples, probs


def _product_subset_containment(drafts: Sequence, active: np.ndarray, forced: np.ndarray, exact: bool) -> np.ndarray:
    """``Π_i q_i(forced ∪ S)`` for every subset S of ``active`` (independent coordinates)."""
    if exact and any(q is None for q in drafts):
        raise ValueError("exact mode needs draft probabilities given as Fractions, integers or 'a/b' strings")
    out: np.ndarray | float = Fraction(1) if exact else 1.0
    for q in drafts:
        values = np.array([q[t] for t in active.tolist()], dtype=object) if exact else q[active]
        base = sum((q[t] for t in forced.tolist()), Fraction(0)) if exact else q[forced].sum()
        sums = subset_sums(values) + base
        out = out * (sums if exact else np.minimum(sums, 1.0))
    return out


class _RatioPrefixLaw(DraftLaw):
    """A law of K drafts from one draft distribution q whose optimal min-cut set is a prefix of
    the decreasing-q/p order (:func:`ratio_order`): :class:`IID` and :class:`WithoutReplacement`.

    Holds what the two share: the draft q (floats, plus Fractions when given exactly), the
    support, the first draft's law q, the scan order and the prefix containment, which reads
    ``_prefix_kernel(q[order], k)`` (a kernel of :mod:`multidraft.theory._kernels`) in float
    mode and ``_exact_prefix_containment(order)`` in exact mode.
    """

    batched_optimum = True

    def __init__(self, draft: object, k: int, *, normalize: bool = False) -> None:
        self.k = check_k(k)
        self.draft, self._exact_draft = _validated(draft, "draft", normalize)
        self.n = len(self.draft)

    @property
    def exact(self) -> bool:
        return self._exact_draft is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, k={self.k})"

    @property
    def support(self) -> np.ndarray:
        return self.draft > 0

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """q for the first draft (``X_1 ~ q`` under both laws); later positions: subclass."""
        if self._check_position(position) > 0:
            return super().marginal(position, exact)
        if exact:
            self._require_exact()
            return np.array(self._exact_draft, dtype=object)
        return self.draft.copy()

    def scan_order(self, target: object, exact: bool = False) -> np.ndarray:
        if exact:
            self._require_exact()
            return exact_ratio_order(target, self._exact_draft)
        return ratio_order(target, self.draft)

    @classmethod
    def sorted_prefix_containment(cls, sorted_draft: np.ndarray, k: int) -> np.ndarray:
        """``P(set(X) ⊆ T_j)`` for the prefixes of the decreasing-q/p order, from q sorted in
        that order along the last axis (``[..., n] -> [..., n + 1]``, float; any batch shape)."""
        return cls._prefix_kernel(sorted_draft, k)

    def prefix_containment(self, order: np.ndarray, exact: bool = False) -> np.ndarray:
        if exact:
            self._require_exact()
            return self._exact_prefix_containment(order)
        return self._prefix_kernel(self.draft[order], self.k)

    @staticmethod
    @abstractmethod
    def _prefix_kernel(sorted_draft: np.ndarray, k: int) -> np.ndarray:
        """Float ``P(set(X) ⊆ T_j)`` for the prefixes of the order q is sorted in."""

    @abstractmethod
    def _exact_prefix_containment(self, order: np.ndarray) -> np.ndarray:
        """Exact (Fraction) ``P(set(X) ⊆ T_j)`` for the prefixes of ``order``."""


class IID(_RatioPrefixLaw):
    """K drafts drawn independently from one draft distribution q: ``D(x) = Π_i q(x_i)``.

    ``P(set(X) ⊆ T) = q(T)^K``.

    >>> law = IID([0.5, 0.5], k=2)
    >>> float(law.containment(np.array([True, False])))
    0.25
    """

    name = "iid"
    independent_drafts = True
    _prefix_kernel = staticmethod(iid_prefix_containment)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        shape = (self.k,) if size is None else (count, self.k)
        return rng.choice(self.n, size=shape, p=self.draft).astype(np.int64)

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if exact:
            self._require_exact()
        return _product_enumeration(
            [self.draft] * self.k, [self._exact_draft] * self.k if exact else None, self._enumeration_guard
        )

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets)
        return np.minimum(sets.astype(np.float64) @ self.draft, 1.0) ** self.k

    def containment_exact(self, tokens: object) -> Fraction:
        self._require_exact()
        return sum((self._exact_draft[t] for t in set(tokens)), Fraction(0)) ** self.k

    def tuple_count(self, merged: bool = False) -> int:
        support = int(np.count_nonzero(self.draft))
        return math.comb(support + self.k - 1, self.k) if merged else support**self.k

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """q at every position (the drafts are identically distributed)."""
        self._check_position(position)
        return super().marginal(0, exact)

    def marginals(self, exact: bool = False) -> np.ndarray:
        """q in every row; in float mode a read-only view (no K copies of a large vocabulary)."""
        if exact:
            return super().marginals(exact)
        return np.broadcast_to(self.draft, (self.k, self.n))

    def containment_all_subsets(
        self, exact: bool = False, active: np.ndarray | None = None, forced: np.ndarray | None = None
    ) -> np.ndarray:
        active, forced = self._subset_frame(active, forced)
        return _product_subset_containment([self._exact_draft] * self.k if exact else [self.draft] * self.k, active, forced, exact)

    def _exact_prefix_containment(self, order: np.ndarray) -> np.ndarray:
        sums = itertools.accumulate((self._exact_draft[t] for t in order), initial=Fraction(0))
        return np.array([s**self.k for s in sums], dtype=object)

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool((self.draft[drafts] > 0).all())


class Independent(DraftLaw):
    """Drafts drawn independently from non-identical distributions: ``X_i ~ q_i``.

    ``P(set(X) ⊆ T) = Π_i q_i(T)``. An optimal cut is a threshold set of the linear score
    ``Σ_i q_i(y) Π_{j≠i} q_j(T) - p(y)``, whose weights depend on the cut itself, not a prefix
    of one sort: the optimum uses ``method="threshold"`` (a branch and bound over the draft
    masses, :mod:`multidraft.theory._independent`), the subset method (small n) or the LP.
    """

    name = "independent"
    independent_drafts = True
    has_prefix_structure = False
    symmetric = False
    one_distribution_per_draft = True

    @classmethod
    def from_drafts(cls, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> Independent:
        """One distribution per draft; a single one with ``k`` is repeated K times."""
        drafts = list(drafts)
        if len(drafts) == 1 and k is not None:
            drafts = drafts * check_k(k)
        elif k is not None and k != len(drafts):
            raise ValueError(f"k: {len(drafts)} draft distributions make k = {len(drafts)}, got k={k}")
        return cls(drafts, normalize=normalize)

    def __init__(self, drafts: Sequence[object], *, normalize: bool = False) -> None:
        drafts = list(drafts)
        if any(np.ndim(d) == 0 and not isinstance(d, str) for d in drafts):
            raise ValueError("drafts: Independent needs a list of K draft distributions, got a flat list of numbers")
        self.k = check_k(len(drafts))
        pairs = [_validated(d, f"draft[{i}]", normalize) for i, d in enumerate(drafts)]
        self.drafts = np.stack([p[0] for p in pairs]) if len({len(p[0]) for p in pairs}) == 1 else None
        if self.drafts is None:
            raise ValueError(f"drafts: all draft distributions need the same length, got {[len(p[0]) for p in pairs]}")
        exact = [p[1] for p in pairs]
        self._exact_drafts = exact if all(e is not None for e in exact) else None
        self.n = self.drafts.shape[1]

    @property
    def exact(self) -> bool:
        return self._exact_drafts is not None

    def __repr__(self) -> str:
        return f"Independent(n={self.n}, k={self.k})"

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        columns = [rng.choice(self.n, size=count, p=q) for q in self.drafts]
        out = np.stack(columns, axis=-1).astype(np.int64)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if exact:
            self._require_exact()
        return _product_enumeration(
            list(self.drafts), self._exact_drafts if exact else None, self._enumeration_guard
        )

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets).astype(np.float64)
        return np.prod(np.minimum(sets @ self.drafts.T, 1.0), axis=-1)

    def containment_exact(self, tokens: object) -> Fraction:
        self._require_exact()
        tokens = set(tokens)
        return math.prod((sum((q[t] for t in tokens), Fraction(0)) for q in self._exact_drafts), start=Fraction(1))

    @property
    def support(self) -> np.ndarray:
        return (self.drafts > 0).any(axis=0)

    def tuple_count(self, merged: bool = False) -> int:
        return math.prod(int(np.count_nonzero(q)) for q in self.drafts)

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """q_i for draft i."""
        position = self._check_position(position)
        if exact:
            self._require_exact()
            return np.array(self._exact_drafts[position], dtype=object)
        return self.drafts[position].copy()

    def marginals(self, exact: bool = False) -> np.ndarray:
        """The drafts q_i as rows; in float mode a read-only view (no copy)."""
        if exact:
            return super().marginals(exact)
        view = self.drafts.view()
        view.flags.writeable = False
        return view

    def containment_all_subsets(
        self, exact: bool = False, active: np.ndarray | None = None, forced: np.ndarray | None = None
    ) -> np.ndarray:
        active, forced = self._subset_frame(active, forced)
        return _product_subset_containment(self._exact_drafts if exact else list(self.drafts), active, forced, exact)

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(all(self.drafts[i, t] > 0 for i, t in enumerate(drafts)))


class WithoutReplacement(_RatioPrefixLaw):
    """K drafts drawn from q without replacement (successive sampling; Gumbel-top-K).

    ``X_1 ~ q``; each next draw from q renormalised over the tokens not drawn yet, so
    ``D(x) = Π_i q(x_i) / (1 - Σ_{j<i} q(x_j))`` for distinct x. Needs K <= |supp q|.
    Containment of prefixes: see :func:`wor_prefix_containment`.

    **Prefix structure** (an optimal min-cut set is a prefix of the decreasing-q/p order, as
    for iid). Proof, by the exponential race: token a arrives at τ_a = E_a/q_a (E_a ~ Exp(1)
    iid) and the wor order is the arrival order. Let σ_m(S) be the m-th arrival in S and
    N_S(s) the arrivals of S by time s; g(S) = P(set(X) ⊆ S).

    (1) For a ∉ S with μ = q(Ω \\ (S ∪ a)), integrating out τ_a and using memorylessness,
        h(S, a) := [g(S ∪ a) - g(S)] / q_a = ∫_0^∞ e^{-(q_a+μ)s} Q_S(s, μ) ds with
        Q_S(s, μ) = P(N_S(s) <= K-1, σ_{K-1}(S) < s + τ'), τ' ~ Exp(μ) independent.
    (2) Q_S(s, μ) is non-increasing in μ, and Q_{S∪i}(s, μ) >= e^{-q_i s} Q_S(s, μ) (on
        {τ_i > s}, N_{S∪i}(s) = N_S(s) and σ_{K-1}(S ∪ i) <= σ_{K-1}(S)).
    (3) Hence for i, j ∉ S: h(S, i) <= h(S ∪ i, j): the marginal containment gain per unit
        of draft mass is larger for a token added later.
    (4) At a minimiser T of p(T) + 1 - g(T): p_i <= g(T) - g(T \\ i) for i ∈ T and
        p_j >= g(T ∪ j) - g(T) for j ∉ T, so p_i/q_i <= h(T \\ i, i) <= h(T, j) <= p_j/q_j.
    (5) So every minimiser is a threshold set of p/q; if a tie class is split, every step of
        (4) is an equality and moving the split tokens in or out keeps the value, so the
        all-or-none sets are optimal too, and they are prefixes of every tie order. ∎

    (Proof checked by an independent reviewer and numerically: the marginal inequality on
    26,544 exact rational triples, the claim on 90,000 tie-heavy instances.)
    """

    name = "wor"
    _prefix_kernel = staticmethod(wor_prefix_containment)

    def __init__(self, draft: object, k: int, *, normalize: bool = False) -> None:
        super().__init__(draft, k, normalize=normalize)
        if self.k > self.n:
            raise ValueError(f"k: without replacement needs k <= n, got k={self.k} > n={self.n}")
        support = int(np.count_nonzero(self.draft))
        if self.k > support:
            raise ValueError(
                f"k: without replacement needs k <= the number of draft tokens with positive "
                f"probability (entries below MASS_FLOOR={MASS_FLOOR:g} count as zero), got k={self.k} > {support}"
            )

    def tuple_count(self, merged: bool = False) -> int:
        support = int(np.count_nonzero(self.draft))
        return math.comb(support, self.k) if merged else math.perm(support, self.k)

    @classmethod
    def sorted_prefix_containment(cls, sorted_draft: np.ndarray, k: int) -> np.ndarray:
        support = np.count_nonzero(sorted_draft, axis=-1)
        if (support < k).any():
            raise ValueError(f"k: without replacement needs k <= the draft support size, got k={k} > {np.min(support)}")
        return super().sorted_prefix_containment(sorted_draft, k)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        with np.errstate(divide="ignore"):
            keys = np.log(self.draft) + rng.gumbel(size=(count, self.n))
        if self.k < self.n:
            top = np.argpartition(-keys, self.k - 1, axis=-1)[:, : self.k]
        else:
            top = np.tile(np.arange(self.n), (count, 1))
        order = np.argsort(-np.take_along_axis(keys, top, axis=-1), axis=-1, kind="stable")
        out = np.take_along_axis(top, order, axis=-1).astype(np.int64)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if exact:
            self._require_exact()
        support = np.flatnonzero(self.draft > 0)
        self._enumeration_guard(math.perm(len(support), self.k))
        tuples = np.array(list(itertools.permutations(support.tolist(), self.k)), dtype=np.int64)
        q = list(self._exact_draft) if exact else self.draft
        one = Fraction(1) if exact else 1.0
        probs = np.empty(len(tuples), dtype=object if exact else np.float64)
        if exact:
            for row, tup in enumerate(tuples.tolist()):
                prob, left = one, one
                for t in tup:
                    prob, left = prob * q[t] / left, left - q[t]
                probs[row] = prob
        else:
            probs = self._tuple_probabilities(tuples)
        return tuples, probs

    def _tuple_probabilities(self, tuples: np.ndarray, rows: int = 65536) -> np.ndarray:
        """``D(x) = Π_i q(x_i) / q(Ω \\ {x_1..x_{i-1}})``, the remaining mass summed directly
        over the tokens not drawn yet (no cancelling ``1 - Σ q``)."""
        probs = np.empty(len(tuples))
        for start in range(0, len(tuples), rows):
            chunk = tuples[start : start + rows]
            remaining = np.broadcast_to(self.draft, (len(chunk), self.n)).copy()
            prob = np.ones(len(chunk))
            for i in range(self.k):
                token = chunk[:, i]
                prob *= self.draft[token] / remaining.sum(axis=-1)
                remaining[np.arange(len(chunk)), token] = 0.0
            probs[start : start + rows] = prob
        return probs

    def _exact_prefix_containment(self, order: np.ndarray) -> np.ndarray:
        return self._enumerated_prefix_containment(order, exact=True)

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool((self.draft[drafts] > 0).all() and len(set(drafts.tolist())) == self.k)


class Greedy(DraftLaw):
    """Greedy multi-drafting (Hu et al. 2025): the K-1 most likely draft tokens G, in
    decreasing order of q (ties by lower index), plus one token drawn from q renormalised
    over Ω \\ G, placed last.

    ``P(set(X) ⊆ T) = 1[G ⊆ T] · q(T \\ G) / q(Ω \\ G)``. An optimal cut is a prefix of
    "G first, then Ω \\ G by decreasing q/p", so the optimum is
    ``p(G) + Σ_{y ∉ G} min(p(y), q̃(y))`` with q̃ = q restricted to Ω \\ G and renormalised.
    """

    name = "greedy"
    independent_drafts = True
    symmetric = False

    def __init__(self, draft: object, k: int, *, normalize: bool = False) -> None:
        self.k = check_k(k)
        self.draft, self._exact_draft = _validated(draft, "draft", normalize)
        self.n = len(self.draft)
        if self.k > self.n:
            raise ValueError(f"k: greedy drafting needs k <= n, got k={self.k} > n={self.n}")
        if self._exact_draft is not None:  # exact comparisons: a float argsort could misorder near-ties
            ranked = sorted(range(self.n), key=lambda t: (-self._exact_draft[t], t))
            self.fixed = np.array(ranked[: self.k - 1], dtype=np.int64)
        else:
            self.fixed = np.argsort(-self.draft, kind="stable")[: self.k - 1]
        rest = np.ones(self.n, dtype=bool)
        rest[self.fixed] = False
        self.rest_mask = rest
        rest_mass = self.draft[rest].sum()
        if rest_mass <= 0:
            raise ValueError(
                f"draft: greedy drafting with k={self.k} needs positive draft mass outside the "
                f"top {self.k - 1} tokens (entries below MASS_FLOOR={MASS_FLOOR:g} count as zero)"
            )
        self.residual = np.where(rest, self.draft, 0.0) / rest_mass

    @property
    def exact(self) -> bool:
        return self._exact_draft is not None

    def __repr__(self) -> str:
        return f"Greedy(n={self.n}, k={self.k})"

    @property
    def support(self) -> np.ndarray:
        mask = self.residual > 0
        mask[self.fixed] = True
        return mask

    def tuple_count(self, merged: bool = False) -> int:
        return int(np.count_nonzero(self.residual))

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """One-hot on the fixed token for the first k - 1 drafts; q̃ (q renormalised off the
        fixed tokens) for the last."""
        position = self._check_position(position)
        if exact:
            self._require_exact()
        if position < self.k - 1:
            return self._one_hot(self.fixed[position], exact)
        return np.array(self._exact_residual(), dtype=object) if exact else self.residual.copy()

    def _first_distribution(self) -> object:
        """q itself: the distribution the greedy drafts are ranked and drawn from."""
        return self._exact_draft if self.exact else self.draft

    def _exact_residual(self) -> list[Fraction]:
        mass = sum((self._exact_draft[t] for t in np.flatnonzero(self.rest_mask)), Fraction(0))
        return [self._exact_draft[t] / mass if self.rest_mask[t] else Fraction(0) for t in range(self.n)]

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        last = rng.choice(self.n, size=(count, 1), p=self.residual)
        out = np.concatenate([np.tile(self.fixed, (count, 1)), last], axis=-1).astype(np.int64)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if exact:
            self._require_exact()
        last = np.flatnonzero(self.residual > 0)
        tuples = np.concatenate([np.tile(self.fixed, (len(last), 1)), last[:, None]], axis=-1).astype(np.int64)
        if exact:
            residual = self._exact_residual()
            return tuples, np.array([residual[t] for t in last], dtype=object)
        return tuples, self.residual[last]

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets)
        return np.all(sets[..., self.fixed], axis=-1) * (sets.astype(np.float64) @ self.residual)

    def scan_order(self, target: object, exact: bool = False) -> np.ndarray:
        rest = np.flatnonzero(self.rest_mask)
        if exact:
            self._require_exact()
            residual = self._exact_residual()
            ordered_rest = rest[exact_ratio_order([target[t] for t in rest], [residual[t] for t in rest])]
        else:
            ordered_rest = rest[ratio_order(np.asarray(target)[rest], self.residual[rest])]
        return np.concatenate([self.fixed, ordered_rest]).astype(np.int64)

    def prefix_containment(self, order: np.ndarray, exact: bool = False) -> np.ndarray:
        g = self.k - 1
        if exact:
            self._require_exact()
            residual = self._exact_residual()
            sums = list(itertools.accumulate((residual[t] for t in order[g:]), initial=Fraction(0)))
            return np.array([Fraction(0)] * g + sums, dtype=object)
        sums = np.concatenate([[0.0], np.cumsum(self.residual[order[g:]])])
        return np.concatenate([np.zeros(g), np.minimum(sums, 1.0)])

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(np.array_equal(drafts[:-1], self.fixed) and self.residual[drafts[-1]] > 0)


class Deterministic(DraftLaw):
    """A fixed set of draft tokens (top-k trees of EAGLE-2/3, SGLang): ``X = tokens``.

    ``P(set(X) ⊆ T) = 1[S ⊆ T]`` with S = set(tokens); the optimal acceptance is p(S).
    """

    name = "deterministic"
    independent_drafts = True
    symmetric = False
    takes_distributions = False

    @classmethod
    def from_drafts(cls, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> Deterministic:
        raise ValueError("law: the deterministic law is built from token ids, Deterministic(tokens, n), not from draft distributions")

    def single_draft(self) -> Deterministic:
        """The first draft token alone: ``Deterministic(tokens[:1], n)``."""
        return Deterministic(self.tokens[:1], self.n)

    def __init__(self, tokens: Sequence[int], n: int) -> None:
        n = check_count(n, "n", meaning="the vocabulary size")
        tokens = np.asarray(tokens)
        self.k = check_k(tokens.size)
        if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"tokens: expected a 1-D list of integer token ids, got {tokens!r}")
        if (tokens < 0).any() or (tokens >= n).any():
            raise ValueError(f"tokens: token ids must lie in [0, {n}), got {tokens.tolist()}")
        self.tokens = tokens.astype(np.int64)
        self.n = int(n)
        self.draft_set = np.zeros(self.n, dtype=bool)
        self.draft_set[self.tokens] = True

    @property
    def exact(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Deterministic(tokens={self.tokens.tolist()}, n={self.n})"

    @property
    def support(self) -> np.ndarray:
        return self.draft_set.copy()

    def tuple_count(self, merged: bool = False) -> int:
        return 1

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """One-hot on ``tokens[position]``."""
        return self._one_hot(self.tokens[self._check_position(position)], exact)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        return self.tokens.copy() if size is None else np.tile(self.tokens, (count, 1))

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        probs = np.array([Fraction(1)], dtype=object) if exact else np.ones(1)
        return self.tokens[None, :].copy(), probs

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets)
        return np.all(sets[..., self.tokens], axis=-1).astype(np.float64)

    def scan_order(self, target: object, exact: bool = False) -> np.ndarray:
        return np.concatenate([np.flatnonzero(self.draft_set), np.flatnonzero(~self.draft_set)])

    def prefix_containment(self, order: np.ndarray, exact: bool = False) -> np.ndarray:
        size = int(self.draft_set.sum())
        values = [0] * size + [1] * (self.n + 1 - size)
        if exact:
            return np.array([Fraction(v) for v in values], dtype=object)
        return np.array(values, dtype=np.float64)

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(np.array_equal(drafts, self.tokens))


#: The draft-law classes by kind (``law.name``), in the order the command line lists them.
LAWS: dict[str, type[DraftLaw]] = {cls.name: cls for cls in (IID, WithoutReplacement, Greedy, Independent, Deterministic)}


def law_class(kind: str) -> type[DraftLaw]:
    """The draft-law class of ``kind`` (a key of :data:`LAWS`).

    >>> law_class("wor").__name__
    'WithoutReplacement'
    >>> law_class("uniform")
    Traceback (most recent call last):
    ...
    ValueError: law: unknown draft law 'uniform'; choose one of iid, wor, greedy, independent, deterministic
    """
    if kind not in LAWS:
        raise ValueError(f"law: unknown draft law {kind!r}; choose one of {', '.join(LAWS)}")
    return LAWS[kind]


def law_for(kind: str, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> DraftLaw:
    """The draft law of ``kind`` over the draft distributions ``drafts`` of the K drafts.

    ``k`` defaults to ``len(drafts)``. A law of one shared draft distribution (iid, wor,
    greedy) reads the first; :class:`Independent` takes one per draft (one repeated K times
    when a single one is given with ``k``). The deterministic law is built from token ids,
    ``Deterministic(tokens, n)``, not from distributions.

    >>> law_for("iid", [[0.5, 0.5]], k=3)
    IID(n=2, k=3)
    >>> law_for("independent", [[0.5, 0.5], [0.9, 0.1]])
    Independent(n=2, k=2)
    """
    return law_class(kind).from_drafts(drafts, k, normalize=normalize)
