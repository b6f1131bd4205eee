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
"""

from __future__ import annotations

import numpy as np

from multidraft.schemes.base import Capabilities, Plan, Scheme, normalise, positive_part, safe_divide, sample_rows
from multidraft.theory import field
from multidraft.theory.laws import DraftLaw, WithoutReplacement

__all__ = ["RRSWithoutReplacement"]


def _others(q: np.ndarray) -> np.ndarray:
    """``1 - q(x) = Σ_{y ≠ x} q(y)`` for every token x, as the sum of the other entries (a prefix
    plus a suffix sum of non-negative terms), so it keeps its relative accuracy when q(x) is
    within rounding of one: q = [1e-20, 1] gives 1e-20 at x = 1, where ``1 - q(x)`` is 0."""
    before = np.concatenate([[0.0], np.cumsum(q[:-1])])
    after = np.concatenate([np.cumsum(q[:0:-1])[::-1], [0.0]])
    return before + after


class _RRSWithoutReplacementPlan(Plan):
    """The residuals depend on the drawn prefix: each tuple is walked through its own steps."""

    def closed_form(self) -> float | None:
        p, law = self.target, self.law
        if self.exact or law.k > 2:
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
        scale = 1.0 / _others(q)[holders]
        count = np.searchsorted(ratio, scale, side="right")
        second = below_r[count] + scale * above_q[count]
        return first + float(rejected[holders] @ second)

    def _steps(self, tuples: np.ndarray):
        """Yield, per position i, ``(accept [m], residual before step i [m, n])`` and finally
        the residual after the last step."""
        m, k = tuples.shape
        rows = np.arange(m)
        draft = self.law.marginal(0, self.exact)  # q, the law of the first draft
        residual = np.broadcast_to(self.target, (m, len(self.target))).copy()
        available = np.ones((m, len(self.target)), dtype=bool)
        for i in range(k):
            q_i = self.scheme._step_draft(draft, available)
            x = tuples[:, i]
            accept = np.minimum(safe_divide(residual[rows, x], q_i[rows, x]), 1)
            yield accept, x
            residual = normalise(positive_part(residual - q_i), residual)
            available[rows, x] = False
        yield None, residual

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        m, n = len(tuples), len(self.target)
        arithmetic = field(self.exact)
        out, reach = arithmetic.zeros((m, n)), arithmetic.ones(m)
        rows = np.arange(m)
        for accept, value in self._steps(tuples):
            if accept is None:
                return out + reach[:, None] * value
            out[rows, value] += reach * accept
            reach = reach * (1 - accept)
        raise AssertionError("unreachable")

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        m, k = tuples.shape
        uniform = rng.random((m, k))
        tokens = np.full(m, -1, dtype=np.int64)
        for i, (accept, value) in enumerate(self._steps(tuples)):
            undecided = tokens < 0
            if accept is None:
                if undecided.any():
                    tokens[undecided] = sample_rows(value[undecided], rng)
                return tokens
            take = undecided & (uniform[:, i] < accept)
            tokens[take] = value[take]
        raise AssertionError("unreachable")


class RRSWithoutReplacement(Scheme):
    """RRS for drafts drawn without replacement; step i uses q renormalised off earlier drafts.

    >>> from multidraft.theory.laws import WithoutReplacement
    >>> law = WithoutReplacement(["1/2", "1/4", "1/4"], 2)
    >>> RRSWithoutReplacement().acceptance(["1/4", "1/4", "1/2"], law, exact=True)
    Fraction(7, 8)
    """

    name = "rrs-wor"
    # The closed-form acceptance covers K <= 2 only; K > 2 enumerates: no any-vocabulary law.
    capabilities = Capabilities(laws=(WithoutReplacement,), exact_output=True)

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return _RRSWithoutReplacementPlan(self, p, law, exact)

    @staticmethod
    def _step_draft(draft: np.ndarray, available: np.ndarray) -> np.ndarray:
        """The law of the next draft given the tokens still ``available [m, n]``: q restricted
        to them and renormalised, ``q^{(i)}``."""
        restricted = np.where(available, draft[None, :], 0)
        return restricted / restricted.sum(axis=-1, keepdims=True)

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
