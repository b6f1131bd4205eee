"""A small sequence model: next-token tables of a target and a draft over n tokens, up to depth L.

``target(· | u)`` is given for every prefix u of length 0..L (length L: the bonus token's
distribution) and ``draft(· | u)`` for length 0..L-1. Tables are stored by depth as arrays
``[n^d, n]`` indexed by the prefix read as a base-n number; float64, or object arrays of
Fractions for exact computations. Every draft tree of K sequences and its probability can be
enumerated (:meth:`SequenceModel.trees`), which is how the block-level quantities of
:mod:`multidraft.trees.exact` and :mod:`multidraft.trees.optimum` are computed exactly.

Families: :meth:`SequenceModel.constant` (one target and one draft at every prefix, e.g. Sun
et al.'s example, :func:`sun_example`), :meth:`SequenceModel.random` (independent Dirichlet
tables) and :meth:`SequenceModel.temperature` (a draft that is the target at another
temperature: both softmaxes of one random logit table).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from fractions import Fraction

import numpy as np

from multidraft.theory.laws import (
    SizeEstimate,
    as_distribution,
    as_exact_distribution,
    check_count,
    check_size,
    dirichlet,
    softmax,
)
from multidraft.trees.tree import DraftTree

__all__ = ["SequenceModel", "sun_example", "TREE_LIMIT"]

#: Most draft trees (ordered K-tuples of sequences) :meth:`SequenceModel.trees` lists.
TREE_LIMIT = 2_000_000


def _exact_row(row: Sequence[float], denominator: int) -> list[Fraction]:
    """A float distribution as Fractions of denominator at most ``denominator`` (positive
    entries stay positive), renormalised exactly."""
    values = [Fraction(float(x)).limit_denominator(denominator) if x > 0 else Fraction(0) for x in row]
    values = [v if v > 0 or x <= 0 else Fraction(1, denominator) for v, x in zip(values, row)]
    total = sum(values, Fraction(0))
    return [v / total for v in values]


def _check_table_type(values: object, name: str) -> None:
    """Refuse a table that is no array at all (a dict of token -> probability, a set, a string,
    a number) with ``TypeError``, as :func:`~multidraft.theory.as_distribution` refuses a
    mapping, before numpy turns it into a 0-d object array with a puzzling shape ``()``."""
    if isinstance(values, (Mapping, AbstractSet, str, bytes)) or np.ndim(values) == 0:
        raise TypeError(
            f"{name}: expected an array, got {type(values).__name__}; give the rows of next-token "
            "probabilities indexed by prefix, shape [n^d, n] at depth d, entry i for token i"
        )


class SequenceModel:
    """Next-token tables ``target(· | u)`` (|u| <= L) and ``draft(· | u)`` (|u| < L) over n tokens.

    Parameters
    ----------
    target : sequence of L + 1 arrays
        ``target[d]`` has shape ``[n^d, n]``: row i is the distribution after the prefix whose
        base-n digits (first token most significant) are i.
    draft : sequence of L arrays
        ``draft[d]`` has shape ``[n^d, n]``, likewise.

    Both float (validated by :func:`~multidraft.theory.as_distribution`) or both exact
    (Fractions, integers or ``"a/b"`` strings; exact sums of one). A table that is no array
    (a dict of token -> probability, a number) raises ``TypeError``.

    Examples
    --------
    >>> model = sun_example()
    >>> model.n, model.length, model.exact
    (2, 2, True)
    >>> model.target_at((0, 1))
    array([Fraction(1, 3), Fraction(2, 3)], dtype=object)
    """

    def __init__(self, target: Sequence[object], draft: Sequence[object]) -> None:
        for tables, name in ((target, "target"), (draft, "draft")):
            if isinstance(tables, (str, bytes)) or not isinstance(tables, Sequence | np.ndarray):
                raise TypeError(f"{name}: expected a sequence of tables (one array per depth), got {type(tables).__name__}")
            for d, table in enumerate(tables):
                _check_table_type(table, f"{name}[{d}]")
        if len(target) < 2 or len(draft) != len(target) - 1:
            raise ValueError(
                f"target, draft: expected L + 1 target tables and L draft tables (L >= 1), got {len(target)} and {len(draft)}"
            )
        first = np.asarray(target[0], dtype=object)
        self.exact = all(isinstance(v, (str, Fraction, int)) and not isinstance(v, bool) for v in first.reshape(-1))
        self.n = first.reshape(-1).shape[0]
        self.length = len(draft)
        self.target = [self._table(t, d, f"target[{d}]") for d, t in enumerate(target)]
        self.draft = [self._table(t, d, f"draft[{d}]") for d, t in enumerate(draft)]

    def _table(self, values: object, depth: int, name: str) -> np.ndarray:
        rows = np.asarray(values, dtype=object if self.exact else np.float64)
        rows = rows.reshape(-1, rows.shape[-1]) if rows.ndim else rows
        if rows.shape != (self.n**depth, self.n):
            raise ValueError(f"{name}: expected shape ({self.n**depth}, {self.n}), got {rows.shape}")
        if self.exact:
            return np.array([as_exact_distribution(list(r), name) for r in rows], dtype=object)
        return np.array([as_distribution(r, name) for r in rows])

    def __repr__(self) -> str:
        return f"SequenceModel(n={self.n}, length={self.length}, exact={self.exact})"

    # -- families ----------------------------------------------------------------------------

    @classmethod
    def constant(cls, target: object, draft: object, length: int) -> SequenceModel:
        """The same target and draft after every prefix (Sun et al.'s examples)."""
        length = check_count(length, "length", meaning="the draft length L")
        exact = all(isinstance(v, (str, Fraction, int)) for v in np.asarray(target, dtype=object).reshape(-1))
        p = as_exact_distribution(target, "target") if exact else as_distribution(target, "target")
        q = as_exact_distribution(draft, "draft") if exact else as_distribution(draft, "draft")
        n = len(p)
        tile = lambda row, d: np.array([list(row)] * n**d, dtype=object if exact else np.float64)  # noqa: E731
        return cls([tile(p, d) for d in range(length + 1)], [tile(q, d) for d in range(length)])

    @classmethod
    def random(
        cls, n: int, length: int, rng: np.random.Generator, *, alpha: float = 1.0, exact: bool = False, denominator: int = 60
    ) -> SequenceModel:
        """Independent Dirichlet(alpha) target and draft tables (exact: each entry rounded to a
        Fraction of denominator at most ``denominator``, renormalised exactly)."""
        n = check_count(n, "n", meaning="the vocabulary size")
        length = check_count(length, "length", meaning="the draft length L")
        target = [dirichlet(n, alpha, rng, size=n**d) for d in range(length + 1)]
        draft = [dirichlet(n, alpha, rng, size=n**d) for d in range(length)]
        return cls._from_float(target, draft, exact, denominator)

    @classmethod
    def temperature(
        cls,
        n: int,
        length: int,
        rng: np.random.Generator,
        *,
        temperature: float = 2.0,
        scale: float = 1.5,
        exact: bool = False,
        denominator: int = 60,
    ) -> SequenceModel:
        """A temperature pair of one table: logits z ~ N(0, scale²) per prefix, target
        ``softmax(z)``, draft ``softmax(z / temperature)`` (the paper's setting of drafting
        with the target's own model at a higher temperature)."""
        n = check_count(n, "n", meaning="the vocabulary size")
        length = check_count(length, "length", meaning="the draft length L")
        logits = [rng.normal(0.0, scale, size=(n**d, n)) for d in range(length + 1)]
        target = [softmax(z) for z in logits]
        draft = [softmax(z, temperature) for z in logits[:-1]]
        return cls._from_float(target, draft, exact, denominator)

    @classmethod
    def _from_float(cls, target: list, draft: list, exact: bool, denominator: int) -> SequenceModel:
        if exact:
            target = [[_exact_row(r, denominator) for r in t] for t in target]
            draft = [[_exact_row(r, denominator) for r in t] for t in draft]
        return cls(target, draft)

    # -- lookups -----------------------------------------------------------------------------

    def index(self, prefix: Sequence[int]) -> int:
        """Row of ``prefix`` in its depth's table (base-n digits, first token most significant)."""
        out = 0
        for token in prefix:
            out = out * self.n + int(token)
        return out

    def target_at(self, prefix: Sequence[int]) -> np.ndarray:
        """``target(· | prefix)`` ``[n]``."""
        return self.target[len(prefix)][self.index(prefix)]

    def draft_at(self, prefix: Sequence[int]) -> np.ndarray:
        """``draft(· | prefix)`` ``[n]`` (|prefix| < L)."""
        return self.draft[len(prefix)][self.index(prefix)]

    def joint(self) -> np.ndarray:
        """The target's law of L + 1 tokens, ``[n^(L+1)]`` in base-n order."""
        out = self.target[0][0]
        for d in range(1, self.length + 1):
            out = (out[:, None] * self.target[d]).reshape(-1)
        return out

    def sequence_probability(self, tokens: Sequence[int], table: str = "draft") -> float | Fraction:
        """``Π_i table(t_i | t_<i)`` for ``table`` in {"draft", "target"}."""
        tables = self.draft if table == "draft" else self.target
        out = Fraction(1) if self.exact else 1.0
        for d, token in enumerate(tokens):
            out = out * tables[d][self.index(tokens[:d])][int(token)]
        return out

    # -- trees -------------------------------------------------------------------------------

    def tree(self, tokens: object, *, without_replacement: bool = False, validate: bool = False) -> DraftTree:
        """The :class:`DraftTree` of draft sequences ``tokens [K, L]`` under this model."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 2 or tokens.shape[1] != self.length:
            raise ValueError(f"tokens: expected [K, {self.length}] token ids, got shape {tokens.shape}")
        target = np.array([[self.target_at(row[:d]) for d in range(self.length + 1)] for row in tokens.tolist()])
        draft = np.array([[self.draft_at(row[:d]) for d in range(self.length)] for row in tokens.tolist()])
        if self.exact:
            target, draft = target.astype(object), draft.astype(object)
        return DraftTree(tokens, target, draft, without_replacement=without_replacement, validate=validate)

    def tree_count(self, k: int, without_replacement: bool = False) -> int:
        """Number of draft trees (ordered K-tuples of sequences of positive probability) that
        :meth:`trees` lists: ``m^K`` for m draftable sequences (iid); without replacement
        ``K! · e_K(m_1, ..., m_s)``, m_t the sequences starting with token t (e_K the
        elementary symmetric polynomial)."""
        k = check_count(k, "k", meaning="the number of drafts")
        paths = self.paths()
        if not without_replacement:
            return len(paths) ** k
        counts: dict[int, int] = {}
        for path, _ in paths:
            counts[path[0]] = counts.get(path[0], 0) + 1
        symmetric = [1] + [0] * k  # e_0..e_K of the counts seen so far
        for c in counts.values():
            for j in range(k, 0, -1):
                symmetric[j] += symmetric[j - 1] * c
        return math.factorial(k) * symmetric[k]

    def paths(self) -> list[tuple[tuple[int, ...], float | Fraction]]:
        """Every draft sequence of positive probability with its probability."""
        out = [((), Fraction(1) if self.exact else 1.0)]
        for d in range(self.length):
            out = [
                (path + (t,), prob * q[t])
                for path, prob in out
                for q in [self.draft[d][self.index(path)]]
                for t in range(self.n)
                if q[t] > 0
            ]
        return out

    def trees(self, k: int, *, without_replacement: bool = False, max_trees: int = TREE_LIMIT) -> Iterator[tuple[np.ndarray, float | Fraction]]:
        """Every draft tree of ``k`` sequences with its probability: ``(tokens [K, L], P)``.

        iid: ordered K-tuples of independent sequences, ``P = Π_k draft(x_k)``. Without
        replacement: K distinct first tokens by successive sampling from ``draft(· | ε)``,
        each row continued independently. Refuses (:class:`~multidraft.theory.laws.ProblemTooLargeError`)
        beyond ``max_trees`` trees, counted before anything is listed.
        """
        k = check_count(k, "k", meaning="the number of drafts")
        count = self.tree_count(k, without_replacement)
        check_size(
            SizeEstimate(f"draft trees (n={self.n}, L={self.length}, k={k})", count, 0, unit="draft trees"),
            "use a smaller n, L or k",
            max_variables=max_trees,
            variables_name="max_trees",
        )
        paths = self.paths()
        if not without_replacement:
            for combo in itertools.product(paths, repeat=k):
                prob = Fraction(1) if self.exact else 1.0
                for _, p in combo:
                    prob = prob * p
                yield np.array([path for path, _ in combo], dtype=np.int64), prob
            return
        root = self.draft[0][0]
        by_first: dict[int, list] = {}
        for path, prob in paths:
            by_first.setdefault(path[0], []).append((path, prob / root[path[0]]))
        support = [t for t in range(self.n) if root[t] > 0]
        if k > len(support):
            raise ValueError(f"k: without replacement needs k <= {len(support)} draftable first tokens, got {k}")
        one = Fraction(1) if self.exact else 1.0
        for firsts in itertools.permutations(support, k):
            prob, left = one, one
            for t in firsts:
                prob, left = prob * root[t] / left, left - root[t]
            for combo in itertools.product(*(by_first[t] for t in firsts)):
                total = prob
                for _, p in combo:
                    total = total * p
                yield np.array([path for path, _ in combo], dtype=np.int64), total


def sun_example(length: int = 2) -> SequenceModel:
    """Sun et al.'s example (ICLR 2025, Section 3): target (1/3, 2/3) and draft (2/3, 1/3) after
    every prefix; with L = 2, E[τ] is 10/9 token by token and 11/9 with block verification."""
    return SequenceModel.constant(["1/3", "2/3"], ["2/3", "1/3"], length)
