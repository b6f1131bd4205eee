"""Multi-stage importance-weighted selection for K > 2 drafts (Khisti et al., ICLR 2025,
Section 4): combine drafts 1 and 2 into an intermediate token with law r₁ by a pair LP, combine
that with draft 3, and so on; single-draft speculative sampling against the last law at the end.
``s=None`` solves the full pair LP per stage, an integer s the truncated one.
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes._importance import ImportanceScheme, product_drafts
from multidraft.theory.laws import DraftLaw

__all__ = ["Multistage"]


class Multistage(ImportanceScheme):
    """Pairwise multi-stage selection (K >= 2) plus the single-draft step."""

    name = "multistage"
    supported_laws = ("iid", "independent")
    k_rule = "K >= 2"

    def __init__(self, *, s: int | None = None) -> None:
        if s is not None and (isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1):
            raise ValueError(f"s: the number of kept tokens must be None or an integer >= 1, got {s!r}")
        self.s = None if s is None else int(s)

    def __repr__(self) -> str:
        return f"Multistage(s={self.s})"

    def _supports_k(self, k: int) -> bool:
        return k >= 2

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.importance import multistage

        return multistage(target, product_drafts(law), s=self.s)
