"""SpecInfer: recursive rejection sampling (RRS) with replacement (Miao et al. 2024).

Residual ``r_0 = p``; for i = 1..K accept X_i with probability ``min(1, r_{i-1}(X_i)/q_i(X_i))``,
else ``r_i = norm((r_{i-1} - q_i)_+)``; if every draft is rejected, sample ``r_K``. The
residuals do not depend on the drafts, and

    acceptance = 1 - Π_{i=1..K} (1 - Σ_y min(r_{i-1}(y), q_i(y)))

(theory.md, "Published baseline schemes"). A rejected token has residual mass zero from then
on, so this is also ``P(Y ∈ set(X))``. Works for iid drafts (q_i = q), independent
non-identical drafts, and a deterministic draft set (q_i one-hot: a top-k tree).

The product telescopes (:func:`rrs_acceptance`), so the acceptance costs one pass of four
vector operations per draft and never forms the per-step acceptance matrix, which only the
sampler needs. Off the drafts' support S every q_i is 0, so every residual there is p up to a
scale: the float plans work on S and the one number ``p(Ω ∖ S)``
(:class:`~multidraft.schemes.base.SupportPlan`), and draw the residual's part off S from p
restricted there (:class:`~multidraft.theory.verifier.TargetSplit`).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities, Plan, Scheme, SequentialRule, SupportPlan, positive_part, safe_divide
from multidraft.theory import field
from multidraft.theory.laws import IID, Deterministic, DraftLaw, Independent

__all__ = ["SpecInfer", "rrs_acceptance", "rrs_residuals"]


def rrs_acceptance(p: np.ndarray, drafts, outside: float | Fraction = 0.0) -> float | Fraction:
    """Acceptance of recursive rejection sampling with draft laws ``q_1, ..., q_K``:

        1 - Π_i (1 - Σ_y min(r_{i-1}(y), q_i(y))) = 1 - Π_i σ_i,

    with ``v_0 = p``, ``σ_0 = 1``, ``v_i = (v_{i-1}/σ_{i-1} - q_i)_+`` and ``σ_i = Σ_y v_i(y)``:
    ``v_{i-1}/σ_{i-1}`` is the residual ``r_{i-1}`` and ``1 - Σ min(r_{i-1}, q_i) =
    Σ (r_{i-1} - q_i)_+ = σ_i``. A residual of zero mass gives a factor 0 and ends the
    product. ``drafts`` is any sequence of K arrays [n], float64 or Fraction object arrays alike.

    On a support S of the drafts (every q_i = 0 off S), ``p`` and ``drafts`` may be given on S
    alone with ``outside = p(Ω ∖ S)``: off S, ``v_i = p / (σ_1 ⋯ σ_{i-1})`` (nothing is subtracted
    there), so that part of ``σ_i`` is ``outside / (σ_1 ⋯ σ_{i-1})``. Float cost: one array
    allocated, then four in-place O(|S|) passes per draft (the published form, written
    directly, allocates several arrays per draft, and large fresh allocations cost page faults).

    >>> round(rrs_acceptance(np.array([0.5, 0.5, 0.0]), [np.full(3, 1 / 3)] * 2), 12)
    0.888888888889
    >>> round(rrs_acceptance(np.array([0.5, 0.0]), [np.full(2, 1 / 2)] * 2, outside=0.5), 12)
    0.5
    """
    if p.dtype == object:
        miss, residual, rest = Fraction(1), p, Fraction(outside)
        for q in drafts:
            residual = positive_part(residual - q)
            mass = residual.sum() + rest
            miss = miss * mass
            if mass:
                residual, rest = residual / mass, rest / mass
        return 1 - miss
    miss, weights, rest = 1.0, None, float(outside)
    for q in drafts:
        if weights is None:
            weights = np.subtract(p, q)  # the only allocation
        else:
            weights /= mass
            weights -= q
            rest /= mass
        np.maximum(weights, 0.0, out=weights)
        mass = float(weights.sum()) + rest
        miss *= mass
        if mass == 0.0:
            break
    return 1.0 - miss


def rrs_residuals(p: np.ndarray, drafts: np.ndarray, outside: float | Fraction | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Residuals ``r_0 = p, r_i = norm((r_{i-1} - q_i)_+)`` for drafts ``[K, s]`` on a support S
    of theirs, with p on S and ``outside = p(Ω ∖ S)`` (none: S is everything): returns
    ``(residuals [K+1, s], scales [K+1])``, ``r_i = residuals[i]`` on S and ``scales[i] · p`` off S
    (q_i = 0 there, so each residual is p scaled by the normalisers so far).

    A residual of zero mass (reached with probability zero) repeats the previous one.

    >>> residuals, scales = rrs_residuals(np.array([0.5, 0.0]), np.array([[0.5, 0.5]]), outside=0.5)
    >>> residuals.tolist(), scales.tolist()
    ([[0.5, 0.0], [0.0, 0.0]], [1.0, 2.0])
    """
    arithmetic = field(p.dtype == object)
    outside = arithmetic.zero if outside is None else outside
    residuals, scales = [p], [arithmetic.one]
    for q in drafts:
        excess = positive_part(residuals[-1] - q)
        mass = excess.sum() + scales[-1] * outside
        if mass > 0:
            residuals.append(excess / mass)
            scales.append(scales[-1] / mass)
        else:
            residuals.append(residuals[-1])
            scales.append(scales[-1])
    return np.stack(residuals), arithmetic.array(scales)


