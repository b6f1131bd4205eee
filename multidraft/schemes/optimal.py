"""The optimal scheme: a lossless verifier whose acceptance is the optimal acceptance P*.

Every route is the canonical decomposition (Khisti et al., ICLR 2025, Theorem 1): a selection
rule picks one drafted token Z with law r, then single-draft speculative sampling of Z against
p with draft law r (accept with probability ``min(1, p(Z)/r(Z))``, else sample
``norm((p - r)_+)``); its acceptance is

    P* = min_{T ⊆ Ω} [ p(T) + 1 - P_D(set(X) ⊆ T) ]

(max-flow/min-cut; :func:`multidraft.theory.optimal_acceptance`, exactly in Fractions when
asked).

* **iid drafts, any vocabulary size**: the exact optimal verifier of
  :func:`multidraft.theory.verifier.optimal_selection_rule` (the optimal law r* realised by
  random positions; its computed law r is used in the single-draft step, so the output is
  exactly p and ``Σ min(p, r) = P*`` up to about 1e-11).
* **drafts without replacement**: the transport LP (below) where it fits, the exact optimum;
  beyond its size limit the front/back rule of
  :func:`~multidraft.theory.verifier.optimal_selection_rule` (lossless with its exact law; its
  acceptance ``Σ min(p, r)`` equalled P* on every real-vocabulary position measured, but is
  only proven to be a lower bound, and :meth:`Optimal.acceptance` reports that value).
* **greedy and deterministic drafts, any vocabulary size**: their closed-form verifiers
  (:class:`~multidraft.schemes.greedy.GreedyVerifier`, single-draft sampling of the one random
  draft; :class:`~multidraft.schemes.deterministic.DeterministicSet`, sample p), which reach
  those laws' optimum p(G) + Σ_{y ∉ G} min(p, q̃), resp. p(S).
* **independent (non-identical) drafts** (small n; the optimum itself at any n is
  :func:`multidraft.theory.optimal_acceptance`'s threshold search): solve the transport LP over draft tuples
  and read importance weights off its optimal plan (``importance_from_coupling``, Theorem 1
  direction "⇒").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from multidraft.schemes._importance import ImportanceScheme, _Plan
from multidraft.schemes.base import Scheme
from multidraft.schemes.deterministic import DeterministicSet
from multidraft.schemes.greedy import GreedyVerifier
from multidraft.theory.laws import IID, DraftLaw
from multidraft.theory.limits import ProblemTooLargeError
from multidraft.theory.optimal import optimal_acceptance
from multidraft.theory.verifier import VERIFIER_LAWS, CurtainRule, FrontBackRule, fit_curtain_rule, optimal_selection_rule

__all__ = ["Optimal"]


class _RuleSelection:
    """A verifier rule seen as an importance selection (its exact choice probabilities)."""

    def __init__(self, rule: CurtainRule | FrontBackRule) -> None:
        self.rule = rule

    def selection_probabilities(self, drafts: np.ndarray) -> np.ndarray:
        return self.rule.choice_probabilities(np.asarray(drafts, dtype=np.int64))


@dataclass(frozen=True)
class _CurtainPlan:
    """The iid verifier's rule as an importance plan. Its dense arrays (the step ``min(1, p/r)``,
    the residual and r itself) are built only when asked for -- by the enumerations of small
    cases; sampling runs on the rule's support (:meth:`CurtainRule.sample`)."""

    rule: CurtainRule

    @property
    def selection(self) -> _RuleSelection:
        return _RuleSelection(self.rule)

    @property
    def step(self) -> np.ndarray:
        return self.rule.accept

    @property
    def residual(self) -> np.ndarray:
        return self.rule.residual

    @property
    def intermediate(self) -> np.ndarray:
        return self.rule.selection_law


@dataclass(frozen=True)
class _Delegated:
    """The plan of a closed-form optimal verifier that ``optimal`` runs for its law."""

    scheme: Scheme
    plan: Any


#: Fitted rules an :class:`Optimal` instance keeps (oldest dropped first).
_REMEMBERED_RULES = 4
#: Laws whose optimum a closed-form scheme already reaches at any vocabulary size.
_CLOSED_FORM_VERIFIERS = {"greedy": GreedyVerifier, "deterministic": DeterministicSet}


