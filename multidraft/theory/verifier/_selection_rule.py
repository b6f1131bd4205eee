"""The optimal verifier: a selection rule whose acceptance is the optimal acceptance P*.

**Canonical decomposition** (Khisti et al., ICLR 2025, Theorem 1; theory.md, "The optimal
verifier"). A *selection rule* picks one drafted token Z ∈ set(X); let r be its law. Accepting Z
with probability ``min(1, p(Z)/r(Z))`` and otherwise sampling ``norm((p - r)_+)`` outputs exactly
p, whatever r is, and accepts with probability ``Σ_y min(p(y), r(y))``. The laws r that some
selection rule has are the base polytope B(h) of ``h(A) = P(set(X) ∩ A ≠ ∅)``; the best of them
reaches ``P* = min_T [p(T) + 1 - P(set(X) ⊆ T)]`` (max-flow/min-cut).

**The optimal law (iid drafts).** Let T* be the min-cut certificate (a prefix of the
decreasing-q/p order, :func:`multidraft.theory.optimal_acceptance`) and U = Ω ∖ T*. Then

    r*(y) = min(p(y), λ q(y))  on U,    λ such that r*(U) = h(U) = 1 - q(T*)^K,
    r*(y) = max(p(y), μ q(y))  on T*,   μ such that r*(T*) = q(T*)^K,

lies in B(h) and ``Σ min(p, r*) = r*(U) + p(T*) = P*`` (r* <= p on U, r* >= p on T*).

**Its realisation** ("curtain"; :mod:`multidraft.theory.verifier._curtain`, fitted on the draft's
support, :mod:`multidraft.theory.verifier._curtain_rule`): every draft draws a
position uniformly from its token's set of [0, 1) and the draft with the smallest position is
selected; U's sets tile [0, q(U)) and T*'s tile [q(U), 1), laid out by the nested stack pass.
The law the rule *actually* has is computed from its sets and is the r used in the
accept/residual step, so the output is exactly the target and only the acceptance carries
rounding.

**Drafts without replacement** (:mod:`multidraft.theory.verifier._wor_rule`). The clipped form is
optimal for this law too (proof in docs/optimal_verifier.md §7), computed by a pruned exact
scan. The rule realising it: U and T* decouple (U is tight); on U the *J-curtain* (the iid
curtain on the U-points of the drafts' rebuilt iid stream, with G(x) = E[x^J] in place of
x^K), fitted to the best law of its class; on T* the *front/back* rule (coins α fitted in one
forward pass, U merged into one token) whose light pool tokens form a *uniform tail* (the winner
uniform among those drafted, its law one power series in q); where a side falls short of r*, the front/back rule on
U, or other position orders for a small side, and the better exact law is kept. Lossless either
way (its exact law enters the accept/residual step); its acceptance reached P* to 1e-14 on every
Zipf setting measured and on 99.7% of 2,000 adversarial small instances, a lower bound on P*, not
a proof of optimality on every instance (docs/optimal_verifier.md §8-9).

Derivations and proofs (why r* is optimal, why the pass never gets stuck), the treatment of
ties, zeros, p = q, disjoint supports and empty U or T*, and the measured accuracy and
shortfall: docs/optimal_verifier.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from multidraft.theory.laws import canonical_step, safe_divide

__all__ = ["SelectionRule", "FrontBackRule"]

@dataclass(frozen=True)
class SelectionRule:
    """What every verifier rule here carries: its law and the single-draft step for it (the
    step's arrays are a subclass's, as fields or built on demand).

    Attributes
    ----------
    k, n : int
        Number of drafts and vocabulary size.
    target, draft : ndarray [n]
        p and q.
    selection_law : ndarray [n]
        r, the law of the selected draft token, as the rule realises it.
    optimum : float
        P* (min-cut value of :attr:`certificate`), for comparison with :attr:`acceptance`.
    certificate : ndarray [int64]
        The min-cut set T* (sorted token ids).
    accept : ndarray [n]
        ``min(1, p/r)`` (0 where r = 0: such tokens are never selected).
    residual : ndarray [n]
        ``norm((p - r)_+)`` (p itself when that mass is zero).
    """

    k: int
    n: int
    target: np.ndarray
    draft: np.ndarray
    selection_law: np.ndarray
    optimum: float
    certificate: np.ndarray

    @property
    def acceptance(self) -> float:
        """``Σ_y min(p(y), r(y))``: the probability that the selected draft is accepted."""
        return float(np.minimum(self.target, self.selection_law).sum())

    def accept_at(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, p/r)`` at the token ids ``tokens`` (any shape): :attr:`accept`'s entries."""
        return self.accept[tokens]

    def residual_at(self, tokens: np.ndarray) -> np.ndarray:
        """``norm((p - r)_+)`` at the token ids ``tokens``: :attr:`residual`'s entries."""
        return self.residual[tokens]


