"""Hypothesis strategies that build valid distributions by construction.

Distributions come from small integer weights, so they include exact zeros, exact ties and
(with a uniform draft) instances whose optimal acceptance is exactly one. Each float
distribution has an exact twin (Fractions) for exact-mode comparisons.

:func:`extreme_cases` builds the float inputs that break naive arithmetic (issue 20, item 4):
masses from 1e-12 down to the floor 1e-300 and below it (flushed to zero by
``as_distribution``), exact zeros next to them, ties, one-hot vectors, p = q, disjoint
supports, float32 arrays, n = 1 and 2, and drafts whose K - 1 largest tokens hold all but a
sliver of the mass, for every draft law.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from multidraft.theory import (
    IID,
    Deterministic,
    DraftLaw,
    Greedy,
    Independent,
    WithoutReplacement,
    as_distribution,
    dirichlet,
)


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


# ------------------------------------------------------------------------- extreme float inputs

#: Tiny masses: 1e-300 is the floor (``MASS_FLOOR``, kept), 1e-308 and 5e-324 lie below it
#: (subnormal: set to zero), the others are kept and must be computed with exactly.
TINY_MASSES = (1e-300, 1e-200, 1e-100, 1e-40, 1e-20, 1e-16, 6.4e-13, 1e-12, 1e-308, 5e-324)


@st.composite
def extreme_vectors(draw, n: int, support: list[int] | None = None) -> np.ndarray:
    """A float64 probability vector on n tokens: each entry an exact zero, a tiny mass or a small
    integer weight (ties common), the weights scaled to hold the rest of the mass; ``support``
    restricts the nonzero entries to those tokens (at least one weight among them)."""
    tokens = list(range(n)) if support is None else support
    kinds = {t: draw(st.sampled_from(["weight", "weight", "tiny", "zero"])) for t in tokens}
    if not any(kind == "weight" for kind in kinds.values()):
        kinds[draw(st.sampled_from(tokens))] = "weight"
    values = np.zeros(n)
    for t, kind in kinds.items():
        if kind == "tiny":
            values[t] = draw(st.sampled_from(TINY_MASSES))
    tiny = values.sum()
    weights = {t: draw(st.integers(1, 6)) for t, kind in kinds.items() if kind == "weight"}
    total = sum(weights.values())
    for t, w in weights.items():
        values[t] = w / total * (1.0 - tiny)
    return values


@st.composite
def extreme_pairs(draw, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(target, draft) on n tokens, related as ``"independent"``, ``"equal"`` (p = q),
    ``"disjoint"`` (no common support, n >= 2) or ``"one-hot"`` (the target a unit vector)."""
    relation = draw(st.sampled_from(["independent", "equal", "disjoint", "one-hot"]))
    if relation == "disjoint" and n >= 2:
        split = draw(st.integers(1, n - 1))
        tokens = draw(st.permutations(range(n)))
        return draw(extreme_vectors(n, sorted(tokens[:split]))), draw(extreme_vectors(n, sorted(tokens[split:])))
    if relation == "one-hot":
        target = np.zeros(n)
        target[draw(st.integers(0, n - 1))] = 1.0
        return target, draw(extreme_vectors(n))
    target = draw(extreme_vectors(n))
    return target, (target.copy() if relation == "equal" else draw(extreme_vectors(n)))


@st.composite
def sliver_vectors(draw, n: int, top: int) -> np.ndarray:
    """A distribution whose ``top`` largest tokens hold all but a sliver: every other token gets
    a tiny mass at or above the floor (so all n are supported), as a peaked softmax gives
    without replacement the K - 1 likely tokens and a last draw from the tail."""
    tiny = np.array(draw(st.lists(st.sampled_from([m for m in TINY_MASSES if m >= 1e-300]), min_size=n - top, max_size=n - top)))
    # float weights, so that the float sum of the top tokens rounds to either side of 1 - sliver
    weights = np.array(draw(st.lists(st.floats(1 / 64, 1), min_size=top, max_size=top)))
    values = np.concatenate([weights / weights.sum() * (1.0 - tiny.sum()), tiny])
    return values[np.array(draw(st.permutations(range(n))))]


def _maybe_float32(draw, values: np.ndarray) -> np.ndarray:
    """``values`` as given or as a float32 array (tiny masses underflow there, sums are off by
    about 1e-7): what a model's softmax hands over."""
    return values.astype(np.float32) if draw(st.booleans()) else values


def _supported(values: np.ndarray) -> int:
    """Number of tokens the validated distribution supports (entries >= MASS_FLOOR)."""
    return int(np.count_nonzero(as_distribution(values, normalize=True)))


@st.composite
def extreme_cases(draw, law_name: str, max_n: int = 4, max_k: int = 3) -> tuple[np.ndarray, DraftLaw]:
    """(target, law): an extreme float target and a valid draft law named ``law_name`` on
    n <= max_n tokens with K <= max_k drafts (without replacement and greedy: K no larger than
    the supported tokens, which the floor may reduce)."""
    n = draw(st.integers(1, max_n))
    target, draft = draw(extreme_pairs(n))
    target, draft = _maybe_float32(draw, target), _maybe_float32(draw, draft)
    if law_name == "deterministic":
        k = draw(st.integers(1, max_k))
        return target, Deterministic(draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)), n)
    if law_name == "independent":
        k = draw(st.integers(1, max_k))
        others = [_maybe_float32(draw, draw(extreme_vectors(n))) for _ in range(k - 1)]
        return target, Independent([draft, *others], normalize=True)
    law = {"iid": IID, "wor": WithoutReplacement, "greedy": Greedy}[law_name]
    if n >= 3 and draw(st.integers(0, 3)) == 0:  # the K - 1 largest draft tokens hold all but a sliver
        k = draw(st.integers(2, min(max_k, n)))
        draft = draw(sliver_vectors(n, k - 1))
        if draw(st.booleans()):  # the target lives on the sliver: the cut at the top tokens decides P*
            target = _maybe_float32(draw, draw(extreme_vectors(n, sorted(np.argsort(draft)[: n - k + 1].tolist()))))
        return target, law(draft, k, normalize=True)
    limit = max_k if law_name == "iid" else min(max_k, _supported(draft))
    k = draw(st.integers(1, limit))
    return target, law(draft, k, normalize=True)
