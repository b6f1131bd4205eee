"""The truncated importance-weighted LP (Khisti et al., ICLR 2025, Section 4), K = 2.

Rank the tokens (``rank_key="published"``: ``p(k) - q₁(k) q₂(k)`` decreasing; ``"ratio"``:
p/q̄ decreasing with q̄ = (q₁ + q₂)/2, i.e. under-drafted tokens first — see
:func:`multidraft.lp.importance.truncated_lp`), keep the top s tokens Ω₁, select the better-ranked token of any pair with a
token outside Ω₁, and solve the LP only over the s² weights inside Ω₁; then the single-draft
step against the induced law r. Lossless for every s; acceptance approaches P* as s grows.
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes._importance import ImportanceScheme
from multidraft.theory.distributions import check_count
from multidraft.theory.laws import DraftLaw

__all__ = ["TruncatedLP"]

_RANK_KEYS = ("published", "ratio")


class TruncatedLP(ImportanceScheme):
    """Truncated LP selection (parameters ``s``, ``rank_key``) plus the single-draft step."""

    name = "truncated-lp"
    supported_laws = ("iid", "independent")
    k_range = (2, 2)
    lp_laws = supported_laws
    batch_capable = True

    def __init__(self, *, s: int = 5, rank_key: str = "published") -> None:
        s = check_count(s, "s", meaning="the number of tokens kept")
        if rank_key not in _RANK_KEYS:
            raise ValueError(f"rank_key: unknown key {rank_key!r}; choose one of {', '.join(_RANK_KEYS)}")
        self.s = s
        self.rank_key = rank_key

    def __repr__(self) -> str:
        return f"TruncatedLP(s={self.s}, rank_key={self.rank_key!r})"

    def selection(self, target, law: DraftLaw):
        first, second = law.marginals()
        return self._pair_selection(target, first, second)

    def _pair_selection(self, target: np.ndarray, first: np.ndarray, second: np.ndarray):
        """The truncated LP's selection for two independent drafts ``first``, ``second``."""
        from multidraft.lp.importance import truncated_lp

        return truncated_lp(target, first, second, s=self.s, rank_key=self.rank_key)

    def select_batch(self, target, drafts, tokens, generator):
        """Batched form: ``target [B, n]``, ``drafts [B, 2, n]``, ``tokens [B, 2]`` ->
        ``(output [B], accepted [B])``. Solves one truncated LP per row (its fast path), then
        selects and runs the single-draft step against that row's r (the LP's intermediate)."""
        import torch

        from multidraft.schemes import _torch

        _torch.check_batch(target, drafts, tokens, k=2)
        p_all = target.detach().cpu().to(torch.float64).numpy()
        q_all = drafts.detach().cpu().to(torch.float64).numpy()
        x_all = tokens.detach().cpu().numpy()
        seed = int(torch.randint(0, 2**62, (1,), generator=_torch.check_generator(generator)))
        rng = np.random.default_rng(seed)
        output = np.empty(len(p_all), dtype=np.int64)
        for b, (p, q, x) in enumerate(zip(p_all, q_all, x_all)):
            p, first, second = p / p.sum(), q[0] / q[0].sum(), q[1] / q[1].sum()
            chosen = self._pair_selection(p, first, second)
            weights = chosen.selection_probabilities(x[None, :])[0]
            token = x[int(rng.random() >= weights[0])]
            r = chosen.intermediate
            if rng.random() * r[token] < p[token]:
                output[b] = token
            else:
                residual = np.maximum(p - r, 0.0)
                output[b] = rng.choice(len(p), p=residual / residual.sum())
        result = torch.as_tensor(output, device=target.device)
        return result, (tokens == result[:, None]).any(dim=1)

