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

from collections.abc import Iterator
from fractions import Fraction
from functools import cached_property

import numpy as np

from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import (
    Capabilities,
    Plan,
    Scheme,
    SequentialRule,
    SupportPlan,
    positive_part,
    safe_divide,
    sequential_conditional,
    sequential_draw,
)
from multidraft.theory import field
from multidraft.theory.laws import IID, Deterministic, DraftLaw, Independent

__all__ = ["SpecInfer", "rrs_acceptance", "rrs_pass", "rrs_residuals"]


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

    A residual of zero mass (reached with probability zero) repeats the previous one. The
    residuals one at a time, without the ``[K+1, s]`` table: :func:`rrs_pass`.

    >>> residuals, scales = rrs_residuals(np.array([0.5, 0.0]), np.array([[0.5, 0.5]]), outside=0.5)
    >>> residuals.tolist(), scales.tolist()
    ([[0.5, 0.0], [0.0, 0.0]], [1.0, 2.0])
    """
    pairs = [(residual.copy(), scale) for residual, scale in rrs_pass(p, drafts, outside)]
    return np.stack([residual for residual, _ in pairs]), field(p.dtype == object).array([scale for _, scale in pairs])


def rrs_pass(p: np.ndarray, drafts, outside: float | Fraction | None = None) -> Iterator[tuple[np.ndarray, float | Fraction]]:
    """The residuals of :func:`rrs_residuals` one at a time: yields ``(r_i on S, scale_i)`` for
    i = 0..K, ``r_0 = p`` itself. Float residuals live in two buffers reused in turn (four in-place
    O(|S|) passes per draft), so a yielded array is valid until the generator resumes and must not
    be written; a consumer that stops early (the walk of one draft tuple) skips the remaining
    passes.

    >>> [(r.tolist(), float(s)) for r, s in rrs_pass(np.array([0.5, 0.0]), np.array([[0.5, 0.5]]), outside=0.5)]
    [([0.5, 0.0], 1.0), ([0.0, 0.0], 2.0)]
    """
    exact = p.dtype == object
    arithmetic = field(exact)
    outside = arithmetic.zero if outside is None else outside
    residual, scale, spare = p, arithmetic.one, None
    for q in drafts:
        yield residual, scale
        if exact:
            excess = positive_part(residual - q)
        else:
            excess = np.subtract(residual, q, out=spare)
            np.maximum(excess, 0.0, out=excess)
        mass = excess.sum() + scale * outside
        if mass > 0:
            if exact:
                excess = excess / mass
            else:
                excess /= mass
            spare = None if residual is p else residual
            residual, scale = excess, scale / mass
        elif not exact:
            spare = excess
    yield residual, scale


class RRSPlan(SupportPlan):
    """Recursive rejection sampling with the drafts' laws q_i on their support S plus the
    target's mass outside it: step i accepts with ``min(1, r_{i-1}/q_i)``; the residual is r_K
    (on S, and p scaled off S).

    A float plan runs a draft tuple by one pass over the residuals (:meth:`walk`): it reads
    ``r_{i-1}(x_i)`` as it goes and never builds the ``[K, s]`` step table of
    :attr:`sequential_rule`; a draw stops at the first accepted draft, so a tuple whose first
    draft passes costs O(1) after the plan. Exact plans use the table (built once, reused by
    every tuple)."""

    @cached_property
    def sequential_rule(self) -> SequentialRule:
        residuals, scales = rrs_residuals(self.split.inside, self.drafts, self.split.outside_mass)
        step = np.minimum(safe_divide(residuals[:-1], self.drafts), 1)
        return SequentialRule(self.split, step, residuals[-1], scales[-1])

    def residual_pass(self) -> Iterator[tuple[np.ndarray, float | Fraction]]:
        """The residuals ``(r_i on S, scale_i)``, i = 0..K, one at a time (:func:`rrs_pass`)."""
        return rrs_pass(self.split.inside, self.drafts, self.split.outside_mass)

    def walk(self, tuples: np.ndarray, uniforms: np.ndarray | None = None) -> tuple[np.ndarray, tuple | None]:
        """``(accept [m, K], (r_K on S, its scale off S))`` for draft tuples ``[m, K]``:
        ``accept[:, i] = min(1, r_{i-1}(x_i) / q_i(x_i))``, the entries of the step table at the
        tuples, from one :meth:`residual_pass`. Given ``uniforms [m, K]`` the pass stops at the first
        column after which every row has accepted a draft (``U_i < a_i``): later columns stay 0
        and the residual is None. O(K |S|) floats at most, O(1) extra memory per tuple."""
        m, k = tuples.shape
        local = self.split.local(tuples)
        accept = np.zeros((m, k))
        waiting = np.ones(m, dtype=bool)
        steps = self.residual_pass()
        for i, (residual, _) in zip(range(k), steps):
            x = local[:, i]
            accept[:, i] = np.minimum(safe_divide(residual[x], self.drafts[i][x]), 1)
            if uniforms is not None:
                waiting &= uniforms[:, i] >= accept[:, i]
                if not waiting.any():
                    return accept, None
        return accept, next(steps)

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        if self.exact:
            return super().conditional(tuples)
        accept, (residual, scale) = self.walk(tuples)
        return sequential_conditional(accept, tuples, self.split.dense(residual, scale))

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.exact:
            return super().sample(tuples, rng)
        uniforms = rng.random(tuples.shape)  # the draws of SequentialRule.sample, in its order
        accept, last = self.walk(tuples, uniforms)
        return sequential_draw(tuples, uniforms < accept, lambda count: self.split.draw(*last, rng.random(count)))

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
