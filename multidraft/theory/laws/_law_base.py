"""The draft-law interface (:class:`DraftLaw`) and the routes every law inherits: answers by
enumerating its tuples (and, for laws of independent coordinates, by their product), written
once for float and exact arithmetic through a :class:`~multidraft.theory.laws.Field`. The laws themselves and their registry are in
the other modules of :mod:`multidraft.theory.laws`, which re-exports everything public here.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from multidraft.theory.laws._field import EXACT, FLOAT, Field
from multidraft.theory.laws._kernels import subset_sums, zeta_transform
from multidraft.theory.laws._distributions import (
    MASS_FLOOR,
    as_distribution,
    as_exact_distribution,
    check_count,
    checked_row,
    check_generator,
    is_exact_input,
)
from multidraft.theory.laws._row_scan import SparseRow
from multidraft.theory.laws._limits import SUBSETS_LIMIT, SizeEstimate, check_size, optimum_advice

#: Most draft tuples :meth:`DraftLaw.enumerate` will list before refusing.
ENUMERATION_LIMIT = 2_000_000


def check_law(law: object, name: str = "law") -> DraftLaw:
    """Return ``law`` if it is a :class:`DraftLaw`, else raise ``TypeError`` saying how to build
    one: the one check of "is this a law", at every entry point.

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


def validated_draft(
    draft: object, name: str, normalize: bool, sparse: bool = False
) -> tuple[np.ndarray | SparseRow, tuple[Fraction, ...] | None, np.ndarray | None]:
    """Float copy of a draft distribution, its exact Fractions when given exactly, and its
    support (ascending token ids of the positive entries) when validation found it on the way
    (a sparse float row, :func:`~multidraft.theory.laws._distributions.checked_row`), else None;
    with ``sparse=True`` such a row comes as a :class:`SparseRow`, not written out.

    A positive exact entry below :data:`~multidraft.theory.laws.MASS_FLOOR` (1e-300)
    is kept as ``MASS_FLOOR`` in the float copy, so that every support
    decision made on it (enumeration, support masks, K <= support size) agrees with the exact
    law, and the float copy keeps the invariants of :func:`as_distribution`.
    """
    if is_exact_input(draft) or (isinstance(draft, str) and "." not in draft):
        exact = as_exact_distribution(draft, name, normalize=normalize)
        return np.array([max(float(x), MASS_FLOOR) if x > 0 else 0.0 for x in exact]), exact, None
    values, support = checked_row(draft, name, normalize=normalize, sparse=sparse)
    return values, None, support


def product_enumeration(drafts: Sequence[np.ndarray], guard, field: Field) -> tuple[np.ndarray, np.ndarray]:
    """Tuples of independent coordinates with the product probability (``drafts`` in ``field``)."""
    supports = [np.flatnonzero(q > 0) for q in drafts]
    guard(math.prod(len(s) for s in supports))
    grids = np.meshgrid(*supports, indexing="ij")
    tuples = np.stack([g.reshape(-1) for g in grids], axis=-1).astype(np.int64)
    probs = field.ones(len(tuples))
    for i, q in enumerate(drafts):
        probs = probs * q[tuples[:, i]]
    return tuples, probs


def product_subset_containment(drafts: Sequence[np.ndarray], active: np.ndarray, forced: np.ndarray, field: Field) -> np.ndarray:
    """``Π_i q_i(forced ∪ S)`` for every subset S of ``active`` (independent coordinates)."""
    out = field.one
    for q in drafts:
        out = out * field.clip_one(subset_sums(q[active]) + field.total(q[forced]))
    return out


