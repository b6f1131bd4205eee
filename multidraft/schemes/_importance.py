"""Schemes built on importance-weighted selection (Theorem 1 of Khisti et al., ICLR 2025).

Step 1 picks draft position i with probability ``β_i(x)`` (an
:class:`multidraft.lp.importance.ImportanceSelection`), giving ``Y' = X_i`` with law r; step 2 is
single-draft speculative sampling of Y' against p with draft law r: accept with probability
``min(1, p(Y')/r(Y'))``, else sample ``norm((p - r)_+)``. Lossless for *any* weights, provided
r is the true law of Y' under the weights used; so when the law can be enumerated
(at most ``RECOMPUTE_LIMIT`` tuples) r is recomputed here from the weights,
``r(y) = Σ_x D(x) Σ_i β_i(x) 1[x_i = y]``, and the LP's own (solver-tolerance) intermediate is
used only beyond that size. The selected draft is accepted with probability
``Σ_y min(p(y), r(y))``; the residual may still emit an unselected draft token, so
``P(Y ∈ set(X))`` can be larger (it is computed by enumeration).
"""

from __future__ import annotations

from abc import abstractmethod
from functools import cached_property

import numpy as np

from multidraft.schemes.base import Plan, Scheme, sample_rows, canonical_step
from multidraft.theory.laws import ENUMERATION_LIMIT, DraftLaw, SizeEstimate, check_size
from multidraft.theory.laws._row_scan import running_sum

__all__ = ["ImportanceScheme", "ImportancePlan", "RECOMPUTE_LIMIT", "residual_draws"]

#: Laws with at most this many draft tuples get r recomputed exactly from the weights.
RECOMPUTE_LIMIT = 200_000
#: Largest accepted deviation of selection weights from a probability vector.
WEIGHT_TOLERANCE = 1e-9


