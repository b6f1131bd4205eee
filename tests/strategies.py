"""Hypothesis strategies that build valid distributions by construction.

Distributions come from small integer weights, so they include exact zeros, exact ties and
(with a uniform draft) instances whose optimal acceptance is exactly one. Each float
distribution has an exact twin (Fractions) for exact-mode comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from multidraft.theory import IID, Deterministic, DraftLaw, Greedy, Independent, WithoutReplacement, dirichlet


@st.composite
def exact_distributions(draw, n: int, allow_zero: bool = True, min_support: int = 1) -> tuple[Fraction, ...]:
    """A distribution on n tokens with small-integer weights: zeros and ties are common."""
    low = 0 if allow_zero else 1
    weights = draw(st.lists(st.integers(low, 6), min_size=n, max_size=n))
    if sum(1 for w in weights if w > 0) < min_support:
        weights = [w if i >= min_support else max(w, 1) for i, w in enumerate(weights)]
    total = sum(weights)
    return tuple(Fraction(w, total) for w in weights)


def as_float(values) -> np.ndarray:
    return np.array([float(v) for v in values])


@st.composite
def instances(draw, max_n: int = 6, max_k: int = 3, min_n: int = 2):
    """(n, k, exact target, exact draft) with the draft supporting at least k tokens."""
    n = draw(st.integers(min_n, max_n))
    k = draw(st.integers(1, min(max_k, n)))
    target = draw(exact_distributions(n))
    draft = draw(exact_distributions(n, min_support=k))
    return n, k, target, draft


def dirichlet_distributions(n: int, min_support: int = 1) -> st.SearchStrategy[np.ndarray]:
    """Float distributions on n tokens from a seeded Dirichlet(1/2) (every entry positive), for
    vocabularies too large for :func:`exact_distributions`; ``min_support <= n`` holds."""
    return st.integers(0, 2**32 - 1).map(lambda seed: dirichlet(n, 0.5, np.random.default_rng(seed)))


#: For each draft law's ``name``: ``(n, k, distributions) ->`` a strategy of that law on n tokens
#: with K = k drafts (needs k <= n), its draft distributions from ``distributions(n,
#: min_support)`` (:func:`exact_distributions` or :func:`dirichlet_distributions`). Drafts
#: without replacement and greedy drafts get at least k positive tokens, so every law is valid.
LAW_STRATEGIES: dict[str, Callable[..., st.SearchStrategy[DraftLaw]]] = {
    "iid": lambda n, k, dist: st.builds(IID, dist(n), st.just(k)),
    "independent": lambda n, k, dist: st.builds(Independent, st.lists(dist(n), min_size=k, max_size=k)),
    "wor": lambda n, k, dist: st.builds(WithoutReplacement, dist(n, min_support=k), st.just(k)),
    "greedy": lambda n, k, dist: st.builds(Greedy, dist(n, min_support=k), st.just(k)),
    "deterministic": lambda n, k, dist: st.builds(
        Deterministic, st.lists(st.integers(0, n - 1), min_size=k, max_size=k), st.just(n)
    ),
}


def draft_laws(name: str, n: int, k: int, distributions: Callable = exact_distributions) -> st.SearchStrategy[DraftLaw]:
    """Draft laws named ``name`` (a ``law.name``) on n tokens with K = k drafts, exact by default."""
    return LAW_STRATEGIES[name](n, k, distributions)
