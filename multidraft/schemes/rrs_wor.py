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

from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities, Plan, Scheme, positive_part, safe_divide, sample_rows
from multidraft.theory import field
from multidraft.theory._numba import compile_in_place
from multidraft.theory.laws import DraftLaw, WithoutReplacement

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


def _kernels():
    """``(sample_paths, paths)``: compiled Rao-Blackwellised path values, numba-compiled on first
    use (:func:`~multidraft.theory._numba.compile_in_place`) and cached on disk; ``sample_paths``
    also draws the tuples (successive sampling by rejection against the drawn tokens, inverse
    CDF by binary search)."""
    compile_in_place(globals(), KERNELS)
    return _sample_paths, _paths


def _path_value(p, q, drafts, residual, step, available):
    """``Σ_i Π_{j<i} (1 - a_j) β_i`` of one ordered draft tuple (O(K n))."""
    n, k = p.shape[0], drafts.shape[0]
    residual[:] = p
    available[:] = True
    remaining = 0.0
    for y in range(n):
        remaining += q[y]
    reach, out = 1.0, 0.0
    for i in range(k):
        beta, excess = 0.0, 0.0
        for y in range(n):
            step[y] = q[y] / remaining if available[y] else 0.0
            beta += min(residual[y], step[y])
            excess += max(residual[y] - step[y], 0.0)
        out += reach * beta
        if i == k - 1:
            break
        x = drafts[i]
        reach *= 1.0 - (min(residual[x] / step[x], 1.0) if step[x] > 0.0 else 0.0)
        available[x] = False
        remaining = 0.0
        for y in range(n):
            if excess > 0.0:  # else β = 1: r = q^{(i)}, every later step is unreachable
                residual[y] = max(residual[y] - step[y], 0.0) / excess
            if available[y]:
                remaining += q[y]
    return out


def _paths(p, q, tuples):
    """``out[row] = path value of tuples[row]`` (:func:`_path_value`)."""
    n = p.shape[0]
    residual, step = np.empty(n), np.empty(n)
    available = np.empty(n, dtype=np.bool_)
    out = np.empty(tuples.shape[0])
    for row in range(tuples.shape[0]):
        out[row] = _path_value(p, q, tuples[row], residual, step, available)
    return out


def _sample_paths(p, q, k, count, seed):
    """The path values of ``count`` tuples drawn without replacement from q (numba's generator
    seeded with ``seed``)."""
    np.random.seed(seed)
    n = p.shape[0]
    cumulative = np.cumsum(q)
    total = cumulative[-1]
    residual, step = np.empty(n), np.empty(n)
    available = np.empty(n, dtype=np.bool_)
    drafts = np.empty(k, dtype=np.int64)
    out = np.empty(count)
    for row in range(count):
        drawn = 0
        while drawn < k:
            y = min(np.searchsorted(cumulative, np.random.random() * total, side="right"), n - 1)
            if q[y] <= 0.0:
                continue
            fresh = True
            for i in range(drawn):
                fresh = fresh and drafts[i] != y
            if fresh:
                drafts[drawn] = y
                drawn += 1
        out[row] = _path_value(p, q, drafts, residual, step, available)
    return out


