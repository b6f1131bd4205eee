"""The optimal scheme: sample the optimal coupling of the SpecTr transport LP.

Solve the transport LP over draft tuples (any law), read importance weights off the optimal
plan (``importance_from_coupling``: Theorem 1 of Khisti et al., ICLR 2025, direction "⇒"),
and run the single-draft step against the induced law r. Its acceptance is

    P* = min_{T ⊆ Ω} [ p(T) + 1 - P_D(set(X) ⊆ T) ]

(max-flow/min-cut; :func:`multidraft.theory.optimal_acceptance`), exactly in Fractions when
asked; the sampler reaches it up to the LP's tolerance.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from multidraft.schemes._importance import ImportanceScheme
from multidraft.theory.laws import DraftLaw
from multidraft.theory.optimal import optimal_acceptance

__all__ = ["Optimal"]


class Optimal(ImportanceScheme):
    """Optimal transport coupling -> importance weights -> single-draft step.

    >>> from multidraft.theory.laws import IID
    >>> Optimal().acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 2), exact=True)
    Fraction(1, 1)
    """

    name = "optimal"
    supported_laws = ("iid", "independent", "wor", "greedy", "deterministic")
    exact_capable = True

    def __init__(self, *, solver: str = "HIGHS") -> None:
        self.solver = solver

    def __repr__(self) -> str:
        return f"Optimal(solver={self.solver!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.importance import importance_from_coupling
        from multidraft.lp.transport import transport_lp

        return importance_from_coupling(transport_lp(target, law, solver=self.solver), target, law)

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction:
        return optimal_acceptance(list(p), law, exact=exact).value
