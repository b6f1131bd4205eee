"""The verifier's entry point: the selection rule for ``(target, law)``, dispatched on the law
(the iid curtain or, for drafts without replacement, the J-curtain with front/back). What the
rules are and why they are optimal: :mod:`multidraft.theory.verifier._selection_rule`.
"""

from __future__ import annotations

import numpy as np

from multidraft.theory.laws import IID, DraftLaw, Independent, WithoutReplacement, check_law
from multidraft.theory.verifier._curtain_rule import CurtainRule, fit_curtain_rule
from multidraft.theory.verifier._independent_rule import IndependentRule
from multidraft.theory.verifier._path_mixture import fit_independent_rule
from multidraft.theory.verifier._selection_rule import FrontBackRule
from multidraft.theory.verifier._wor_rule import wor_selection_rule

__all__ = ["optimal_selection_rule", "checked_selection_rule", "VERIFIER_LAWS", "PROVEN_OPTIMAL_LAWS", "has_verifier"]

#: Draft-law classes with a lossless verifier at any vocabulary size (:func:`optimal_selection_rule`).
VERIFIER_LAWS: tuple[type[DraftLaw], ...] = (IID, WithoutReplacement)
#: Those whose verifier provably reaches P* (for drafts without replacement it is a lower bound).
PROVEN_OPTIMAL_LAWS: tuple[type[DraftLaw], ...] = (IID,)


def has_verifier(law: DraftLaw) -> bool:
    """Whether :func:`optimal_selection_rule` has a rule for ``law`` at any vocabulary size: the
    laws of :data:`VERIFIER_LAWS` for every K, and two independent non-identical drafts
    (``Independent`` with K = 2: the path curtain, or the random path where one path falls short,
    docs/nonidentical_verifier.md). K > 2 independent drafts are refused: the K-dimensional path
    would be lossless by the same argument, but no fit for it exists here."""
    return isinstance(law, VERIFIER_LAWS) or (isinstance(law, Independent) and law.k == 2)


def optimal_selection_rule(target: object, law: DraftLaw, *, copy: bool = True) -> CurtainRule | FrontBackRule | IndependentRule:
    """The verifier's selection rule for ``(p, law)`` at any vocabulary size.

    * iid drafts: the optimal law r* (:mod:`multidraft.theory.verifier._selection_rule`) laid
      out by the nested stack pass; the rule realises r* to ``|r - r*| ~ 1e-15``, so
      ``Σ min(p, r) = P*`` up to rounding.
    * drafts without replacement: the J-curtain on U and front/back on T* (a lower bound on P*,
      :mod:`multidraft.theory.verifier._selection_rule`).
    * two independent, non-identical drafts (``Independent``, K = 2): the path curtain
      (:mod:`multidraft.theory.verifier._independent_rule`) and, where it falls short and
      n <= 512, the random path (:mod:`multidraft.theory.verifier._path_mixture`), which reaches
      P* (docs/nonidentical_verifier.md); at larger n one path, a lower bound on P*.

    Either way the rule comes with the law r it actually has and the single-draft step for that
    r, so the output is exactly p.

    Parameters
    ----------
    target : array_like [n]
        The target p.
    law : DraftLaw
        An :class:`~multidraft.theory.laws.IID` or
        :class:`~multidraft.theory.laws.WithoutReplacement` law.
    copy : bool
        False: the rule may hold ``target`` itself where its check leaves it unchanged
        (:meth:`~multidraft.theory.laws.DraftLaw.check_target`; the same values, one row of n
        fewer), for a caller that owns the array or drops the rule before the array can change
        (a plan's target).

    Returns
    -------
    CurtainRule or FrontBackRule

    Raises
    ------
    ValueError
        A law without a verifier here, or a target that is not a distribution of the law's
        size.

    Examples
    --------
    >>> from multidraft.theory.laws import IID, WithoutReplacement
    >>> rule = optimal_selection_rule([1/3, 1/6, 1/2], IID([1/3, 1/3, 1/3], k=2))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (1.0, 1.0)
    >>> rule = optimal_selection_rule([0.5, 0.3, 0.2], WithoutReplacement([0.2, 0.3, 0.5], k=2))
    >>> round(rule.acceptance, 12), round(rule.optimum, 12)
    (0.985714285714, 0.985714285714)

    Complexity (iid): O(n) to validate p and find the draft's support S, then O(s log s) on S
    alone -- one sort of the p/q ratios and the compiled scan and stack passes (the tokens the
    draft cannot propose are never selected and never in T*; docs/optimal_verifier.md §8). Drafts
    without replacement: the pruned prefix race, the J-law, the front/back pass over T*'s head
    and the uniform tail's power series (docs/optimal_verifier.md §10).
    """
    if not has_verifier(check_law(law)):
        reason = " (k > 2 independent drafts: no fitted K-dimensional path yet)" if isinstance(law, Independent) else ""
        raise ValueError(
            f"law: the optimal verifier supports the {', '.join(cls.name for cls in VERIFIER_LAWS)} laws and "
            f"{Independent.name} drafts with k=2; got the {law.name} law with k={law.k}{reason}"
        )
    return checked_selection_rule(law.check_target(target, copy=copy), law)


def checked_selection_rule(p: np.ndarray, law: DraftLaw) -> CurtainRule | FrontBackRule | IndependentRule:
    """:func:`optimal_selection_rule` for a target ``p`` that ``law.check_target`` has already
    returned, and a law with a verifier (:func:`has_verifier`): the rule of the law's kind,
    without checking either again (a scheme's plan, whose ``prepare`` checked both: one pass
    over the vocabulary less per node of a tree's law)."""
    if isinstance(law, Independent):
        first, second = law.marginals()
        return fit_independent_rule(p, first, second)
    if isinstance(law, WithoutReplacement):
        return wor_selection_rule(p, law.draft, law.k)
    return fit_curtain_rule(p, law.draft, law.k, law.support_tokens())
