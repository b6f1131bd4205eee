"""Optimisation-backed results: the optimal-transport LP over draft tuples, the
importance-weighted LP of Theorem 1, its truncation (Section 4, any K: a canonical projection,
no LP; :func:`truncated_selection`, formerly ``truncated_lp``) and multi-stage K > 2.

Needs the ``lp`` extra (cvxpy with HiGHS; the truncated selection needs only numpy and scipy).
Solvers are silent unless ``verbose=True`` (or inside :func:`solver_output`); every LP checks
its size before building anything and raises :class:`ProblemTooLargeError` beyond the limits.
The optima (transport, importance and pair LPs) are certified against the min-cut P* of
:mod:`multidraft.theory` within 1e-9, trying other solver routes before they raise
:class:`SolverError`; their :class:`Certification` says which route answered.
"""

from multidraft.lp._solve import Certification, ProblemTooLargeError, SolverError, solver_output
from multidraft.lp.importance import (
    ImportanceSelection,
    PairSelection,
    TupleSelection,
    importance_from_coupling,
    importance_lp,
    pair_importance_lp,
)
from multidraft.lp.transport import TransportSolution, transport_lp
from multidraft.lp.truncated import (
    MultistageSelection,
    TruncatedSelection,
    multistage,
    truncated_lp,
    truncated_sample,
    truncated_selection,
)

__all__ = [
    "SolverError",
    "Certification",
    "ProblemTooLargeError",
    "solver_output",
    "TransportSolution",
    "transport_lp",
    "ImportanceSelection",
    "TupleSelection",
    "PairSelection",
    "TruncatedSelection",
    "MultistageSelection",
    "importance_lp",
    "importance_from_coupling",
    "pair_importance_lp",
    "truncated_selection",
    "truncated_lp",
    "truncated_sample",
    "multistage",
]
