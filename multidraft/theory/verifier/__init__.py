"""The verifier room: selection rules that sample at the optimum, losslessly.

* :func:`optimal_selection_rule` -- the rule for ``(target, law)`` at any vocabulary size,
  with the law it realises and the single-draft step for that law (``_optimal_rule``); the
  rule types :class:`SelectionRule` and :class:`FrontBackRule` (``_selection_rule``);
* iid drafts: the curtain -- the nested stack pass that lays out r* and the compiled kernels
  (``_curtain``, ``_curtain_kernels``) -- fitted on the draft's support as
  :class:`CurtainRule` (``_curtain_rule``);
* drafts without replacement: the J-curtain on U and the front/back rule on T* with its
  uniform tail (``_wor_rule``, ``_wor_curtain``, ``_front_back``, ``_wor_tail``);
* two independent, non-identical drafts (K = 2): the path curtain, per-draft curtains along a
  monotone path of draft masses (``_independent_rule``, ``_path_kernels``), the random
  path, a mixture of them fitted by column generation, which reaches P* (``_path_mixture``),
  the staircase, one path as good as any rule (the mixture included; ``_staircase``), and the
  ordered split, both drafts' laws moved together by a linear programme (``_ordered_split``);
* the support split: the target's mass outside the draft's support, drawn in blocks
  (:class:`OutsideTarget`, :class:`TargetSplit`; ``_support``).

Imports the laws and optimum rooms; neither imports this one.
"""

from multidraft.theory.verifier._curtain_rule import CurtainRule, fit_curtain_rule, fit_support_rule
from multidraft.theory.verifier._independent_rule import IndependentRule, fit_path_curtain
from multidraft.theory.verifier._path_mixture import PathMixtureRule, fit_independent_rule
from multidraft.theory.verifier._optimal_rule import PROVEN_OPTIMAL_LAWS, VERIFIER_LAWS, checked_selection_rule, has_verifier, optimal_selection_rule
from multidraft.theory.verifier._selection_rule import FrontBackRule, SelectionRule
from multidraft.theory.verifier._support import BLOCK, OutsideTarget, TargetSplit, draw_levels, every_token, support_index

__all__ = [
    "SelectionRule",
    "CurtainRule",
    "FrontBackRule",
    "IndependentRule",
    "fit_independent_rule",
    "fit_path_curtain",
    "PathMixtureRule",
    "has_verifier",
    "OutsideTarget",
    "optimal_selection_rule",
    "checked_selection_rule",
    "fit_curtain_rule",
    "fit_support_rule",
    "VERIFIER_LAWS",
    "PROVEN_OPTIMAL_LAWS",
    "TargetSplit",
    "BLOCK",
    "draw_levels",
    "support_index",
    "every_token",
]
