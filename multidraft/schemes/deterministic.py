"""Verification of a deterministic draft set S (the top-k trees of EAGLE-2/3 and SGLang).

With one-hot drafts the target can simply be sampled: ``Y ~ p``, accepted iff ``Y ∈ S``.
Acceptance ``p(S)``, which is also the optimum for this law (theory.md, "Published baseline
schemes": deterministic draft set).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from multidraft.schemes.base import Scheme
from multidraft.theory.laws import DraftLaw

__all__ = ["DeterministicSet"]


class DeterministicSet(Scheme):
    """Sample the target and accept iff the sample is one of the fixed draft tokens.

    >>> from multidraft.theory.laws import Deterministic
    >>> DeterministicSet().acceptance(["1/2", "1/3", "1/6"], Deterministic([0, 2], 3), exact=True)
    Fraction(2, 3)
    """

    name = "deterministic"
    supported_laws = ("deterministic",)
    optimal = True
    any_vocabulary_laws = supported_laws
    exact_capable = True
    exact_output = True

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> np.ndarray:
        return p

    def _conditional(self, plan: np.ndarray, tuples: np.ndarray) -> np.ndarray:
        return np.broadcast_to(plan, (len(tuples), len(plan))).copy()

    def _sample(self, plan: np.ndarray, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(len(plan), size=len(tuples), p=np.asarray(plan, dtype=np.float64)).astype(np.int64)

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction:
        return sum((p[t] for t in np.flatnonzero(law.draft_set)), Fraction(0) if exact else 0.0)
