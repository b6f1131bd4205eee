"""The optimal scheme: a lossless verifier whose acceptance is the optimal acceptance P*.

Every route is the canonical decomposition (Khisti et al., ICLR 2025, Theorem 1): a selection
rule picks one drafted token Z with law r, then single-draft speculative sampling of Z against
p with draft law r (accept with probability ``min(1, p(Z)/r(Z))``, else sample
``norm((p - r)_+)``); the plan of each law comes from the route below (for greedy and
deterministic drafts, the plan of another scheme); its acceptance is

    P* = min_{T ⊆ Ω} [ p(T) + 1 - P_D(set(X) ⊆ T) ]

(max-flow/min-cut; :func:`multidraft.theory.optimal_acceptance`, exactly in Fractions when
asked).

* **iid drafts, any vocabulary size**: the exact optimal verifier of
  :func:`multidraft.theory.verifier.optimal_selection_rule` (the optimal law r* realised by
  random positions; its computed law r is used in the single-draft step, so the output is
  exactly p and ``Σ min(p, r) = P*`` up to about 1e-11).
* **drafts without replacement**: the transport LP (below) where it fits, the exact optimum;
  beyond its size limit the rule of :func:`~multidraft.theory.verifier.optimal_selection_rule`
  (the J-curtain on U, front/back with a uniform tail of light tokens on T*; lossless with its exact law; its acceptance
  ``Σ min(p, r)`` reached P* on every Zipf setting measured but is only proven to be a lower
  bound, and :meth:`Optimal.acceptance` reports that value, P* beside it in the records).
* **greedy and deterministic drafts, any vocabulary size**: their closed-form verifiers
  (:class:`~multidraft.schemes.greedy.GreedyVerifier`, single-draft sampling of the one random
  draft; :class:`~multidraft.schemes.deterministic.DeterministicSet`, sample p), which reach
  those laws' optimum p(G) + Σ_{y ∉ G} min(p, q̃), resp. p(S).
* **independent (non-identical) drafts**: where the transport LP fits, solve it over draft
  tuples and read importance weights off its optimal plan (``importance_from_coupling``,
  Theorem 1 direction "⇒"); beyond its size limit, for K = 2, the path curtain of
  :func:`~multidraft.theory.verifier.optimal_selection_rule` (lossless with its exact law; its
  acceptance ``Σ min(p, r)``, which :meth:`Optimal.acceptance` reports, reaches P* on most
  instances but not all: docs/nonidentical_verifier.md). The optimum itself at any n is
  :func:`multidraft.theory.optimal_acceptance`'s threshold search.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from multidraft.schemes._importance import ImportancePlan, ImportanceScheme
from multidraft.schemes._threads import on_idle_cores
from multidraft.schemes.base import Capabilities, Plan
from multidraft.schemes.deterministic import DeterministicSet
from multidraft.schemes.greedy import GreedyVerifier
from multidraft.theory.laws import IID, DraftLaw, Independent, ProblemTooLargeError, WithoutReplacement
from multidraft.theory.optimum import optimal_acceptance
from multidraft.theory.verifier import (
    PROVEN_OPTIMAL_LAWS,
    VERIFIER_LAWS,
    CurtainRule,
    FrontBackRule,
    IndependentRule,
    checked_selection_rule,
    fit_curtain_rule,
    fit_support_rule,
    has_verifier,
)

__all__ = ["Optimal"]


class _RuleSelection:
    """A verifier rule seen as an importance selection (its exact choice probabilities)."""

    def __init__(self, rule: CurtainRule | FrontBackRule) -> None:
        self.rule = rule

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        return self.rule.choice_probabilities(np.asarray(drafts, dtype=np.int64))


class _OptimumPlan(ImportancePlan):
    """A plan whose acceptance is the optimum P* itself (:func:`optimal_acceptance`); the
    selection is the transport LP's coupling (the scheme's :meth:`Optimal.selection`)."""

    def closed_form(self):
        return optimal_acceptance(list(self.target) if self.exact else self.target, self.law, exact=self.exact).value


class _VerifierPlan(_OptimumPlan):
    """The optimal verifier's rule (:func:`optimal_selection_rule`), fitted once per plan on
    first use: it selects, and its law r and single-draft step are the plan's. Where the rule
    is not proven to reach P* (drafts without replacement), the float acceptance is the rule's
    own ``Σ min(p, r)``. The iid rule is fitted on the draft's support and samples there
    (:meth:`CurtainRule.sample`): its dense law and step are built only when asked for (the
    enumerations of small cases); the wor rule's step too (:class:`FrontBackRule`)."""

    @cached_property
    def rule(self) -> CurtainRule | FrontBackRule:
        p, law = np.asarray(self.target, dtype=np.float64), self.law
        if not isinstance(law, IID):  # the plan's target, checked by prepare and held by the plan: no copy, no second check
            return checked_selection_rule(p, law)
        support = law.support_tokens()  # the target is the plan's, checked once by prepare
        if len(support) == law.n:
            return fit_curtain_rule(p, law.draft, law.k, support)
        # q on its support as validation left it: a sparse draft's row is never written out
        return fit_support_rule(p[support], law.support_draft(), support, law.n, law.k, target=p)

    @cached_property
    def selection(self) -> _RuleSelection:
        return _RuleSelection(self.rule)

    @cached_property
    def intermediate(self) -> np.ndarray:
        return self.rule.selection_law

    @cached_property
    def step(self) -> tuple[np.ndarray, np.ndarray]:
        return self.rule.accept, self.rule.residual

    def accept_at(self, tokens: np.ndarray) -> np.ndarray:
        """The rule's ``min(1, p/r)`` at ``tokens`` (:meth:`CurtainRule.accept_at`,
        :meth:`FrontBackRule.accept_at`: computed there alone, no dense step)."""
        return self.rule.accept_at(tokens)

    @property
    def residual_law(self) -> np.ndarray:
        return self.rule.residual

    def residual_at(self, tokens: np.ndarray) -> np.ndarray:
        """The rule's residual at ``tokens`` (:meth:`CurtainRule.residual_at`,
        :meth:`FrontBackRule.residual_at`: computed there alone, no row of n)."""
        return self.rule.residual_at(tokens)

    def choose(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return self.rule.choose(tuples, rng)

    def sample(self, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if isinstance(self.rule, (CurtainRule, IndependentRule)):
            return self.rule.sample(tuples, rng)
        return super().sample(tuples, rng)

    def closed_form(self):
        if self.exact and isinstance(self.law, Independent):
            raise ValueError(
                f"exact: the path curtain for {self.law.name} drafts has a float law only and does not always reach "
                "P*, so its exact acceptance is not available; use exact=False (the rule's own Σ min(p, r)) or "
                "optimal_acceptance(..., exact=True) for P*"
            )
        if self.exact or isinstance(self.law, PROVEN_OPTIMAL_LAWS):
            return super().closed_form()
        return self.rule.acceptance


#: Schemes whose closed-form verifier already reaches their laws' optimum at any vocabulary size.
_CLOSED_FORM_VERIFIERS = (GreedyVerifier, DeterministicSet)


class Optimal(ImportanceScheme):
    """The optimal verifier (iid: exact at any vocabulary size) or the optimal transport
    coupling (other laws, small n), then the single-draft step against the selection's law.

    >>> from multidraft.theory.laws import IID
    >>> Optimal().acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 2), exact=True)
    Fraction(1, 1)
    """

    name = "optimal"
    capabilities = Capabilities(
        laws=(IID, Independent, WithoutReplacement) + tuple(law for v in _CLOSED_FORM_VERIFIERS for law in v.capabilities.laws),
        optimal=True,
        exact_acceptance=True,
        any_vocabulary=VERIFIER_LAWS + tuple(law for v in _CLOSED_FORM_VERIFIERS for law in v.capabilities.laws),
        imports_lp=(Independent, WithoutReplacement),  # the transport LP
        batch_laws=(IID,),
    )

    def __init__(self, *, solver: str = "HIGHS") -> None:
        self.solver = solver

    def __repr__(self) -> str:
        return f"Optimal(solver={self.solver!r})"

    def selection(self, target, law: DraftLaw):
        """The transport LP's optimal coupling read as importance weights (Theorem 1, "⇒")."""
        from multidraft.lp.importance import importance_from_coupling
        from multidraft.lp.transport import transport_lp

        return importance_from_coupling(transport_lp(target, law, solver=self.solver), target, law)

    @staticmethod
    def _uses_verifier(law: DraftLaw) -> bool:
        """Whether ``law`` goes to :func:`optimal_selection_rule`: where its rule reaches P*
        (iid) always, otherwise (without replacement) where the transport LP's own size guard
        would refuse the law."""
        if isinstance(law, PROVEN_OPTIMAL_LAWS):
            return True
        if not has_verifier(law):
            return False
        from multidraft.lp.transport import transport_size

        try:
            transport_size(law)
        except ProblemTooLargeError:
            return True
        return False

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> Plan:
        for verifier in _CLOSED_FORM_VERIFIERS:
            if verifier.supports_law(type(law), law.k):
                return verifier().prepare(p, law, exact)
        if self._uses_verifier(law):
            return _VerifierPlan(self, p, law, exact)
        return _OptimumPlan(self, p, law, exact)

    @on_idle_cores
    def select_batch(self, target, drafts, tokens, generator):
        """Batched optimal verifier for iid drafts: ``target [B, n]``, ``drafts [B, K, n]`` (only
        ``drafts[:, 0]`` = q is used), ``tokens [B, K]`` -> ``(output [B], accepted [B])``.

        Each row's rule is fitted in float64 on the host, on the draft's support (rows
        renormalised first, so float32 inputs are verified against exactly the distributions
        they hold); on a device only the supports travel, in one transfer per call
        (:mod:`multidraft.schemes._optimal_batch`). The uniforms come from ``generator`` and the
        outputs are returned on the input device.
        """
        from multidraft.schemes import _torch
        from multidraft.schemes._optimal_batch import select_batch_iid

        k = _torch.check_batch(target, drafts[:, :1].expand_as(drafts), tokens)
        return select_batch_iid(target, drafts, tokens, generator, k)