class ImportancePlan(Plan):
    """Importance-weighted selection (``selection``, built on first use) plus the single-draft
    step against the selected draft's law r (``intermediate``)."""

    @cached_property
    def selection(self):
        """The :class:`~multidraft.lp.importance.ImportanceSelection` of the scheme for (p, law)."""
        return self.scheme.selection(self.target, self.law)

    @cached_property
    def intermediate(self) -> np.ndarray:
        """r ``[n]``: recomputed from the weights by enumeration where the law is small enough
        (``RECOMPUTE_LIMIT`` tuples), else the selection's own."""
        if self.law.tuple_count() <= RECOMPUTE_LIMIT:
            return induced_law(self.selection, self.law)
        return np.asarray(self.selection.intermediate, dtype=np.float64)

    @cached_property
    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min(1, p/r) [n], norm((p - r)_+) [n])``."""
        return canonical_step(self.target, self.intermediate)

    def accept_at(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, p(y)/r(y))`` at the token ids ``tokens`` (any shape): the step's entries there."""
        return self.step[0][tokens]

    @property
    def residual_law(self) -> np.ndarray:
        """``norm((p - r)_+)`` ``[n]``: the step's residual."""
        return self.step[1]

    @property
    def selected_acceptance(self) -> float:
        """``Σ_y min(p(y), r(y))``: the chance that the *selected* draft is accepted."""
        return float(np.minimum(self.target, self.intermediate).sum())

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft position of every tuple (step 1), drawn from the weights."""
        return sample_rows(checked_weights(self.selection, tuples), rng)

    def residual_at(self, tokens: np.ndarray) -> np.ndarray:
        """:attr:`residual_law` at the token ids ``tokens``."""
        return self.residual_law[tokens]

    def _selected(self, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(β_i(x) min(1, p/r)(x_i) [m, K], Σ_i β_i(x) (1 - min(1, p/r)(x_i)) [m])``: the
        chance that draft i is selected and accepted, and that the selected draft is rejected."""
        weights = checked_weights(self.selection, tuples)  # [m, K]
        accept = self.accept_at(tuples)  # [m, K]
        rejected = np.zeros(len(tuples))
        for i in range(tuples.shape[1]):
            rejected += weights[:, i] * (1.0 - accept[:, i])
        return weights * accept, rejected

    def conditional(self, tuples: np.ndarray) -> np.ndarray:
        accepted, rejected = self._selected(tuples)
        residual = self.residual_law  # [n]
        out = np.zeros((len(tuples), len(residual)))
        rows = np.arange(len(tuples))
        for i in range(tuples.shape[1]):
            out[rows, tuples[:, i]] += accepted[:, i]
        return out + rejected[:, None] * residual[None, :]

    def conditional_at(self, tuples: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(P(Y = t | X = x) [m, T], P(Y ∉ tokens | X = x) [m])`` for distinct token ids
        ``tokens``: :meth:`conditional`'s entries there, bit for bit, and the rest of its mass,
        ``rejected · (1 - Σ_t residual(t))`` plus the accepted drafts outside ``tokens`` (the row's
        sum off ``tokens`` up to rounding), without building rows of n: O(m K T) besides
        :meth:`residual_at` (for the optimal iid rule, O(T) on top of the fit)."""
        accepted, rejected = self._selected(tuples)
        tokens = np.asarray(tokens, dtype=np.int64)
        hit = tuples[:, :, None] == tokens[None, None, :]  # [m, K, T]
        values = np.zeros((len(tuples), len(tokens)))
        for i in range(tuples.shape[1]):  # the order conditional() adds in (x + 0.0 = x)
            values += np.where(hit[:, i], accepted[:, i, None], 0.0)
        residual = self.residual_at(tokens)
        rest = rejected * max(1.0 - float(residual.sum()), 0.0) + np.where(hit.any(axis=2), 0.0, accepted).sum(axis=1)
        return values + rejected[:, None] * residual[None, :], rest

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Step 1 (:meth:`choose`), then the single-draft step: the chosen draft kept with
        probability ``min(1, p/r)`` there (:meth:`accept_at`, no row of n), else a draw from
        :attr:`residual_law` (read only when some row rejects)."""
        position = self.choose(tuples, rng)
        chosen = tuples[np.arange(len(tuples)), position]
        accept = rng.random(len(tuples)) < self.accept_at(chosen)
        tokens = chosen.copy()
        if (~accept).any():
            tokens[~accept] = residual_draws(self.residual_law, int((~accept).sum()), rng)
        return tokens

    def closed_form(self) -> None:
        """None (enumerate), after refusing a law with more tuples than ``ENUMERATION_LIMIT``."""
        law = self.law
        estimate = SizeEstimate(
            f"scheme {self.scheme.name!r}: P(Y ∈ set(X)) ({law.name} law, n={law.n}, k={law.k})",
            law.tuple_count(), 0, unit="draft tuples to enumerate",
        )  # fmt: skip
        check_size(
            estimate,
            "selected_acceptance(target, law) gives the selected draft's acceptance Σ min(p, r) at any size",
            max_variables=ENUMERATION_LIMIT, variables_name="ENUMERATION_LIMIT",
        )  # fmt: skip
        return None


class ImportanceScheme(Scheme):
    """Importance-weighted selection plus the single-draft step; subclasses choose the weights."""

    @abstractmethod
    def selection(self, target: np.ndarray, law: DraftLaw):
        """The :class:`~multidraft.lp.importance.ImportanceSelection` for ``(p, law)``."""

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        return ImportancePlan(self, p, law, exact)

    def selected_acceptance(self, target: object, law: DraftLaw) -> float:
        """``Σ_y min(p(y), r(y))``: the chance that the *selected* draft is accepted (a lower
        bound on :meth:`acceptance`, equal to it for the optimal weights)."""
        return self.prepare(target, law).selected_acceptance


def checked_weights(selection, tuples: np.ndarray) -> np.ndarray:
    """``selection.selection_probabilities(tuples)``, refused unless every row is a probability
    vector (entries >= -1e-9, sums within 1e-9 of one): a selection that loses or creates mass
    would silently make the scheme lossy."""
    weights = np.asarray(selection.selection_probabilities(tuples), dtype=np.float64)
    if weights.shape != tuples.shape:
        raise RuntimeError(f"selection: weights of shape {weights.shape} for tuples of shape {tuples.shape}")
    error = np.abs(weights.sum(axis=-1) - 1.0)
    if len(weights) and (weights.min() < -WEIGHT_TOLERANCE or error.max() > WEIGHT_TOLERANCE):
        row = int(np.argmax(error))
        raise RuntimeError(
            f"selection {type(selection).__name__}: weights {weights[row].tolist()} for drafts "
            f"{tuples[row].tolist()} are not a probability vector"
        )
    weights = np.maximum(weights, 0.0)
    return weights / weights.sum(axis=-1, keepdims=True)


def induced_law(selection, law: DraftLaw) -> np.ndarray:
    """``r(y) = Σ_x D(x) Σ_i β_i(x) 1[x_i = y]``: the law of the selected draft, by enumeration."""
    tuples, probs = law.enumerate()
    weights = checked_weights(selection, tuples)
    r = np.zeros(law.n)
    np.add.at(r, tuples.reshape(-1), (weights * probs[:, None]).reshape(-1))
    return r / r.sum()


def residual_draws(residual: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` draws from the law ``residual [n]`` by inverse CDF: ``rng.choice(n, size=count,
    p=residual)``'s draws and generator state, bit for bit (the cumulative sums, added left to
    right as numpy adds them, :func:`~multidraft.theory.laws._row_scan.running_sum`, divided by
    their last, then one uniform per draw searched from the right), without its checks of p (a
    pass for negative entries and a compensated sum, ~0.2 ms at n = 49152): the residual of the
    single-draft step is built normalised (:func:`~multidraft.theory.canonical_step`)."""
    cumulative = running_sum(residual)
    cumulative /= cumulative[-1]
    return cumulative.searchsorted(rng.random(count), side="right").astype(np.int64)
