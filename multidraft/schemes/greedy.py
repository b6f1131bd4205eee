"""Verification of greedy multi-drafting (Hu et al. 2025) at that law's optimum.

The Greedy law drafts the K-1 most likely tokens G deterministically and one random token
X_K ~ q̃ (q renormalised off G). Run single-draft speculative sampling of X_K against p:
accept with probability ``min(1, p(X_K)/q̃(X_K))``, else sample ``norm((p - q̃)_+)``, a residual
that keeps all of p on G (q̃(G) = 0). The output is accepted iff it lies in ``set(X)``, so

    acceptance = p(G) + Σ_{y ∉ G} min(p(y), q̃(y)),

which equals the Greedy law's optimal acceptance (its min-cut prefix "G first"; see
:class:`multidraft.theory.laws.Greedy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from multidraft.schemes.base import (
    Scheme,
    sequential_conditional,
    sequential_sample,
    single_draft_step,
)
from multidraft.theory.laws import DraftLaw

__all__ = ["GreedyVerifier"]


@dataclass(frozen=True)
class _Plan:
    step: np.ndarray  # [n]: min(1, p/q̃), used at the last position only
    residual: np.ndarray  # [n]: norm((p - q̃)_+)


class GreedyVerifier(Scheme):
    """Single-draft step on the random (last) greedy draft; the fixed drafts ride along.

    >>> from multidraft.theory.laws import Greedy
    >>> GreedyVerifier().acceptance(["1/2", "1/4", "1/4"], Greedy(["1/2", "1/4", "1/4"], 2), exact=True)
    Fraction(1, 1)
    """

    name = "greedy"
    supported_laws = ("greedy",)
    optimal = True
    any_vocabulary_laws = supported_laws
    exact_capable = True
    exact_output = True

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> _Plan:
        tilde = law.marginal(law.k - 1, exact)
        return _Plan(*single_draft_step(p, tilde))

    def _conditional(self, plan: _Plan, tuples: np.ndarray) -> np.ndarray:
        return sequential_conditional(plan.step, plan.residual, tuples[:, -1:])

    def _sample(self, plan: _Plan, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sequential_sample(plan.step, plan.residual, tuples[:, -1:], rng)

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction:
        tilde = law.marginal(law.k - 1, exact)
        fixed = sum((p[t] for t in law.fixed.tolist()), Fraction(0) if exact else 0.0)
        return fixed + np.minimum(p, tilde).sum()