class DraftLaw(ABC):
    """A law of K draft tokens on Ω = {0, ..., n-1}.

    Subclasses set ``k``, ``n`` and ``name`` (the law's *kind*, its key in
    :data:`~multidraft.theory.laws.LAWS`) and implement sampling, enumeration and containment.
    ``exact`` is True when the law was given exact (Fraction) probabilities. What kind of law an
    object is, is decided by its class: other modules ask the law (its flags and methods) or
    dispatch on the class, never on ``name``.
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
    #: The laws whose optimal min-cut set is a prefix of the order of :meth:`prefix_scan`.
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
        (:func:`~multidraft.theory.laws.law_for`). A law of one shared distribution reads the
        first (the others are the same distribution, e.g. the drafts of one model at one
        prefix); ``k`` defaults to ``len(drafts)``."""
        drafts = list(drafts)
        if not drafts:
            raise ValueError(f"drafts: the {cls.name} law needs at least one draft distribution")
        return cls(drafts[0], len(drafts) if k is None else k, normalize=normalize)

    def check_target(self, target: object, exact: bool = False, copy: bool = True) -> np.ndarray:
        """The target p checked against this law: a distribution of length n.

        Returns a float64 array (with ``copy=False``, the target itself where
        :func:`as_distribution` leaves it unchanged), or with ``exact`` an object array of Fractions (the target
        given as Fractions, integers or ``"a/b"`` strings, and the law exact). The one check of
        a target against a law; every entry point that takes ``(target, law)`` calls it.

        >>> from multidraft.theory.laws import IID
        >>> IID([0.5, 0.5], 2).check_target([0.2, 0.3, 0.5])
        Traceback (most recent call last):
        ...
        ValueError: target: length 3 does not match the draft law's vocabulary n=2
        """
        if exact:
            p = np.array(as_exact_distribution(target, "target"), dtype=object)
            self._require_exact()
        else:
            p = as_distribution(target, "target", copy=copy)
        if len(p) != self.n:
            raise ValueError(f"target: length {len(p)} does not match the draft law's vocabulary n={self.n}")
        return p

    @abstractmethod
    def single_draft(self) -> DraftLaw:
        """The law of one draft from the same draft model: ``IID(q, 1)`` with q the first
        draft's distribution before the law's rule (q itself for the laws of one draft
        distribution, q_1 for ``Independent``); exact when this law is. The baseline that
        single-draft speculative sampling runs on."""

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
        """Refuse (:class:`~multidraft.theory.laws.ProblemTooLargeError`) to list more than
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
        return EXACT.total(probs[inside])

    def set_containment(self, tokens: object, exact: bool = False) -> float | Fraction:
        """``P(set(X) ⊆ T)`` for one token set T (token ids): :meth:`containment_exact` or
        :meth:`containment` of its mask."""
        if exact:
            return self.containment_exact(np.asarray(tokens, dtype=np.int64).tolist())
        mask = np.zeros(self.n, dtype=bool)
        mask[np.asarray(tokens, dtype=np.int64)] = True
        return self.containment(mask)

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

        >>> from multidraft.theory.laws import WithoutReplacement
        >>> WithoutReplacement([0.5, 0.25, 0.25], k=2).marginal(1).tolist()
        [0.3333333333333333, 0.3333333333333333, 0.3333333333333333]
        """
        position = self._check_position(position)
        tuples, probs = self.enumerate(exact=exact)
        out = self._field(exact).zeros(self.n)
        np.add.at(out, tuples[:, position], probs)
        return out

    def marginals(self, exact: bool = False) -> np.ndarray:
        """The K marginals ``[k, n]``, row i the law of ``X_i`` (:meth:`marginal`).

        For the product laws (``IID``, ``Independent``) the rows are the draft distributions
        themselves and determine the law.
        """
        return np.stack([self.marginal(i, exact) for i in range(self.k)])

    def marginals_on(self, tokens: np.ndarray, exact: bool = False) -> np.ndarray:
        """The K marginals at the token ids ``tokens`` only: ``marginals(exact)[:, tokens]``,
        ``[k, len(tokens)]``. The laws holding their draft distributions read them there
        directly, without building ``[k, n]``."""
        return self.marginals(exact)[:, np.asarray(tokens, dtype=np.int64)]

    def support_tokens(self) -> np.ndarray:
        """The token ids of :attr:`support`, ascending (int64)."""
        return np.flatnonzero(self.support)

    def _check_position(self, position: int) -> int:
        position = check_count(position, "position", minimum=0)
        if position >= self.k:
            raise ValueError(
                f"position: the {self.name} law with k={self.k} has draft positions 0..{self.k - 1}, got {position}"
            )
        return position

    def _one_hot(self, token: int, exact: bool) -> np.ndarray:
        """The law of a draft fixed to ``token`` (floats, or Fractions with ``exact``)."""
        field = self._field(exact)
        out = field.zeros(self.n)
        out[token] = field.one
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
        masses = self._field(exact).zeros(1 << len(active))
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

    def prefix_scan(self, p: np.ndarray, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(order, containment)``: a token order whose prefixes contain an optimal min-cut set
        for this law and the target ``p``, and ``P(set(X) ⊆ T_j)`` for its prefixes ``T_j``,
        j = 0..n (length n + 1; Fractions with ``exact``). One call, so that an order and its
        containment cannot be mixed up (the laws with ``has_prefix_structure``). ``p`` is the
        target as :meth:`check_target` returns it (checked once there: validation rescales)."""
        raise NotImplementedError(f"{self.name} law has no single-order prefix structure")

    def _scan_target(self, p: np.ndarray, exact: bool) -> np.ndarray:
        """``p`` for :meth:`prefix_scan`: an array of this law's length (already checked)."""
        p = np.asarray(p, dtype=object if exact else np.float64)
        if p.shape != (self.n,):
            raise ValueError(f"p: expected the target as check_target returns it, an array of length {self.n}, got shape {p.shape}")
        return p

    @classmethod
    def sorted_prefix_containment(cls, sorted_draft: np.ndarray, k: int) -> np.ndarray:
        """``P(set(X) ⊆ T_j)`` for the prefixes of the decreasing-q/p order, from q sorted in
        that order along the last axis (``[..., n] -> [..., n + 1]``, float; any batch shape),
        for the laws with ``batched_optimum``."""
        raise NotImplementedError(f"{cls.name} law has no batched prefix containment")

    def _enumerated_prefix_containment(self, order: np.ndarray, exact: bool) -> np.ndarray:
        """Prefix containment from :meth:`enumerate` in O(m k + n): a tuple lies in the prefix
        T_j iff j exceeds the largest rank of its tokens, so the masses bucketed by that rank
        and summed cumulatively give every prefix at once."""
        tuples, probs = self.enumerate(exact=exact)
        rank = np.empty(self.n, dtype=np.int64)
        rank[np.asarray(order)] = np.arange(self.n)
        needed = rank[tuples].max(axis=-1) + 1
        masses = self._field(exact).zeros(self.n + 1)
        np.add.at(masses, needed, probs)
        return np.cumsum(masses)

    def check_tuple(self, drafts: Sequence[int]) -> np.ndarray:
        """Validate one observed draft tuple: length k, tokens in range, positive probability."""
        drafts = np.asarray(drafts)
        if drafts.shape != (self.k,):
            raise ValueError(f"drafts: expected {self.k} draft tokens (k={self.k}), got shape {drafts.shape}")
        if drafts.dtype.kind not in "iu":  # signed or unsigned integers
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

    def _field(self, exact: bool) -> Field:
        """The arithmetic of a computation on this law: :data:`EXACT` (which needs an exact law)
        or :data:`FLOAT`."""
        if exact:
            self._require_exact()
            return EXACT
        return FLOAT

    def _check_sets(self, sets: np.ndarray) -> np.ndarray:
        sets = np.asarray(sets, dtype=bool)
        if sets.shape[-1] != self.n:
            raise ValueError(f"sets: expected masks of length n={self.n}, got shape {sets.shape}")
        return sets
