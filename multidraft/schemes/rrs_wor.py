"""Recursive rejection sampling without replacement (Jeon et al. 2024, "Recursive Speculative
Decoding"; the verifier of Sequoia-style trees drawn without replacement).

Drafts X_1, ..., X_K are drawn from q without replacement. Step i tests X_i against the
residual ``r_{i-1}`` with the draft law it was actually drawn from,
``q^{(i)}(y) = q(y) / (1 - Σ_{j<i} q(X_j))`` for y not drawn before (0 on the drawn tokens):
accept with probability ``min(1, r_{i-1}(X_i)/q^{(i)}(X_i))``, else
``r_i = norm((r_{i-1} - q^{(i)})_+)``; all rejected -> sample ``r_K`` (theory.md, "Published
baseline schemes"). A rejected token has residual mass zero, so the acceptance is
``P(Y ∈ set(X))``. The residuals depend on the drawn prefix, so for K > 2 the acceptance is a
sum over prefixes (enumeration). For K = 2 the first residual ``r_1 = norm((p - q)_+)`` does not
depend on the prefix, and

    acceptance = Σ_y min(p, q) + Σ_x (q(x) - p(x))_+ · f(1 / (1 - q(x))),
    f(c) = Σ_y min(r_1(y), c q(y)),

where f is piecewise linear in c: one sort of ``r_1/q`` and prefix sums evaluate it at every
c, O(n log n) at any vocabulary size.

For K > 2 at a real vocabulary no exact route is known; :meth:`RRSWithoutReplacement.
estimate_acceptance` gives an unbiased Rao-Blackwellised *estimate*: with the drafts sampled
(the coins integrated out), step i is reached with probability ``Π_{j<i} (1 - a_j(X_j))``,
``a_j = min(1, r_{j-1}/q^{(j)})``, and then accepts with the exact conditional probability
``β_i = Σ_y min(r_{i-1}(y), q^{(i)}(y))``, so

    acceptance = E[ Σ_i Π_{j<i} (1 - a_j(X_j)) · β_i(X_{<i}) ],

one path costing K residual updates (O(K n)); the 95% interval is the normal one over paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from multidraft.schemes.base import Scheme, normalise, positive_part, safe_divide, sample_rows
from multidraft.theory.laws import DraftLaw

__all__ = ["RRSWithoutReplacement", "AcceptanceEstimate"]


@dataclass(frozen=True)
class AcceptanceEstimate:
    """An unbiased estimate of an acceptance with its 95% normal interval ``value ± half_width``
    over ``paths`` independent sampled rejection paths (labelled an estimate wherever shown)."""

    value: float
    half_width: float
    paths: int

    def __str__(self) -> str:
        return f"{self.value:.4f} ± {self.half_width:.1e} (estimate, 95%, {self.paths} paths)"


@dataclass(frozen=True)
class _Plan:
    target: np.ndarray  # [n]
    draft: np.ndarray  # [n]: q, the law of the first draft


class RRSWithoutReplacement(Scheme):
    """RRS for drafts drawn without replacement; step i uses q renormalised off earlier drafts.

    >>> from multidraft.theory.laws import WithoutReplacement
    >>> law = WithoutReplacement(["1/2", "1/4", "1/4"], 2)
    >>> RRSWithoutReplacement().acceptance(["1/4", "1/4", "1/2"], law, exact=True)
    Fraction(7, 8)
    """

    name = "rrs-wor"
    supported_laws = ("wor",)
    any_vocabulary_laws = ()  # closed-form acceptance for K <= 2 only; K > 2 enumerates
    exact_capable = True
    exact_output = True
    batch_capable = True

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> _Plan:
        return _Plan(p, law.marginal(0, exact))

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | None:
        if exact or law.k > 2:
            return None
        q = law.draft
        first = float(np.minimum(p, q).sum())
        if law.k == 1:
            return first
        excess = np.maximum(p - q, 0.0)
        rejected = np.maximum(q - p, 0.0)  # P(X_1 = x, rejected)
        if excess.sum() <= 0 or rejected.sum() <= 0:
            return first
        r1 = excess / excess.sum()
        drafted = q > 0
        ratio = r1[drafted] / q[drafted]
        order = np.argsort(ratio)
        ratio, r_sorted, q_sorted = ratio[order], r1[drafted][order], q[drafted][order]
        below_r = np.concatenate([[0.0], np.cumsum(r_sorted)])  # Σ r_1 over t <= c
        above_q = np.concatenate([np.cumsum(q_sorted[::-1])[::-1], [0.0]])  # Σ q over t > c
        holders = np.flatnonzero(rejected > 0)
        scale = 1.0 / (1.0 - q[holders])
        count = np.searchsorted(ratio, scale, side="right")
        second = below_r[count] + scale * above_q[count]
        return first + float(rejected[holders] @ second)

    def estimate_acceptance(
        self, target: object, law: DraftLaw, rng: np.random.Generator, *, half_width: float = 1e-3,
        batch: int = 64, min_paths: int = 2048, max_paths: int = 1_000_000,
    ) -> AcceptanceEstimate:
        """The Rao-Blackwellised estimate of the module docstring, in batches of ``batch`` paths
        until the 95% half-width is at most ``half_width`` (or ``max_paths`` paths).

        >>> from multidraft.theory.laws import WithoutReplacement
        >>> law = WithoutReplacement([0.5, 0.25, 0.25], 2)
        >>> est = RRSWithoutReplacement().estimate_acceptance([0.25, 0.25, 0.5], law, np.random.default_rng(0))
        >>> abs(est.value - 7 / 8) <= 2 * est.half_width  # exact: 7/8
        True
        """
        from multidraft.theory.distributions import as_distribution

        if law.name != "wor":
            raise ValueError(f"law: rrs-wor estimates drafts without replacement, got the {law.name} law")
        if not half_width > 0:
            raise ValueError(f"half_width: must be positive, got {half_width}")
        p = as_distribution(target, "target")
        values: list[np.ndarray] = []
        count, total, squares = 0, 0.0, 0.0
        while count < max_paths:
            paths = self._rao_blackwell_paths(p, law, law.sample(rng, batch))
            values.append(paths)
            count, total, squares = count + len(paths), total + paths.sum(), squares + (paths**2).sum()
            mean = total / count
            spread = 1.96 * np.sqrt(max(squares / count - mean**2, 0.0) / max(count - 1, 1))
            if count >= min_paths and spread <= half_width:
                break
        return AcceptanceEstimate(float(mean), float(spread), count)

    def _rao_blackwell_paths(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        """``Σ_i Π_{j<i} (1 - a_j) β_i`` for every sampled ordered draft tuple (rows of ``tuples``)."""
        m, k = tuples.shape
        rows = np.arange(m)
        residual = np.broadcast_to(p, (m, len(p))).copy()
        available = np.ones((m, len(p)), dtype=bool)
        reach, out = np.ones(m), np.zeros(m)
        for i in range(k):
            q_i = self._step_draft(law.draft, available)
            out += reach * np.minimum(residual, q_i).sum(axis=-1)
            if i == k - 1:
                break
            x = tuples[:, i]
            reach *= 1.0 - np.minimum(safe_divide(residual[rows, x], q_i[rows, x]), 1.0)
            residual = normalise(positive_part(residual - q_i), residual)
            available[rows, x] = False
        return out

    @staticmethod
    def _step_draft(draft: np.ndarray, available: np.ndarray) -> np.ndarray:
        """The law of the next draft given the tokens still ``available [m, n]``: q restricted
        to them and renormalised, ``q^{(i)}``."""
        restricted = np.where(available, draft[None, :], 0)
        return restricted / restricted.sum(axis=-1, keepdims=True)

    def _steps(self, plan: _Plan, tuples: np.ndarray):
        """Yield, per position i, ``(accept [m], residual before step i [m, n])`` and finally
        the residual after the last step."""
        m, k = tuples.shape
        rows = np.arange(m)
        residual = np.broadcast_to(plan.target, (m, len(plan.target))).copy()
        available = np.ones((m, len(plan.target)), dtype=bool)
        for i in range(k):
            q_i = self._step_draft(plan.draft, available)
            x = tuples[:, i]
            accept = np.minimum(safe_divide(residual[rows, x], q_i[rows, x]), 1)
            yield accept, x
            residual = normalise(positive_part(residual - q_i), residual)
            available[rows, x] = False
        yield None, residual

    def _conditional(self, plan: _Plan, tuples: np.ndarray) -> np.ndarray:
        m, n = len(tuples), len(plan.target)
        out = np.zeros((m, n), dtype=plan.target.dtype)
        if out.dtype == object:
            out[:] = 0
        reach = np.ones(m, dtype=plan.target.dtype)
        rows = np.arange(m)
        for accept, value in self._steps(plan, tuples):
            if accept is None:
                return out + reach[:, None] * value
            out[rows, value] += reach * accept
            reach = reach * (1 - accept)
        raise AssertionError("unreachable")

    def _sample(self, plan: _Plan, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        m, k = tuples.shape
        uniform = rng.random((m, k))
        tokens = np.full(m, -1, dtype=np.int64)
        for i, (accept, value) in enumerate(self._steps(plan, tuples)):
            undecided = tokens < 0
            if accept is None:
                if undecided.any():
                    tokens[undecided] = sample_rows(value[undecided], rng)
                return tokens
            take = undecided & (uniform[:, i] < accept)
            tokens[take] = value[take]
        raise AssertionError("unreachable")

    def select_batch(self, target, drafts, tokens, generator):
        """Batched RRS without replacement: ``target [B, n]``, ``drafts [B, K, n]`` (only
        ``drafts[:, 0]`` = q is used: later laws are q renormalised off the earlier drafts),
        ``tokens [B, K]`` distinct per row -> ``(output [B], accepted [B])``."""
        from multidraft.schemes import _torch
        from multidraft.schemes.specinfer import _rrs_batch

        k = _torch.check_batch(target, drafts[:, :1].expand_as(drafts), tokens)
        if k > 1:
            ordered = tokens.sort(dim=1).values
            if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
                raise ValueError("tokens: drafts without replacement must be distinct within each row")
        return _rrs_batch(target, drafts, tokens, generator, k, without_replacement=True)
