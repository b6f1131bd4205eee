"""The optimum room: the optimal acceptance P* for every draft law, with its certificate.

* :func:`optimal_acceptance` -- one function, ``method`` in ``sorted`` (the O(n log n) prefix
  scan), ``subsets`` (min-cut over all token sets), ``threshold`` (independent drafts),
  ``lp`` and ``auto``, and ``exact`` for Fractions -- returning :class:`OptimalAcceptance` with
  the minimising set T as certificate (:func:`cut_value` reproduces the value); the batched
  form, the unit-acceptance (Theorem 2) check and the single-draft baseline (``_acceptance``);
* the threshold-set branch and bound for independent non-identical drafts (``_independent``);
* for drafts without replacement, the pruned prefix race that finds the optimal cut and the
  law of J, and the power-sum moments it runs on (``_wor_race``, ``_wor_moments``).

Imports the laws room only.
"""

from multidraft.theory.optimum._acceptance import (
    BATCH_LAWS,
    METHODS,
    OptimalAcceptance,
    UnitAcceptance,
    cut_value,
    optimal_acceptance,
    optimal_acceptance_batch,
    prefix_cut,
    single_draft_acceptance,
    unit_acceptance,
)
from multidraft.theory.optimum._independent import ProductCut, product_cut

__all__ = [
    "OptimalAcceptance",
    "prefix_cut",
    "UnitAcceptance",
    "METHODS",
    "BATCH_LAWS",
    "optimal_acceptance",
    "optimal_acceptance_batch",
    "cut_value",
    "unit_acceptance",
    "single_draft_acceptance",
    "ProductCut",
    "product_cut",
]
