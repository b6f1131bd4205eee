"""SpecTr K-SEQ (Sun et al., NeurIPS 2023, "SpecTr: Fast Speculative Decoding via Optimal
Transport", Algorithm 3 / Theorem 3).

With ``β(ρ) = Σ_y min(q(y), p(y)/ρ)``, test the iid drafts in order and accept X_i with
probability ``min(1, p(X_i)/(ρ q(X_i)))``; if all K fail, sample from the residual

    res(y) ∝ p(y) - min(q(y), p(y)/ρ) · (1 - (1 - β)^K) / β.

The residual is non-negative iff ``1 - (1 - β(ρ))^K <= ρ β(ρ)``; ``ρβ(ρ) = Σ min(ρq, p)`` grows
and ``(1 - β(ρ))^K`` grows with ρ, so the valid ρ form an interval ``[ρ*, ∞)`` and ρ* ∈ [1, K]
is found by bisection. Every valid ρ gives a lossless scheme; ρ* accepts most. The drafts are
accepted with probability ``1 - (1 - β(ρ*))^K >= (1 - 1/e) P*``; the residual may also emit a
(rejected) draft token, so

    P(Y ∈ set(X)) = 1 - (1 - β)^K + Σ_y res(y) [(1 - β)^K - (1 - β - v(y))^K],

with ``v(y) = q(y) - min(q(y), p(y)/ρ)`` the chance of drawing y and rejecting it (at ρ* the
residual vanishes wherever v > 0, so the extra term is zero up to rounding).

Off the draft's support S, q = 0: β is a sum over S, the residual there is p up to its
normaliser and v = 0, so the plan works on S and the one number ``p(Ω ∖ S)``
(:class:`~multidraft.schemes.base.SupportPlan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities, Plan, Scheme, SequentialRule, SupportPlan, positive_part, safe_divide
from multidraft.theory._numba import compile_in_place
from multidraft.theory.laws import IID, DraftLaw

__all__ = ["SpecTr", "spectr_rho"]

#: The search for ρ* stops when its bracket is this narrow (relative).
RHO_TOLERANCE = 4 * float(np.finfo(np.float64).eps)


def _beta(p: np.ndarray, q: np.ndarray, rho: float) -> float:
    return float(np.minimum(q, p / rho).sum())


def _some_pass(beta: float, k: int) -> float:
    """``1 - (1 - β)^K``, the chance that one of K drafts passes, without cancellation
    (``-expm1(K log1p(-β))``): for β near 1e-16, ``1 - (1 - β)^K`` is rounding noise as large as
    Kβ itself, and the validity test of :func:`spectr_rho` could then fail for every ρ."""
    return 1.0 if beta >= 1.0 else float(-np.expm1(k * np.log1p(-beta)))


def spectr_rho(target: np.ndarray, draft: np.ndarray, k: int) -> float:
    """Smallest ρ ∈ [1, K] with ``1 - (1 - β(ρ))^K <= ρ β(ρ)`` (float64).

    The gap ``ρ β(ρ) - (1 - (1 - β(ρ))^K)`` increases in ρ; Brent's method
    (:func:`scipy.optimize.brentq`, about ten evaluations) finds its root, and a bracket of
    relative width ``8 RHO_TOLERANCE`` around that root, certified by evaluating its ends (else
    [1, K]), is bisected to a relative ``RHO_TOLERANCE``. The returned value is the upper end of
    the final bracket, so it satisfies the condition as evaluated in floating point (a valid,
    lossless ρ) and lies within a relative ``RHO_TOLERANCE`` of ρ*. K = 1 gives ρ* = 1
    (single-draft speculative sampling).

    >>> round(spectr_rho(np.array([0.5, 0.5]), np.array([0.9, 0.1]), 2), 6)
    1.584429
    """

    def gap(rho: float) -> float:
        beta = _beta(target, draft, rho)
        return rho * beta - _some_pass(beta, k)

    if gap(1.0) >= 0:
        return 1.0
    low, high = 1.0, float(k)
    while gap(high) < 0:  # rounding at ρ = K: widen (the condition holds there exactly)
        high *= 1.0 + 1e-12
    from scipy.optimize import brentq

    root = float(brentq(gap, low, high, xtol=RHO_TOLERANCE, rtol=RHO_TOLERANCE))
    near_low, near_high = root * (1.0 - 4 * RHO_TOLERANCE), root * (1.0 + 4 * RHO_TOLERANCE)
    if low < near_low < high and gap(near_low) < 0:
        low = near_low
    if low < near_high < high and gap(near_high) >= 0:
        high = near_high
    while high - low > RHO_TOLERANCE * high:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if gap(middle) >= 0 else (middle, high)
    return high


@dataclass(frozen=True)
class _Fit:
    """ρ*, β(ρ*), and on the draft's support S: the step, the residual (``outside · p`` off S)
    and v."""

    rho: float
    beta: float
    step: np.ndarray  # [s]: min(1, p/(ρ q))
    residual: np.ndarray  # [s]
    outside: float
    rejected: np.ndarray  # [s]: v(y) = q(y) - min(q(y), p(y)/ρ)


class _SpecTrPlan(SupportPlan):
    """K-SEQ on the draft's support S plus the target's mass outside it: off S, q = 0, so
    ``min(q, p/ρ) = 0`` (β sums over S), the step is never asked and the residual is p scaled."""

    @cached_property
    def fit(self) -> _Fit:
        """ρ*, β(ρ*), the step, the residual and v (module docstring), on S."""
        p, q, k = self.split.inside, self.drafts[0], self.law.k
        rho = spectr_rho(p, q, k)
        kept = np.minimum(q, p / rho)
        beta = float(kept.sum())
        # β = 0 (disjoint supports): no draft is ever accepted, γ -> K and the residual is p.
        gamma = _some_pass(beta, k) / beta if beta > 0 else float(k)
        excess = positive_part(p - kept * gamma)
        mass = float(excess.sum()) + self.split.outside_mass
        residual, outside = (excess / mass, 1.0 / mass) if mass > 0 else (p, 1.0)
        step = np.minimum(safe_divide(p, rho * q), 1.0)
        return _Fit(rho, beta, step, residual, outside, q - kept)

    @cached_property
    def sequential_rule(self) -> SequentialRule:
        return SequentialRule(self.split, self.fit.step, self.fit.residual, self.fit.outside)

    def closed_form(self) -> float:
        """The module docstring's ``P(Y ∈ set(X))``; off S, v = 0 and the extra term vanishes."""
        fit, k = self.fit, self.law.k
        miss = (1.0 - fit.beta) ** k
        hits = miss - np.clip(1.0 - fit.beta - fit.rejected, 0.0, None) ** k
        return float(1.0 - miss + fit.residual @ hits)


