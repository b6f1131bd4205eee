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

from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.schemes.base import Capabilities, Plan, Scheme, SequentialPlan, canonical_step
from multidraft.theory import field
from multidraft.theory.laws import DraftLaw, Greedy

__all__ = ["GreedyVerifier"]


class _GreedyPlan(SequentialPlan):
    columns = slice(-1, None)  # the random (last) draft; the fixed drafts ride along

    @cached_property
    def rule(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min(1, p/q̃) [n], norm((p - q̃)_+) [n])``."""
        return canonical_step(self.target, self.law.marginal(self.law.k - 1, self.exact))

    def closed_form(self) -> float | Fraction:
        p, law = self.target, self.law
        fixed = sum((p[t] for t in law.fixed.tolist()), field(self.exact).zero)
        return fixed + np.minimum(p, law.marginal(law.k - 1, self.exact)).sum()


class GreedyVerifier(Scheme):
    """Single-draft step on the random (last) greedy draft; the fixed drafts ride along.

    >>> from multidraft.theory.laws import Greedy
    >>> GreedyVerifier().acceptance(["1/2", "1/4", "1/4"], Greedy(["1/2", "1/4", "1/4"], 2), exact=True)
    Fraction(1, 1)
    """

    name = "greedy"
    capabilities = Capabilities(laws=(Greedy,), optimal=True, exact_output=True, any_vocabulary=(Greedy,))

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return _GreedyPlan(self, p, law, exact)
