"""The truncated importance-weighted selection (Khisti et al., ICLR 2025, Section 4), any K.

Rank the tokens (``rank_key="published"``: ``p(k) - Π_i q_i(k)`` decreasing; ``"ratio"``:
p/q̄ decreasing, under-drafted tokens first — see
:func:`multidraft.lp.truncated.truncated_selection`), keep the top s tokens Ω₁, select the
best-ranked token of any draft tuple with a token outside Ω₁, and optimise only the tuples
inside Ω₁ (their canonical optimum, the projection of p: no linear program is solved, despite
the registry name ``truncated-lp``); then the single-draft step against the induced law r.
Lossless for every s; acceptance approaches P* as s grows.
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes._importance import ImportanceScheme
from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities
from multidraft.theory.laws import IID, DraftLaw, Independent, check_count

__all__ = ["TruncatedLP"]


class TruncatedLP(ImportanceScheme):
    """The truncated selection (options ``s``, ``rank_key``) plus the single-draft step."""

    name = "truncated-lp"
    capabilities = Capabilities(laws=(IID, Independent), imports_lp=(IID, Independent))

    def __init__(self, *, s: int = 5, rank_key: str = "published") -> None:
        from multidraft.lp.truncated import check_rank_key

        self.s = check_count(s, "s", meaning="the number of tokens kept")
        self.rank_key = check_rank_key(rank_key)

    def __repr__(self) -> str:
        return f"TruncatedLP(s={self.s}, rank_key={self.rank_key!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.truncated import truncated_selection

        return truncated_selection(target, law, s=self.s, rank_key=self.rank_key)

    @on_idle_cores
    def select_batch(self, target, drafts, tokens, generator):
        """Batched form: ``target [B, n]``, ``drafts [B, K, n]`` (iid: ``drafts[:, 0]`` is used),
        ``tokens [B, K]`` -> ``(output [B], accepted [B])``, with the same selection and law r
        as :meth:`selection` row by row (float64, on the CPU:
        :func:`~multidraft.lp.truncated.truncated_sample`; its seed from ``generator``)."""
        import torch

        from multidraft.lp.truncated import truncated_sample
        from multidraft.schemes import _torch

        _torch.check_batch(target, drafts, tokens)
        seed = int(torch.randint(0, 2**62, (1,), generator=_torch.check_generator(generator)))
        output = truncated_sample(
            target.detach().to(torch.float64).cpu().numpy(),
            drafts.detach().to(torch.float64).cpu().numpy(),
            tokens.detach().cpu().numpy(),
            s=self.s,
            rank_key=self.rank_key,
            iid=bool((drafts == drafts[:, :1]).all()),  # every row drafts K times from one distribution
            rng=np.random.default_rng(seed),
        )
        result = torch.as_tensor(output, device=target.device)
        return result, (tokens == result[:, None]).any(dim=1)
