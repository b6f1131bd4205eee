"""The deterministic draft law: a fixed set of draft tokens (top-k trees), ``P(set(X) ⊆ T) = 1[S ⊆ T]``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from multidraft.theory.laws._distributions import check_count
from multidraft.theory.laws._law_base import DraftLaw, check_k

__all__ = ["Deterministic"]


class Deterministic(DraftLaw):
    """A fixed set of draft tokens (top-k trees of EAGLE-2/3, SGLang): ``X = tokens``.

    ``P(set(X) ⊆ T) = 1[S ⊆ T]`` with S = set(tokens); the optimal acceptance is p(S).
    """

    name = "deterministic"
    independent_drafts = True
    symmetric = False
    takes_distributions = False

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

    @classmethod
    def from_drafts(cls, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> Deterministic:
        raise ValueError("law: the deterministic law is built from token ids, Deterministic(tokens, n), not from draft distributions")

    def single_draft(self) -> Deterministic:
        """The first draft token alone: ``Deterministic(tokens[:1], n)``."""
        return Deterministic(self.tokens[:1], self.n)

    @property
    def exact(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Deterministic(tokens={self.tokens.tolist()}, n={self.n})"

    @property
    def support(self) -> np.ndarray:
        return self.draft_set.copy()

    def support_tokens(self) -> np.ndarray:
        """The distinct draft tokens, ascending (no pass over the vocabulary)."""
        return np.unique(self.tokens)

    def tuple_count(self, merged: bool = False) -> int:
        return 1

    def marginal(self, position: int, exact: bool = False) -> np.ndarray:
        """One-hot on ``tokens[position]``."""
        return self._one_hot(self.tokens[self._check_position(position)], exact)

    def marginals_on(self, tokens: np.ndarray, exact: bool = False) -> np.ndarray:
        """Row i one-hot on ``tokens[i]`` among ``tokens`` (no row of length n)."""
        hits = self.tokens[:, None] == np.asarray(tokens, dtype=np.int64)[None, :]
        arithmetic = self._field(exact)
        return np.where(hits, arithmetic.one, arithmetic.zero) if exact else hits.astype(np.float64)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        count = self._sample_count(rng, size)
        return self.tokens.copy() if size is None else np.tile(self.tokens, (count, 1))

    def enumerate(self, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.tokens[None, :].copy(), self._field(exact).ones(1)

    def containment(self, sets: np.ndarray) -> np.ndarray:
        sets = self._check_sets(sets)
        return np.all(sets[..., self.tokens], axis=-1).astype(np.float64)

    def prefix_scan(self, p: np.ndarray, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The draft set first: its prefixes contain the tuple from |S| tokens on."""
        self._scan_target(p, exact)
        size = int(self.draft_set.sum())
        order = np.concatenate([np.flatnonzero(self.draft_set), np.flatnonzero(~self.draft_set)])
        return order, self._field(exact).array([0] * size + [1] * (self.n + 1 - size))

    def _tuple_possible(self, drafts: np.ndarray) -> bool:
        return bool(np.array_equal(drafts, self.tokens))
