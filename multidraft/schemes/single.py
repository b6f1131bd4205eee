"""Single-draft speculative sampling (K = 1): Leviathan et al. 2023; Chen et al. 2023.

Accept the draft X ~ q with probability ``min(1, p(X)/q(X))``; otherwise sample from the
residual ``norm((p - q)_+)``. Output law exactly p; acceptance ``Σ_y min(p(y), q(y)) =
1 - TV(p, q)`` (theory.md, "Single draft").

This is recursive rejection sampling with one draft, so the plan is SpecInfer's
(:class:`~multidraft.schemes.specinfer.RRSPlan`): held on the draft's support plus the target's
mass outside it, so a sparse draft costs O(support) after reading p.
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities, Plan, Scheme
from multidraft.schemes.specinfer import RRSPlan
from multidraft.theory.laws import LAWS, DraftLaw

__all__ = ["Single"]


class Single(Scheme):
    """Single-draft speculative sampling for any law with K = 1.

    ``acceptance = Σ_y min(p(y), q(y))``; the rejected token has residual mass zero, so
    ``P(Y ∈ set(X))`` is exactly that sum.

    >>> from multidraft.theory.laws import IID
    >>> Single().acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 1), exact=True)
    Fraction(5, 6)
    """

    name = "single"
    capabilities = Capabilities(
        laws=tuple(LAWS.values()),
        k_range=(1, 1),
        optimal=True,  # with one draft, P* = Σ min(p, q) (min-cut)
        exact_output=True,
        any_vocabulary=tuple(LAWS.values()),
    )

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return RRSPlan(self, p, law, exact)

    @on_idle_cores
    def select_batch(self, target, drafts, tokens, generator):
        """Batched single-draft step: ``target [B, n]``, ``drafts [B, 1, n]``, ``tokens [B, 1]``
        -> ``(output [B], accepted [B])``. Work beyond O(B) gathers is done only for the
        rejected rows (one residual, one cumsum each)."""
        from multidraft.schemes import _torch

        _torch.check_batch(target, drafts, tokens, k=1)
        x = tokens[:, 0]
        q = drafts[:, 0]
        px = target.gather(1, x[:, None]).squeeze(1)
        qx = q.gather(1, x[:, None]).squeeze(1)
        accepted = _torch.uniforms(px.shape, target, generator) * qx < px
        output = x.clone()
        rows = (~accepted).nonzero().squeeze(1)
        if rows.numel():
            residual = target.index_select(0, rows).sub_(q.index_select(0, rows)).clamp_min_(0)
            output[rows] = _torch.sample_rows(residual, generator)
        return output, (tokens == output[:, None]).any(dim=1)
