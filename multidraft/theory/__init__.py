"""Pure mathematics of multi-draft speculative sampling on numpy arrays (and Fractions).

Imports neither cvxpy nor torch. The public face: distributions and their validation, the one
arithmetic of float and exact computations (:class:`Field`) with the canonical single-draft
step, draft laws, and the optimal acceptance with its min-cut certificate.

In rooms, imports pointing one way (laws <- optimum <- verifier):

* :mod:`multidraft.theory.laws` -- distributions, the draft laws, the size guard, the field;
* :mod:`multidraft.theory.optimum` -- the optimal acceptance P* for every law, its certificate;
* :mod:`multidraft.theory.verifier` -- selection rules that sample at the optimum;
* :mod:`multidraft.theory.speed` -- block efficiency, walltime and throughput models.
"""

import os as _os

# The module paths from before the rooms (theory's distributions, limits, optimal and support
# modules) still import for one release, with a DeprecationWarning: their aliases are in
# _deprecated/, searched after this directory.
__path__.append(_os.path.join(_os.path.dirname(__file__), "_deprecated"))

from multidraft.theory.laws import (
    EXACT,
    FLOAT,
    IID,
    Deterministic,
    DraftLaw,
    Field,
    Greedy,
    Independent,
    ProblemTooLargeError,
    WithoutReplacement,
    as_distribution,
    as_exact_distribution,
    canonical_step,
    check_count,
    check_row_sums,
    dirichlet,
    field,
    normalise,
    parse_distribution,
    positive_part,
    safe_divide,
    softmax,
    sum_tolerance,
    top_k,
    top_p,
    zipf,
)
from multidraft.theory.optimum import (
    OptimalAcceptance,
    UnitAcceptance,
    cut_value,
    optimal_acceptance,
    optimal_acceptance_batch,
    single_draft_acceptance,
    unit_acceptance,
)
from multidraft.theory.speed import (
    LatencyModel,
    SpeedCurve,
    best_configuration,
    best_length,
    chain_block_efficiency,
    iteration_seconds,
    throughput,
    tree_block_efficiency,
    walltime_improvement,
)

__all__ = [
    "as_distribution",
    "as_exact_distribution",
    "parse_distribution",
    "check_count",
    "sum_tolerance",
    "check_row_sums",
    "softmax",
    "top_k",
    "top_p",
    "dirichlet",
    "zipf",
    "Field",
    "FLOAT",
    "EXACT",
    "field",
    "positive_part",
    "safe_divide",
    "normalise",
    "canonical_step",
    "DraftLaw",
    "IID",
    "Independent",
    "WithoutReplacement",
    "Greedy",
    "Deterministic",
    "ProblemTooLargeError",
    "OptimalAcceptance",
    "UnitAcceptance",
    "optimal_acceptance",
    "optimal_acceptance_batch",
    "cut_value",
    "unit_acceptance",
    "single_draft_acceptance",
    "chain_block_efficiency",
    "walltime_improvement",
    "tree_block_efficiency",
    "LatencyModel",
    "iteration_seconds",
    "throughput",
    "SpeedCurve",
    "best_configuration",
    "best_length",
]