class SpecTr(Scheme):
    """SpecTr's K-SEQ with the smallest valid ρ (iid drafts).

    >>> from multidraft.theory.laws import IID
    >>> round(SpecTr().acceptance([0.5, 0.5], IID([0.9, 0.1], 2)), 6)
    0.658443
    """

    name = "spectr"
    capabilities = Capabilities(laws=(IID,), any_vocabulary=(IID,))

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return _SpecTrPlan(self, p, law, exact)

    def draft_acceptance(self, target: object, law: DraftLaw) -> float:
        """The published acceptance ``1 - (1 - β(ρ*))^K``: the chance that one of the drafts
        passes its test (a lower bound on :meth:`acceptance`)."""
        return 1.0 - (1.0 - self.prepare(target, law).fit.beta) ** law.k

    @on_idle_cores
    def select_batch(self, target, drafts, tokens, generator):
        """Batched K-SEQ: ``target [B, n]``, ``drafts [B, K, n]`` (iid: only ``drafts[:, 0]`` is
        used), ``tokens [B, K]`` -> ``(output [B], accepted [B])``.

        Draft i passes under ρ iff ``ρ < c_i = p(X_i)/(U_i q(X_i))``. Since the validity
        function G (below) increases in ρ, ``ρ* < c_i`` iff ``G(c_i) > 0``: the drafts are decided
        in order by evaluating G at their thresholds (no evaluation when ``c_i`` is at most the
        largest threshold that already failed, or 1: a sure failure; or ``c_i > K``: a sure
        pass), and ρ* itself is computed only for the rows that reject every draft and need the
        residual (safeguarded Newton, :func:`_batch_rho`, started from the largest failed
        threshold; it returns a valid ρ within a relative ``64 eps`` of ρ*, so the draw is
        lossless up to floating-point rounding). Every evaluation touches only the rows that
        need it (:class:`_RowSums`, one compiled pass per row on a CPU), and nothing of the
        batch's size is copied or allocated.
        """
        import torch

        from multidraft.schemes import _torch

        k = _torch.check_batch(target, drafts[:, :1].expand_as(drafts), tokens)
        q = drafts[:, 0]
        sums = _RowSums(target, q)
        px = target.gather(1, tokens)
        qx = q.gather(1, tokens)
        threshold = px / (_torch.uniforms(tokens.shape, target, generator) * qx)  # c_i, [B, K]
        output = tokens[:, 0].clone()
        rows = torch.arange(target.shape[0], device=target.device)  # undecided rows
        low = torch.ones(target.shape[0], dtype=torch.float64, device=target.device)  # ρ* >= low
        for i in range(k):
            c = threshold[rows, i].to(torch.float64)
            passes = c > k  # passes for every ρ <= K
            ask = (c > low[rows]) & ~passes
            if bool(ask.any()):
                asked = rows[ask]
                value, _, _ = _validity(sums, asked, c[ask], k)
                passes[ask] = value > 0
                failed = asked[value <= 0]
                low[failed] = torch.maximum(low[failed], c[ask][value <= 0])
            output[rows[passes]] = tokens[rows[passes], i]
            rows = rows[~passes]
            if rows.numel() == 0:
                return output, (tokens == output[:, None]).any(dim=1)
        # Every draft rejected: sample the residual p - min(q, p/ρ) γ = p - min(ρq, p) γ/ρ,
        # γ = (1 - (1 - β)^K)/β.
        rejected = sums.subset(rows)
        rho, beta = _batch_rho(rejected, k, low=low[rows])
        # β = 0 (disjoint supports): γ -> K, and min(ρq, p) = 0 leaves the residual p.
        gamma = torch.where(beta > 0, (1.0 - (1.0 - beta) ** k) / beta.clamp_min(torch.finfo(beta.dtype).tiny), float(k))
        output[rows] = rejected.sample_residual(rho, gamma / rho, generator)
        return output, (tokens == output[:, None]).any(dim=1)