class RRSPlan(SupportPlan):
    """Recursive rejection sampling with the drafts' laws q_i on their support S plus the
    target's mass outside it: step i accepts with ``min(1, r_{i-1}/q_i)``; the residual is r_K
    (on S, and p scaled off S)."""

    @cached_property
    def sequential_rule(self) -> SequentialRule:
        residuals, scales = rrs_residuals(self.split.inside, self.drafts, self.split.outside_mass)
        step = np.minimum(safe_divide(residuals[:-1], self.drafts), 1)
        return SequentialRule(self.split, step, residuals[-1], scales[-1])

    def closed_form(self) -> float | Fraction:
        return rrs_acceptance(self.split.inside, self.drafts, self.split.outside_mass)


class SpecInfer(Scheme):
    """Recursive rejection sampling with replacement; step i uses the draft law q_i.

    >>> from multidraft.theory.laws import IID
    >>> SpecInfer().acceptance(["1/2", "1/2", "0"], IID(["1/3", "1/3", "1/3"], 2), exact=True)
    Fraction(8, 9)
    """

    name = "specinfer"
    capabilities = Capabilities(
        laws=(IID, Independent, Deterministic), exact_output=True, any_vocabulary=(IID, Independent, Deterministic)
    )

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return RRSPlan(self, p, law, exact)

    @on_idle_cores
    def select_batch(self, target, drafts, tokens, generator):
        """Batched RRS: ``target [B, n]``, ``drafts [B, K, n]`` (q_i per row), ``tokens [B, K]``
        -> ``(output [B], accepted [B])``.

        Only rows still undecided after step i compute the next residual, kept unnormalised
        as ``w_i = (w_{i-1} - m_{i-1} q_i)_+`` with mass ``m_i`` (so ``r_i = w_i / m_i``); step
        i accepts iff ``U · q_i(X_i) · m_{i-1} < w_{i-1}(X_i)``.
        """
        from multidraft.schemes import _torch

        k = _torch.check_batch(target, drafts, tokens)
        return _rrs_batch(target, drafts, tokens, generator, k, without_replacement=False)


def _rrs_batch(target, drafts, tokens, generator, k: int, without_replacement: bool):
    """Shared batched loop of SpecInfer (step i draws from q_i) and RRS without replacement
    (step i draws from q_0 renormalised off the earlier drafts: scale ``1/q(Ω \\ {x_j : j < i})``,
    the mass left summed over the tokens not drawn yet, since ``1 - Σ_{j<i} q(x_j)`` cancels when
    the earlier drafts hold all but 1e-16; the residual is already zero on those earlier,
    rejected, tokens)."""
    import torch

    from multidraft.schemes import _torch

    batch = target.shape[0]
    output = tokens[:, 0].clone()
    rows = torch.arange(batch, device=target.device)  # rows still undecided
    weights = target  # w_{i-1} for the undecided rows
    mass = torch.ones(batch, dtype=target.dtype, device=target.device)
    undrawn = torch.ones(target.shape, dtype=torch.bool, device=target.device) if without_replacement else None
    for i in range(k):
        x = tokens[rows, i]  # [R]
        position = 0 if without_replacement else i
        qx = drafts[rows, position, x]  # q_i(X_i), [R]
        scale = 1.0 / torch.where(undrawn, drafts[rows, 0], 0).sum(dim=1) if without_replacement else torch.ones_like(qx)
        wx = weights.gather(1, x[:, None]).squeeze(1)
        accept = _torch.uniforms(x.shape, target, generator) * (qx * scale) * mass < wx
        output[rows[accept]] = x[accept]
        keep = ~accept
        rows, weights, mass, scale = rows[keep], weights[keep], mass[keep], scale[keep]
        if without_replacement:
            undrawn = undrawn[keep]
            undrawn[torch.arange(len(rows), device=target.device), x[keep]] = False
        if rows.numel() == 0:
            return output, (tokens == output[:, None]).any(dim=1)
        # `weights` is a fresh copy (boolean indexing above), so it may be updated in place:
        # w_i = (w_{i-1} - m_{i-1} q^{(i)})_+ over the rejected rows only.
        source = drafts[rows, position]  # [R, n]
        weights = weights.addcmul_(source, -(mass * scale)[:, None]).clamp_min_(0)
        new_mass = weights.sum(dim=1)
        # A zero-mass residual is reached with probability zero; keep a valid distribution.
        dead = new_mass <= 0
        if bool(dead.any()):
            weights[dead] = target[rows[dead]]
            new_mass[dead] = target[rows[dead]].sum(dim=1)
        mass = new_mass
    output[rows] = _torch.sample_rows(weights, generator)
    return output, (tokens == output[:, None]).any(dim=1)
