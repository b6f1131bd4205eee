"""Multi-stage importance-weighted selection for K > 2 drafts (Khisti et al., ICLR 2025,
Section 4): combine drafts 1 and 2 into an intermediate token with law r₁ by a pair LP, combine
that with draft 3, and so on; single-draft speculative sampling against the last law at the end.
``s=None`` solves the full pair LP per stage, an integer s the truncated one (ranked by
``rank_key``).
"""

from __future__ import annotations

from multidraft.schemes._importance import ImportanceScheme
from multidraft.schemes.base import Capabilities
from multidraft.theory.laws import IID, DraftLaw, Independent, check_count

__all__ = ["Multistage"]


class Multistage(ImportanceScheme):
    """Pairwise multi-stage selection (K >= 2; options ``s``, ``rank_key``) plus the
    single-draft step."""

    name = "multistage"
    capabilities = Capabilities(laws=(IID, Independent), k_range=(2, None), imports_lp=(IID, Independent))

    def __init__(self, *, s: int | None = None, rank_key: str = "published") -> None:
        from multidraft.lp.truncated import check_rank_key

        self.s = None if s is None else check_count(s, "s", meaning="the number of tokens kept (None keeps every token)")
        self.rank_key = check_rank_key(rank_key)

    def __repr__(self) -> str:
        return f"Multistage(s={self.s}, rank_key={self.rank_key!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.truncated import multistage

        return multistage(target, law.marginals(), s=self.s, rank_key=self.rank_key)