class Optimal(ImportanceScheme):
    """The optimal verifier (iid: exact at any vocabulary size) or the optimal transport
    coupling (other laws, small n), then the single-draft step against the selection's law.

    >>> from multidraft.theory.laws import IID
    >>> Optimal().acceptance(["1/3", "1/6", "1/2"], IID(["1/3", "1/3", "1/3"], 2), exact=True)
    Fraction(1, 1)
    """

    name = "optimal"
    supported_laws = ("iid", "independent", "wor", "greedy", "deterministic")
    optimal = True
    any_vocabulary_laws = VERIFIER_LAWS + tuple(_CLOSED_FORM_VERIFIERS)
    lp_laws = ("independent", "wor")  # the transport LP
    exact_capable = True
    batch_capable = True
    batch_laws = ("iid",)

    def __init__(self, *, solver: str = "HIGHS") -> None:
        self.solver = solver
        self._rules: dict[bytes, CurtainRule | FrontBackRule] = {}

    def _rule(self, p: np.ndarray, law: DraftLaw) -> CurtainRule | FrontBackRule:
        """The verifier's rule for a checked ``(p, law)``: the iid fit directly (microseconds on
        a sparse draft, about a sort at full support); for drafts without replacement
        :func:`optimal_selection_rule`, remembering the last few fits (a decoding position asks
        for the rule, to select, and for its acceptance, to record, and that fit costs about a
        second at n = 49152)."""
        if law.name == "iid":
            return fit_curtain_rule(p, law.draft, law.k)
        p = np.asarray(p, dtype=np.float64)
        key = hashlib.blake2b(law.name.encode() + law.k.to_bytes(8, "little") + p.tobytes() + law.draft.tobytes()).digest()
        if key not in self._rules:
            if len(self._rules) >= _REMEMBERED_RULES:
                self._rules.pop(next(iter(self._rules)))
            self._rules[key] = optimal_selection_rule(p, law)
        return self._rules[key]

    def __repr__(self) -> str:
        return f"Optimal(solver={self.solver!r})"

    def selection(self, target, law: DraftLaw):
        from multidraft.lp.importance import importance_from_coupling
        from multidraft.lp.transport import transport_lp

        return importance_from_coupling(transport_lp(target, law, solver=self.solver), target, law)

    @staticmethod
    def _uses_verifier(law: DraftLaw) -> bool:
        """Whether ``law`` goes to :func:`optimal_selection_rule`: iid always, drafts without
        replacement where the transport LP's own size guard would refuse it."""
        if law.name != "wor":
            return law.name in VERIFIER_LAWS
        from multidraft.lp.transport import transport_size

        try:
            transport_size(law)
        except ProblemTooLargeError:
            return True
        return False

    def _prepare(self, p: np.ndarray, law: DraftLaw, exact: bool) -> _Plan | _Delegated:
        if law.name in _CLOSED_FORM_VERIFIERS:
            scheme = _CLOSED_FORM_VERIFIERS[law.name]()
            return _Delegated(scheme, scheme._prepare(p, law, exact))
        if not self._uses_verifier(law):
            return super()._prepare(p, law, exact)
        rule = self._rule(p, law)
        if isinstance(rule, CurtainRule):
            return _CurtainPlan(rule)
        return _Plan(_RuleSelection(rule), rule.accept, rule.residual, rule.selection_law)

    def _conditional(self, plan: _Plan | _Delegated, tuples: np.ndarray) -> np.ndarray:
        if isinstance(plan, _Delegated):
            return plan.scheme._conditional(plan.plan, tuples)
        return super()._conditional(plan, tuples)

    def _sample(self, plan: _Plan | _CurtainPlan | _Delegated, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if isinstance(plan, _Delegated):
            return plan.scheme._sample(plan.plan, tuples, rng)
        if isinstance(plan, _CurtainPlan):
            return plan.rule.sample(tuples, rng)
        return super()._sample(plan, tuples, rng)

    def _choose(self, plan: _Plan, tuples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if isinstance(plan.selection, _RuleSelection):
            return plan.selection.rule.choose(tuples, rng)
        return super()._choose(plan, tuples, rng)

    def _closed_form(self, p: np.ndarray, law: DraftLaw, exact: bool) -> float | Fraction:
        if law.name == "wor" and not exact and self._uses_verifier(law):  # the front/back rule's acceptance
            return self._rule(p, law).acceptance
        return optimal_acceptance(list(p) if exact else p, law, exact=exact).value

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
