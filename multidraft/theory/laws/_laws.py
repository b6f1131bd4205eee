"""Draft laws: how the K draft tokens X = (X_1, ..., X_K) are drawn, and the registry of them.

A draft law D on Ω^K (Ω = {0, ..., n-1}) is everything the optimal acceptance depends on:
by max-flow/min-cut (see :mod:`multidraft.theory.optimum`) only the containment
probabilities ``P_D(set(X) ⊆ T)`` matter. Every law here can

* ``sample(rng, size)`` draft tuples,
* give ``containment(sets)`` for a boolean mask ``[..., n]`` of token sets (vectorised),
* ``enumerate()`` its tuples with probabilities (small n; exact Fractions on request),
* ``containment_all_subsets()`` for every T ⊆ Ω (n <= 22) as an array indexed by bitmask,
* give the law of each draft, ``marginal(position)`` (all K: ``marginals()``), and count its
  tuples without listing them, ``tuple_count(merged)``,
* check a target against itself (``check_target``), and give the one-draft baseline law
  (``single_draft``),
* and, since every law here except :class:`Independent` has an optimal cut that is a prefix of
  one token order, give that order with the containment of its prefixes, ``prefix_scan(target)``.

Float and exact (Fraction) answers are written once, through a
:class:`~multidraft.theory.laws.Field`. The interface and its generic routes
(:mod:`multidraft.theory.laws._law_base`) and the array kernels (:mod:`multidraft.theory.laws._kernels`:
subset sums, the zeta transform, ratio orders, prefix containments) are re-exported by the room,
:mod:`multidraft.theory.laws`.

Laws (theory.md, "Notation"): :class:`IID` (SpecTr, SpecInfer, Khisti et al.),
:class:`Independent` (non-identical drafts), :class:`WithoutReplacement` (Gumbel-top-K;
Jeon et al. 2024), :class:`Greedy` (Hu et al. 2025) here, and
:class:`~multidraft.theory.laws.Deterministic` (top-k trees) in ``_deterministic``.
Each class's ``name`` is its kind, the key of :data:`~multidraft.theory.laws.LAWS` (``_registry``);
:func:`~multidraft.theory.laws.law_for` builds a law by kind.
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Sequence
from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.theory.laws._field import EXACT
from multidraft.theory.laws._kernels import iid_prefix_containment, ratio_order, wor_prefix_containment
from multidraft.theory.laws._law_base import (
    DraftLaw,
    check_k,
    product_enumeration,
    product_subset_containment,
    validated_draft,
)
from multidraft.theory.laws._distributions import MASS_FLOOR
from multidraft.theory.laws._row_scan import SparseRow, every_token

__all__ = [
    "IID",
    "Independent",
    "WithoutReplacement",
    "Greedy",
]


class _OneDistributionLaw(DraftLaw):
    """A law of K drafts from one draft distribution q (floats, plus Fractions when given exactly)."""

    def __init__(self, draft: object, k: int, *, normalize: bool = False) -> None:
        self.k = check_k(k)
        row, self._exact_draft, self._support_tokens = validated_draft(draft, "draft", normalize, sparse=True)
        self._sparse = row if isinstance(row, SparseRow) else None
        if self._sparse is None:
            self.draft = row
        self.n = len(row) if self._sparse is None else row.n

    @cached_property
    def draft(self) -> np.ndarray:
        """q [n], float64: for a sparse draft (a top-k or top-p row) written out on first use --
        validation held it on its support, and a verifier fitted there never asks for it."""
        return self._sparse.dense()

    @property
    def exact(self) -> bool:
        return self._exact_draft is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, k={self.k})"

    def _q(self, exact: bool) -> np.ndarray:
        """q in the arithmetic of the computation: the float array, or the exact Fractions."""
        return self._field(exact).array(self._exact_draft) if exact else self.draft

    def single_draft(self) -> IID:
        return IID(self._first_distribution(), 1)


class _RatioPrefixLaw(_OneDistributionLaw):
    """A law of K drafts from one draft distribution q whose optimal min-cut set is a prefix of
    the decreasing-q/p order (:func:`ratio_order`): :class:`IID` and :class:`WithoutReplacement`.

    Holds what the two share: the support, the first draft's law q, and the prefix scan, which
    reads ``_prefix_kernel(q[order], k)`` (a kernel of :mod:`multidraft.theory.laws._kernels`) in float
    mode and ``_exact_prefix_containment(order)`` in exact mode.
    """

    batched_optimum = True

    @property
    def support(self) -> np.ndarray:
        return self.draft > 0

    def support_tokens(self) -> np.ndarray:
        """The token ids with q > 0, ascending (int64, read-only): found once, by the draft's
        validation where it is sparse (a top-k or top-p draft), else on first use: the shared
        ``arange(n)`` (:func:`~multidraft.theory.laws._row_scan.every_token`) when ``min(q) > 0``
        (one reduction, ~8 µs at n = 49152, against ~50 µs for ``flatnonzero(q > 0)`` and its
        fresh array), else that search."""
        if self._support_tokens is None:
            self._support_tokens = every_token(self.n) if self.draft.min() > 0 else np.flatnonzero(self.support)
        self._support_tokens.flags.writeable = False
        return self._support_tokens

    def support_draft(self) -> np.ndarray:
        """q at :meth:`support_tokens` (float64, read-only): a sparse draft's validated values,
        without writing out its row."""
        out = self._sparse.values if self._sparse is not None else self.draft[self.support_tokens()]
        out.flags.writeable = False
        return out

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """q for the first draft (``X_1 ~ q`` under both laws); later positions: subclass."""
        if self._check_position(position) > 0:
            return super().marginal(position, exact)
        return self._q(exact).copy()

    def prefix_scan(self, p: np.ndarray, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        order = self._field(exact).ratio_order(self._scan_target(p, exact), self._q(exact))
        if exact:
            return order, self._exact_prefix_containment(order)
        return order, self.sorted_prefix_containment(self.draft[order], self.k)

    @classmethod
    def sorted_prefix_containment(cls, sorted_draft: np.ndarray, k: int) -> np.ndarray:
        return cls._prefix_kernel(sorted_draft, k)

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
        return product_enumeration([self._q(exact)] * self.k, self._enumeration_guard, self._field(exact))

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

    def marginals_on(self, tokens: np.ndarray, exact: bool = False) -> np.ndarray:
        """q at ``tokens`` in every row (float mode: a read-only view of one gather)."""
        if exact:
            return super().marginals_on(tokens, exact)
        return np.broadcast_to(self.draft[np.asarray(tokens, dtype=np.int64)], (self.k, len(tokens)))

    def containment_all_subsets(
        self, exact: bool = False, active: np.ndarray | None = None, forced: np.ndarray | None = None
    ) -> np.ndarray:
        active, forced = self._subset_frame(active, forced)
        return product_subset_containment([self._q(exact)] * self.k, active, forced, self._field(exact))

    def _exact_prefix_containment(self, order: np.ndarray) -> np.ndarray:
        return EXACT.prefix_sums(self._q(True)[order]) ** self.k

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        if self._sparse is None:
            return bool((self.draft[drafts] > 0).all())
        support = self._sparse.support  # a sparse draft: its support, not its row
        return bool((np.take(support, np.searchsorted(support, drafts), mode="clip") == drafts).all())


class Independent(DraftLaw):
    """Drafts drawn independently from non-identical distributions: ``X_i ~ q_i``.

    ``P(set(X) ⊆ T) = Π_i q_i(T)``. An optimal cut is a threshold set of the linear score
    ``Σ_i q_i(y) Π_{j≠i} q_j(T) - p(y)``, whose weights depend on the cut itself, not a prefix
    of one sort: the optimum uses ``method="threshold"`` (a branch and bound over the draft
    masses, :mod:`multidraft.theory.optimum._independent`), the subset method (small n) or the LP.
    """

    name = "independent"
    independent_drafts = True
    has_prefix_structure = False
    symmetric = False
    one_distribution_per_draft = True

    def __init__(self, drafts: Sequence[object], *, normalize: bool = False) -> None:
        drafts = list(drafts)
        if any(np.ndim(d) == 0 and not isinstance(d, str) for d in drafts):
            raise ValueError("drafts: Independent needs a list of K draft distributions, got a flat list of numbers")
        self.k = check_k(len(drafts))
        pairs = [validated_draft(d, f"draft[{i}]", normalize) for i, d in enumerate(drafts)]
        if len({len(p[0]) for p in pairs}) != 1:
            raise ValueError(f"drafts: all draft distributions need the same length, got {[len(p[0]) for p in pairs]}")
        self.drafts = np.stack([p[0] for p in pairs])
        exact = [p[1] for p in pairs]
        self._exact_drafts = exact if all(e is not None for e in exact) else None
        self.n = self.drafts.shape[1]

    @classmethod
    def from_drafts(cls, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> Independent:
        """One distribution per draft; a single one with ``k`` is repeated K times."""
        drafts = list(drafts)
        if len(drafts) == 1 and k is not None:
            drafts = drafts * check_k(k)
        elif k is not None and k != len(drafts):
            raise ValueError(f"k: {len(drafts)} draft distributions make k = {len(drafts)}, got k={k}")
        return cls(drafts, normalize=normalize)

    @property
    def exact(self) -> bool:
        return self._exact_drafts is not None

    def __repr__(self) -> str:
        return f"Independent(n={self.n}, k={self.k})"

    def single_draft(self) -> IID:
        return IID(self._first_distribution(), 1)

    def _qs(self, exact: bool) -> list[np.ndarray]:
        """The drafts q_i in the arithmetic of the computation."""
        field = self._field(exact)
        return [field.array(q) for q in self._exact_drafts] if exact else list(self.drafts)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        columns = [rng.choice(self.n, size=count, p=q) for q in self.drafts]
        out = np.stack(columns, axis=-1).astype(np.int64)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return product_enumeration(self._qs(exact), self._enumeration_guard, self._field(exact))

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
        return self._qs(exact)[position].copy()

    def marginals(self, exact: bool = False) -> np.ndarray:
        """The drafts q_i as rows; in float mode a read-only view (no copy)."""
        if exact:
            return super().marginals(exact)
        view = self.drafts.view()
        view.flags.writeable = False
        return view

    def marginals_on(self, tokens: np.ndarray, exact: bool = False) -> np.ndarray:
        """The drafts q_i at ``tokens`` (float mode: one gather of the rows)."""
        if exact:
            return super().marginals_on(tokens, exact)
        return self.drafts[:, np.asarray(tokens, dtype=np.int64)]

    def containment_all_subsets(
        self, exact: bool = False, active: np.ndarray | None = None, forced: np.ndarray | None = None
    ) -> np.ndarray:
        active, forced = self._subset_frame(active, forced)
        return product_subset_containment(self._qs(exact), active, forced, self._field(exact))

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(all(self.drafts[i, t] > 0 for i, t in enumerate(drafts)))


#: Gumbel keys held at once by :meth:`WithoutReplacement.sample` (32 MiB of float64).
SAMPLE_ENTRIES = 2**22


class WithoutReplacement(_RatioPrefixLaw):
    """K drafts drawn from q without replacement (successive sampling; Gumbel-top-K).

    ``X_1 ~ q``; each next draw from q renormalised over the tokens not drawn yet, so
    ``D(x) = Π_i q(x_i) / (1 - Σ_{j<i} q(x_j))`` for distinct x. Needs K <= |supp q|.
    Containment of prefixes: see :func:`wor_prefix_containment`. An optimal min-cut set is a
    prefix of the decreasing-q/p order, as for iid drafts (proof by the exponential race:
    docs/wor_prefix_structure.md).
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
        """Gumbel-top-K: the K largest ``log q(y) + G_y`` (G iid Gumbel), in decreasing order.
        Rows are keyed in blocks of ``SAMPLE_ENTRIES // n`` (the same Gumbels, in the same
        order, as one ``[size, n]`` draw), so memory is O(n + size · K), not O(size · n)."""
        count = self._sample_count(rng, size)
        out = np.empty((count, self.k), dtype=np.int64)
        with np.errstate(divide="ignore"):
            log_q = np.log(self.draft)
        rows = max(1, SAMPLE_ENTRIES // self.n)
        for start in range(0, count, rows):
            keys = log_q + rng.gumbel(size=(min(rows, count - start), self.n))
            if self.k < self.n:
                top = np.argpartition(-keys, self.k - 1, axis=-1)[:, : self.k]
            else:
                top = np.tile(np.arange(self.n), (len(keys), 1))
            order = np.argsort(-np.take_along_axis(keys, top, axis=-1), axis=-1, kind="stable")
            out[start : start + rows] = np.take_along_axis(top, order, axis=-1)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        field = self._field(exact)
        support = np.flatnonzero(self.draft > 0)
        self._enumeration_guard(math.perm(len(support), self.k))
        tuples = np.array(list(itertools.permutations(support.tolist(), self.k)), dtype=np.int64)
        if not exact:
            return tuples, self._tuple_probabilities(tuples)
        q, probs = self._q(True), field.zeros(len(tuples))
        for row, tup in enumerate(tuples.tolist()):  # Fractions: the remaining mass 1 - Σ q is exact
            prob, left = field.one, field.one
            for t in tup:
                prob, left = prob * q[t] / left, left - q[t]
            probs[row] = prob
        return tuples, probs

    def _tuple_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``D(x) = Π_i q(x_i) / q(Ω \\ {x_1..x_{i-1}})``, the remaining mass summed directly
        over the draftable tokens not drawn yet (no cancelling ``1 - Σ q``), in blocks of
        ``SAMPLE_ENTRIES // |supp q|`` tuples (memory O(|supp q|), not O(tuples · n))."""
        support = np.flatnonzero(self.draft > 0)
        local = np.searchsorted(support, tuples)
        rows = max(1, SAMPLE_ENTRIES // len(support))
        probs = np.empty(len(tuples))
        for start in range(0, len(tuples), rows):
            chunk = local[start : start + rows]
            remaining = np.broadcast_to(self.draft[support], (len(chunk), len(support))).copy()
            prob = np.ones(len(chunk))
            for i in range(self.k):
                token = chunk[:, i]
                prob *= remaining[np.arange(len(chunk)), token] / remaining.sum(axis=-1)
                remaining[np.arange(len(chunk)), token] = 0.0
            probs[start : start + rows] = prob
        return probs

    def _exact_prefix_containment(self, order: np.ndarray) -> np.ndarray:
        return self._enumerated_prefix_containment(order, exact=True)

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool((self.draft[drafts] > 0).all() and len(set(drafts.tolist())) == self.k)


class Greedy(_OneDistributionLaw):
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
        super().__init__(draft, k, normalize=normalize)
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
        if position < self.k - 1:
            return self._one_hot(self.fixed[position], exact)
        return self._residual(exact).copy()

    def _first_distribution(self) -> object:
        """q itself: the distribution the greedy drafts are ranked and drawn from."""
        return self._exact_draft if self.exact else self.draft

    def _residual(self, exact: bool) -> np.ndarray:
        """q̃ in the arithmetic of the computation."""
        if not exact:
            return self.residual
        q = self._q(True)
        return np.where(self.rest_mask, q, Fraction(0)) / EXACT.total(q[self.rest_mask])

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        last = rng.choice(self.n, size=(count, 1), p=self.residual)
        out = np.concatenate([np.tile(self.fixed, (count, 1)), last], axis=-1).astype(np.int64)
        return out[0] if size is None else out

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        residual = self._residual(exact)
        last = np.flatnonzero(self.residual > 0)
        tuples = np.concatenate([np.tile(self.fixed, (len(last), 1)), last[:, None]], axis=-1).astype(np.int64)
        return tuples, residual[last]

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets)
        return np.all(sets[..., self.fixed], axis=-1) * (sets.astype(np.float64) @ self.residual)

    def prefix_scan(self, p: np.ndarray, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The fixed tokens first, then the rest by decreasing q̃/p; no prefix shorter than the
        fixed tokens contains the tuple."""
        field = self._field(exact)
        p, residual = self._scan_target(p, exact), self._residual(exact)
        rest = np.flatnonzero(self.rest_mask)
        order = np.concatenate([self.fixed, rest[field.ratio_order(p[rest], residual[rest])]]).astype(np.int64)
        g = self.k - 1
        return order, np.concatenate([field.zeros(g), field.clip_one(field.prefix_sums(residual[order[g:]]))])

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(np.array_equal(drafts[:-1], self.fixed) and self.residual[drafts[-1]] > 0)