#: Entries of one row block of :class:`_RowSums` on an accelerator's fallback (bfloat16 and half
#: rows on a CPU): small enough to stay in cache and to be served again by the allocator (a fresh
#: temporary of a [256, 49152] batch costs more in page faults than its arithmetic).
_BLOCK_ENTRIES = 1 << 17


#: The reductions of :func:`_min_sums` may be reordered (vectorised): a float64 sum of n terms
#: moves by rounding only, far inside the ``64 eps`` (of float32 or float64) ρ* is solved to.
_SUM_FLAGS = frozenset({"reassoc", "nsz", "contract"})


def _min_sums(p, q, rows, rho, slope, h, derivative):  # pragma: no cover - compiled by numba
    """``h[i] = Σ_y min(ρ_i q[r_i, y], p[r_i, y])`` and, when ``slope``, ``derivative[i] =
    Σ_{ρ_i q < p} q[r_i, y]`` (``r_i = rows[i]``, float64 arithmetic): one branch-free pass over
    each row."""
    for i in range(rows.shape[0]):
        p_row, q_row, scale = p[rows[i]], q[rows[i]], rho[i]
        total = 0.0
        gradient = 0.0
        for y in range(p_row.shape[0]):
            q_y = np.float64(q_row[y])
            p_y = np.float64(p_row[y])
            scaled = scale * q_y
            total += min(scaled, p_y)
            gradient += q_y if scaled < p_y else 0.0
        h[i] = total
        if slope:
            derivative[i] = gradient


def _sample_residuals(p, q, rows, rho, scale, uniforms, out):  # pragma: no cover - compiled by numba
    """``out[i]``: the token y drawn by inverse CDF at level ``uniforms[i]`` (in [0, 1)) from the
    weights ``w(y) = max(p - min(ρ_i q, p) scale_i, 0)`` of row ``rows[i]``: two passes (the total,
    then the first y whose cumulative weight exceeds ``u · total``, kept below the total so that a
    token of weight zero is never drawn); ``out[i] = -1`` when the row has no mass."""
    for i in range(rows.shape[0]):
        p_row, q_row, factor, shrink = p[rows[i]], q[rows[i]], rho[i], scale[i]
        total = 0.0
        for y in range(p_row.shape[0]):
            p_y = np.float64(p_row[y])
            total += max(p_y - min(factor * np.float64(q_row[y]), p_y) * shrink, 0.0)
        out[i] = -1
        if not total > 0.0 or not np.isfinite(total):
            continue
        level = min(uniforms[i] * total, np.nextafter(total, 0.0))
        cumulative = 0.0
        for y in range(p_row.shape[0]):
            p_y = np.float64(p_row[y])
            cumulative += max(p_y - min(factor * np.float64(q_row[y]), p_y) * shrink, 0.0)
            if cumulative > level:
                out[i] = y
                break


