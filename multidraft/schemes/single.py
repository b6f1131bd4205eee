"""Single-draft speculative sampling (K = 1): Leviathan et al. 2023; Chen et al. 2023.

Accept the draft X ~ q with probability ``min(1, p(X)/q(X))``; otherwise sample from the
residual ``norm((p - q)_+)``. Output law exactly p; acceptance ``Σ_y min(p(y), q(y)) =
1 - TV(p, q)`` (theory.md, "Single draft").
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
from multidraft.theory.optimal import single_draft_acceptance

__all__ = ["Single"]


@dataclass(frozen=True)
class _Plan:
    step: np.ndarray  # [n]: min(1, p/q)
    residual: np.ndarray  # [n]: norm((p - q)_+)


class Single(Scheme):
    """Single-draft speculative sampling for any law with K = 1.

    ``acceptance = Σ_y min(p(y), q(y))``; the rejected token has residual mass zero, so
    ``P(Y ∈ set(X))`` is exactly that sum.

    >>> from multidraft.theory.laws import IID
    >>> Single().acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 1), exact=True)
    Fraction(5, 6)
    """

    name = "single"
    supported_laws = ("iid", "independent", "wor", "greedy", "deterministic")
    k_range = (1, 1)
    optimal = True  # with one draft, P* = Σ min(p, q) (min-cut)
    any_vocabulary_laws = supported_laws
    exact_capable = True
    exact_output = True
    batch_capable = True
    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> _Plan:
        q = law.marginal(0, exact)
        return _Plan(*single_draft_step(p, q))

    def _conditional(self, plan: _Plan, tuples: np.ndarray) -> np.ndarray:
        return sequential_conditional(plan.step, plan.residual, tuples)

    def _sample(self, plan: _Plan, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return sequential_sample(plan.step, plan.residual, tuples, rng)

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction:
        q = law.marginal(0, exact)
        return single_draft_acceptance(list(p), list(q), exact=exact)

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