#: The compiled kernels, module-level so that numba's disk cache finds them in the next process.
KERNELS = ("_path_value", "_paths", "_sample_paths")


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
        """Yield, per position i, ``(accept [m], x_i [m])`` and finally ``(None, r_K [m, n])``: the
        residual after the last step. A consumer that stops early skips the later residuals.

        ``left`` is q on the tokens not drawn yet (:meth:`RRSWithoutReplacement._step_draft`
        renormalises it into ``q^{(i)}``); r_0 and ``left`` are read-only views of p and q until
        the first update, and each residual is written over the ``q^{(i)}`` it used (in float
        plans the buffers then go round: three ``[m, n]`` arrays however large K, none when the
        first draft decides every row: ``q^{(1)} = q`` is then read at the tuples' tokens only)."""
        m, k = tuples.shape
        rows = np.arange(m)
        arithmetic = field(self.exact)
        draft = self.law.marginal(0, self.exact)  # q, the law of the first draft
        residual = np.broadcast_to(self.target, (m, len(self.target)))
        left = np.broadcast_to(draft, residual.shape)
        spare, q_i = None, None
        for i in range(k):
            x = tuples[:, i]
            if i > 0:
                q_i = self.scheme._step_draft(draft, left, spare)
            # the first draft's law is q itself: read at the drafted tokens until the walk goes on
            q_x = left[rows, x] / left.sum(axis=-1) if q_i is None else q_i[rows, x]
            accept = np.minimum(safe_divide(residual[rows, x], q_x), 1)
            yield accept, x
            if q_i is None:
                q_i = self.scheme._step_draft(draft, left, spare)
            if self.exact:
                excess = positive_part(residual - q_i)
            else:
                excess = np.maximum(np.subtract(residual, q_i, out=q_i), 0.0, out=q_i)
            mass = excess.sum(axis=-1, keepdims=True)
            excess /= np.where(mass > 0, mass, 1)
            dead = np.flatnonzero(mass[:, 0] <= 0)  # reached with probability zero: keep r_{i-1}
            excess[dead] = residual[dead]
            spare = residual if residual.flags.writeable and not self.exact else None
            residual = excess
            if not left.flags.writeable:
                left = left.copy()
            left[rows, x] = arithmetic.zero
        yield None, residual

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        """``P(Y = · | x) = reach_K r_K + Σ_i reach_i a_i(x_i) 1[· = x_i]``, written over r_K (the
        plan's own last buffer): one ``[m, n]`` pass after the steps."""
        rows, hits, reach = np.arange(len(tuples)), [], field(self.exact).ones(len(tuples))
        for accept, value in self._steps(tuples):
            if accept is None:
                value *= reach[:, None]
                for x, hit in hits:  # distinct tokens in a row: one hit per entry
                    value[rows, x] += hit
                return value
            hits.append((value, reach * accept))
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
            if take.sum() == undecided.sum():  # every row decided: no later residual is needed
                return tokens
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
    def _step_draft(draft: np.ndarray, left: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The law of the next draft, ``q^{(i)} [m, n]``: q on the tokens not drawn yet (``left``,
        0 on the drawn ones) renormalised, summed over those tokens (written into ``out`` when
        given). ``draft`` is q itself."""
        return np.divide(left, left.sum(axis=-1, keepdims=True), out=out)

    @on_idle_cores
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

    def estimate_acceptance(
        self, target: object, law: DraftLaw, rng: np.random.Generator, *, half_width: float = 1e-3,
        batch: int = 4096, min_paths: int = 4096, max_paths: int = 1_000_000,
    ) -> AcceptanceEstimate:
        """The Rao-Blackwellised estimate of the module docstring, in batches of ``batch`` paths
        until the 95% half-width is at most ``half_width`` (or ``max_paths`` paths).

        >>> from multidraft.theory.laws import WithoutReplacement
        >>> law = WithoutReplacement([0.5, 0.25, 0.25], 2)
        >>> est = RRSWithoutReplacement().estimate_acceptance([0.25, 0.25, 0.5], law, np.random.default_rng(0))
        >>> abs(est.value - 7 / 8) <= 2 * est.half_width  # exact: 7/8
        True
        """
        if not isinstance(law, WithoutReplacement):
            raise ValueError(f"law: rrs-wor estimates drafts without replacement, got the {law.name} law")
        if not half_width > 0:
            raise ValueError(f"half_width: must be positive, got {half_width}")
        p = law.check_target(target)
        count, total, squares = 0, 0.0, 0.0
        while count < max_paths:
            paths = self._sampled_paths(p, law, batch, rng)
            count, total, squares = count + len(paths), total + paths.sum(), squares + (paths**2).sum()
            mean = total / count
            spread = 1.96 * np.sqrt(max(squares / count - mean**2, 0.0) / max(count - 1, 1))
            if count >= min_paths and spread <= half_width:
                break
        return AcceptanceEstimate(float(mean), float(spread), count)

    def _sampled_paths(self, p: np.ndarray, law: DraftLaw, count: int, rng: np.random.Generator) -> np.ndarray:
        """Path values of ``count`` fresh draft tuples, drawn in the kernel (seeded from ``rng``)."""
        seed = int(rng.integers(2**62))
        return _kernels()[0](np.ascontiguousarray(p, dtype=np.float64), law.draft, law.k, count, seed)

    def _rao_blackwell_paths(self, p: np.ndarray, law: DraftLaw, tuples: np.ndarray) -> np.ndarray:
        """``Σ_i Π_{j<i} (1 - a_j) β_i`` for every sampled ordered draft tuple (rows of ``tuples``):
        one compiled pass of K residual updates per row (O(K n), no [rows, n] temporaries)."""
        return _kernels()[1](np.ascontiguousarray(p, dtype=np.float64), law.draft, np.ascontiguousarray(tuples))
