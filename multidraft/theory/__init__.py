"""Pure mathematics of multi-draft speculative sampling on numpy arrays (and Fractions).

Imports neither cvxpy nor torch. The public face: distributions and their validation, the one
arithmetic of float and exact computations (:class:`Field`) with the canonical single-draft
step, draft laws, and the optimal acceptance with its min-cut certificate.
"""

from multidraft.theory.distributions import (
    as_distribution,
    as_exact_distribution,
    check_count,
    check_row_sums,
    dirichlet,
    parse_distribution,
    softmax,
    sum_tolerance,
    top_k,
    top_p,
    zipf,
)
from multidraft.theory._field import EXACT, FLOAT, Field, canonical_step, field, normalise, positive_part, safe_divide
from multidraft.theory.laws import IID, Deterministic, DraftLaw, Greedy, Independent, WithoutReplacement
from multidraft.theory.limits import ProblemTooLargeError
from multidraft.theory.optimal import (
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