class _RowSums:
    """``h_b(ρ_b) = Σ_y min(ρ_b q_b(y), p_b(y))`` and its slope ``h'_b = Σ_{ρ_b q_b < p_b} q_b``
    for rows b of ``p, q [B, n]`` (torch; results in float64).

    On a CPU, float32 and float64 rows are summed by one compiled pass per row
    (:func:`_min_sums`, float64 arithmetic) that reads the asked rows in place: an evaluation
    streams each row through the cache once and allocates nothing of the batch's size (the
    tensor-level form below costs five passes per evaluation with the slope). Elsewhere
    (accelerators, half precision) the rows are processed with tensor operations in the input
    dtype, in blocks with scratch buffers allocated once, a subset of rows first copied block by
    block (``index_select``); on an accelerator one block holds every row.
    """

    def __init__(self, p, q, index=None, owned: bool = False) -> None:
        import torch

        self.p, self.q = p, q
        self.owned = owned  # tensor path: p, q are our own copies, free to overwrite
        rows, n = p.shape
        self.compiled = p.device.type == "cpu" and p.dtype in (torch.float32, torch.float64) and q.dtype == p.dtype
        if self.compiled:
            compile_in_place(globals(), ["_min_sums"], fastmath=_SUM_FLAGS)
            compile_in_place(globals(), ["_sample_residuals"])
            self.p_array, self.q_array = p.detach().numpy(), q.detach().numpy()
            self.index = np.arange(rows) if index is None else index  # rows of p, q that are ours
            return
        self.block = max(1, _BLOCK_ENTRIES // max(n, 1)) if p.device.type == "cpu" else max(rows, 1)
        shape = (min(self.block, rows), n)
        self.scaled = torch.empty(shape, dtype=p.dtype, device=p.device)
        self.mask = torch.empty(shape, dtype=torch.bool, device=p.device)
        self.p_rows, self.q_rows = torch.empty_like(self.scaled), torch.empty_like(self.scaled)
        self.zero = torch.zeros((), dtype=p.dtype, device=p.device)

    def __len__(self) -> int:
        return len(self.index) if self.compiled else self.p.shape[0]

    def subset(self, rows) -> _RowSums:
        """The same sums over the rows ``rows`` (a tensor of indices) only: read in place on the
        compiled path, else copied (``index_select``)."""
        if self.compiled:
            return _RowSums(self.p, self.q, self.index[rows.numpy()])
        return _RowSums(self.p.index_select(0, rows), self.q.index_select(0, rows), owned=True)

    def sample_residual(self, rho, scale, generator):
        """One token per row from ``max(p - min(ρq, p) · scale, 0)`` (``rho, scale [R]``
        float64, R = every row), by inverse CDF; a row without mass is refused. The caller's rows
        are never changed: the tensor form overwrites only rows it copied (:meth:`subset`)."""
        import torch

        from multidraft.schemes import _torch

        if not self.compiled:  # formed in place on copies of the rows
            p, q = (self.p, self.q) if self.owned else (self.p.clone(), self.q.clone())
            kept = torch.minimum(q.mul_(rho.to(q.dtype)[:, None]), p, out=q)
            residual = p.addcmul_(kept, (-scale).to(p.dtype)[:, None]).clamp_min_(0)
            return _torch.sample_rows(residual, generator)
        levels = torch.rand(len(self), generator=_torch.check_generator(generator), dtype=torch.float64)
        out = np.empty(len(self), dtype=np.int64)
        _sample_residuals(self.p_array, self.q_array, self.index, rho.numpy(), scale.numpy(), levels.numpy(), out)
        if (out < 0).any():
            raise ValueError("weights: every row must have positive, finite mass to be sampled")
        return torch.from_numpy(out)

    def __call__(self, rows, rho, slope: bool = False):
        """``(h [R], h' [R] or None)`` at ``rho [R]`` (float64) for the row indices ``rows [R]``
        (None: every row, in order)."""
        import torch

        wide = torch.float64
        if self.compiled:
            index = self.index if rows is None else self.index[rows.numpy()]
            h = np.empty(len(rho))
            derivative = np.empty(len(rho) if slope else 0)
            _min_sums(self.p_array, self.q_array, index, rho.to(wide).numpy(), slope, h, derivative)
            return torch.from_numpy(h), torch.from_numpy(derivative) if slope else None
        h = torch.empty(len(rho), dtype=wide, device=rho.device)
        derivative = torch.empty_like(h) if slope else None
        for start in range(0, len(rho), self.block):
            stop = min(start + self.block, len(rho))
            m = stop - start
            if rows is None:
                p, q = self.p[start:stop], self.q[start:stop]
            else:
                p = torch.index_select(self.p, 0, rows[start:stop], out=self.p_rows[:m])
                q = torch.index_select(self.q, 0, rows[start:stop], out=self.q_rows[:m])
            scaled = torch.mul(q, rho[start:stop].to(q.dtype)[:, None], out=self.scaled[:m])
            if slope:
                over = torch.ge(scaled, p, out=self.mask[:m])  # where min(ρq, p) = p
            h[start:stop] = torch.minimum(scaled, p, out=scaled).sum(dim=1).to(wide)
            if slope:
                derivative[start:stop] = torch.where(over, self.zero, q, out=scaled).sum(dim=1).to(wide)
        return h, derivative


def _validity(sums: _RowSums, rows, rho, k: int, slope: bool = False):
    """``G(ρ) = h - 1 + (1 - h/ρ)^K``, ``G'(ρ)`` (when ``slope``, else None) and ``β = h/ρ`` for
    the given rows, ``h = Σ min(ρq, p)``, ``h' = Σ_{ρq < p} q`` (float64)."""
    h, h_slope = sums(rows, rho, slope)
    beta = h / rho
    miss = (1.0 - beta).clamp_min(0)
    value = h - 1.0 + miss**k
    derivative = h_slope + k * miss ** (k - 1) * (h - rho * h_slope) / rho**2 if slope else None
    return value, derivative, beta


def _batch_rho(sums: _RowSums, k: int, low=None, iterations: int = 60):
    """Per-row valid ρ near ρ* and ``β(ρ)`` for every row of ``sums`` (torch).

    Newton steps on ``G(ρ) = h(ρ) - 1 + (1 - h(ρ)/ρ)^K`` (:func:`_validity`), safeguarded by a
    bracket ``[lo, hi]`` with ``G(lo) < 0 <= G(hi)`` (bisection when a step leaves it; a step that
    converged on the invalid side is pushed just past the root); each iteration evaluates only
    the rows not yet converged. ``low``: a known lower bound (``G(low) <= 0``), default 1.
    Returns ``(hi, β(hi))`` in float64: a valid ρ within a relative ``64 eps`` of ρ* (eps of the
    input dtype).
    """
    import torch

    wide = torch.float64
    count = len(sums)
    device = sums.p.device
    tolerance = 64 * torch.finfo(sums.p.dtype).eps
    low = torch.ones(count, dtype=wide, device=device) if low is None else low.to(wide).clone()
    # Start the Newton iteration at the known lower end (G(low) <= 0; G(low) >= 0 means ρ* = low).
    rho = low.clone()
    value, derivative, beta = _validity(sums, None, rho, k, slope=True)
    converged = value >= 0
    high = torch.where(converged, low, torch.full_like(low, float(k)))
    beta_high = beta.clone()
    found = converged.clone()  # whether beta_high belongs to high
    for _ in range(iterations):
        converged = converged | ((high - low) <= tolerance * high)
        active = torch.nonzero(~converged).squeeze(1)
        if active.numel() == 0:
            break
        r, v, d, lo, hi = rho[active], value[active], derivative[active], low[active], high[active]
        newton = r - v / torch.where(d > 0, d, torch.ones_like(d))
        step = (newton - r).abs()
        # Converged on the invalid side: step just past the root.
        nudge = (v < 0) & (step <= tolerance * r)
        newton = torch.where(nudge, r + torch.maximum(2 * step, tolerance * r), newton)
        usable = (d > 0) & (newton > lo) & (newton < hi)
        candidate = torch.where(usable, newton, 0.5 * (lo + hi))
        v, d, b = _validity(sums, None if len(active) == count else active, candidate, k, slope=True)
        valid = v >= 0
        high[active] = torch.where(valid, candidate, hi)
        beta_high[active] = torch.where(valid, b, beta_high[active])
        found[active] = found[active] | valid
        low[active] = torch.where(valid, lo, candidate)
        # Converged on the valid side: the Newton step from here is below tolerance.
        converged[active] = valid & (v <= tolerance * d * candidate)
        rho[active], value[active], derivative[active] = candidate, v, d
    missing = torch.nonzero(~found).squeeze(1)
    if missing.numel():  # ρ* within tolerance of K: high = K was never evaluated
        _, _, beta_high[missing] = _validity(sums, missing, high[missing], k)
    return high, beta_high