@dataclass(frozen=True)
class FrontBackRule(SelectionRule):
    """The front/back selection rule for drafts without replacement, with its exact law (the
    fields of :class:`SelectionRule`, then its coins).

    Attributes
    ----------
    position : ndarray [n] int64
        Every token's position: U = Ω ∖ T* first (``position < boundary``), then T*, each by
        decreasing p/q.
    boundary : int
        |U|.
    alpha : ndarray [n]
        Every token's probability of flipping "front".
    first_draft : bool
        True when selecting the first draft (law q) accepted more than the fitted rule (or the
        fit failed, see ``note``), and the rule is that.
    excess : float
        ``Σ_y (p(y) - r(y))_+`` as numpy sums the dense ``(p - r)_+`` (the residual's
        normaliser, that of :func:`~multidraft.theory.canonical_step`).
    note : str or None
        Set when the fit failed and the rule fell back to the first draft; None normally.

    The step (:attr:`accept`, :attr:`residual`, arrays of n) is built on first use; the tree
    walks read it only at a few tokens (:meth:`accept_at`, :meth:`residual_at`: the same
    operations per entry, no row of n).
    """

    position: np.ndarray
    boundary: int
    alpha: np.ndarray
    first_draft: bool
    excess: float
    note: str | None = None

    @cached_property
    def step(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min(1, p/r) [n], norm((p - r)_+) [n])``: :func:`~multidraft.theory.canonical_step`
        against r, once."""
        return canonical_step(self.target, self.selection_law)

    @property
    def accept(self) -> np.ndarray:
        """``min(1, p/r)`` [n] (0 where r = 0: such tokens are never selected)."""
        return self.step[0]

    @property
    def residual(self) -> np.ndarray:
        """``norm((p - r)_+)`` [n] (p itself when that mass is zero)."""
        return self.step[1]

    def accept_at(self, tokens: np.ndarray) -> np.ndarray:
        """``min(1, p(y)/r(y))`` at the token ids ``tokens`` (any shape), computed there alone:
        :attr:`accept`'s entries bit for bit (the step's ratio, 0 where r = 0, clipped at 1)."""
        return np.minimum(safe_divide(self.target[tokens], self.selection_law[tokens]), 1.0)

    def residual_at(self, tokens: np.ndarray) -> np.ndarray:
        """``(p(y) - r(y))_+ / Σ (p - r)_+`` at the token ids ``tokens`` (p there when the sum
        is 0), computed there alone with :attr:`excess`: :attr:`residual`'s entries bit for bit."""
        target = self.target[tokens]
        if not self.excess > 0:
            return target
        difference = target - self.selection_law[tokens]
        return np.where(difference < 0.0, 0.0, difference) / self.excess

    def _active(self, tuples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``[N, K]`` and the mask of the drafts in each row's active part."""
        position = self.position[tuples]
        in_u = position < self.boundary
        return position, np.where(in_u.any(axis=-1, keepdims=True), in_u, ~in_u)

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The selected draft (column) of every row of ``tuples [N, K]`` (distinct tokens)."""
        tuples = np.asarray(tuples, dtype=np.int64)
        coins = rng.random(tuples.shape)
        if self.first_draft:
            return np.zeros(len(tuples), dtype=np.int64)
        position, active = self._active(tuples)
        front = active & (coins < self.alpha[tuples])
        first_front = np.argmin(np.where(front, position, self.n), axis=-1)
        last_active = np.argmax(np.where(active, position, -1), axis=-1)
        return np.where(front.any(axis=-1), first_front, last_active)

    def choice_probabilities(self, tuples: np.ndarray) -> np.ndarray:
        """``P(draft i is selected | X = x)`` for every row of ``tuples [m, K]``, exactly:
        ``α_i Π_{j active before i} (1 - α_j)``, plus ``Π_{j active} (1 - α_j)`` for the last
        active draft."""
        tuples = np.asarray(tuples, dtype=np.int64)
        out = np.zeros(tuples.shape)
        if self.first_draft:
            out[:, 0] = 1.0
            return out
        position, active = self._active(tuples)
        back = np.where(active, 1.0 - self.alpha[tuples], 1.0)  # [m, K]
        for i in range(self.k):
            before = active & (position < position[:, i : i + 1])
            out[:, i] = np.where(active[:, i], self.alpha[tuples[:, i]] * np.prod(np.where(before, back, 1.0), axis=-1), 0.0)
        last = np.argmax(np.where(active, position, -1), axis=-1)
        out[np.arange(len(tuples)), last] += np.prod(back, axis=-1)
        return out
