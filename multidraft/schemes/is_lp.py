"""The full importance-weighted LP (Khisti et al., ICLR 2025, Theorem 1 and Section 4).

``max_β Σ_y min(p(y), r(y))`` over selection weights β: the pair form with weights ``w_ij``
(O(n²) variables, eq. (10)) for two iid or independent drafts, the tuple form otherwise. By
Theorem 1 its optimum is P*.
"""

from __future__ import annotations

from multidraft.schemes._importance import ImportanceScheme
from multidraft.schemes.base import Capabilities
from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement

__all__ = ["ImportanceLP"]


class ImportanceLP(ImportanceScheme):
    """Importance-weighted selection with LP-optimal weights, then the single-draft step."""

    name = "is-lp"
    capabilities = Capabilities(
        laws=(IID, Independent, WithoutReplacement),
        optimal=True,  # Theorem 1: the importance LP's optimum is P*
        imports_lp=(IID, Independent, WithoutReplacement),
    )

    def __init__(self, *, solver: str = "HIGHS") -> None:
        self.solver = solver

    def __repr__(self) -> str:
        return f"ImportanceLP(solver={self.solver!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.importance import importance_lp, pair_importance_lp

        if law.k == 2 and law.independent_drafts:
            first, second = law.marginals()
            return pair_importance_lp(target, first, second, solver=self.solver)
        return importance_lp(target, law, solver=self.solver)
