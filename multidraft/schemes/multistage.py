"""Multi-stage importance-weighted selection for K > 2 drafts (Khisti et al., ICLR 2025,
Section 4): combine drafts 1 and 2 into an intermediate token with law r₁ by a pair LP, combine
that with draft 3, and so on; single-draft speculative sampling against the last law at the end.
``s=None`` solves the full pair LP per stage, an integer s the truncated one.
"""

from __future__ import annotations

from multidraft.schemes._importance import ImportanceScheme
from multidraft.theory.distributions import check_count
from multidraft.theory.laws import DraftLaw

__all__ = ["Multistage"]


class Multistage(ImportanceScheme):
    """Pairwise multi-stage selection (K >= 2) plus the single-draft step."""

    name = "multistage"
    supported_laws = ("iid", "independent")
    k_range = (2, None)
    lp_laws = supported_laws

    def __init__(self, *, s: int | None = None) -> None:
        self.s = None if s is None else check_count(s, "s", meaning="the number of tokens kept (None keeps every token)")

    def __repr__(self) -> str:
        return f"Multistage(s={self.s})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.truncated import multistage

        return multistage(target, law.marginals(), s=self.s)
