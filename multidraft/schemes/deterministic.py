"""Verification of a deterministic draft set S (the top-k trees of EAGLE-2/3 and SGLang).

With one-hot drafts the target can simply be sampled: ``Y ~ p``, accepted iff ``Y ∈ S``.
Acceptance ``p(S)``, which is also the optimum for this law (theory.md, "Published baseline
schemes": deterministic draft set).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from multidraft.schemes.base import Capabilities, Plan, Scheme
from multidraft.theory import field
from multidraft.theory.laws import Deterministic, DraftLaw

__all__ = ["DeterministicSet"]


class _TargetPlan(Plan):
    """Sample the target whatever the drafts are."""

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.target, (len(tuples), len(self.target))).copy()

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        p = np.asarray(self.target, dtype=np.float64)
        return rng.choice(len(p), size=len(tuples), p=p).astype(np.int64)

    def closed_form(self) -> float | Fraction:
        return sum((self.target[t] for t in np.flatnonzero(self.law.draft_set)), field(self.exact).zero)


class DeterministicSet(Scheme):
    """Sample the target and accept iff the sample is one of the fixed draft tokens.

    >>> from multidraft.theory.laws import Deterministic
    >>> DeterministicSet().acceptance(["1/2", "1/3", "1/6"], Deterministic([0, 2], 3), exact=True)
    Fraction(2, 3)
    """

    name = "deterministic"
    capabilities = Capabilities(
        laws=(Deterministic,), optimal=True, exact_output=True, any_vocabulary=(Deterministic,)
    )

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return _TargetPlan(self, p, law, exact)
