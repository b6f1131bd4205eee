"""The laws room: distributions, the draft laws, the size guard and the float/exact field.

* distributions -- validation at the boundary (:func:`as_distribution`, one tolerance policy)
  (``_distributions``); temperature, top-k/top-p and the families (Dirichlet, Zipf) (``_families``);
* the one arithmetic of float and exact computations, :class:`Field`, with the canonical
  single-draft step (``_field``);
* the draft laws -- :class:`IID`, :class:`Independent`, :class:`WithoutReplacement`,
  :class:`Greedy`, :class:`Deterministic` on the :class:`DraftLaw` interface -- their registry
  (:data:`LAWS`, :func:`law_for`) and the array kernels behind their containment probabilities
  (``_law_base``, ``_laws``, ``_deterministic``, ``_registry``, ``_kernels``);
* the size guard every optimisation and enumeration calls first, :func:`check_size` with
  :class:`ProblemTooLargeError` (``_limits``).

Nothing here imports the optimum or the verifier rooms.
"""

from multidraft.theory.laws._distributions import (
    MASS_FLOOR,
    SUM_TOLERANCE,
    UNIT_ROUNDOFF,
    as_distribution,
    as_exact_distribution,
    check_count,
    check_generator,
    check_number,
    check_row_sums,
    is_exact_input,
    parse_distribution,
    sum_tolerance,
)
from multidraft.theory.laws._families import dirichlet, softmax, top_k, top_p, zipf
from multidraft.theory.laws._field import EXACT, FLOAT, Field, canonical_step, field, normalise, positive_part, safe_divide
from multidraft.theory.laws._kernels import (
    exact_ratio_order,
    iid_prefix_containment,
    membership,
    ratio_order,
    subset_sums,
    wor_prefix_containment,
    zeta_transform,
)
from multidraft.theory.laws._law_base import ENUMERATION_LIMIT, DraftLaw, check_k, check_law
from multidraft.theory.laws._laws import IID, Greedy, Independent, WithoutReplacement
from multidraft.theory.laws._deterministic import Deterministic
from multidraft.theory.laws._registry import LAWS, law_class, law_for
from multidraft.theory.laws._limits import (
    MAX_MEMORY,
    MAX_VARIABLES,
    SUBSETS_LIMIT,
    ProblemTooLargeError,
    SizeEstimate,
    check_size,
    optimum_advice,
)

__all__ = [
    # distributions
    "SUM_TOLERANCE",
    "UNIT_ROUNDOFF",
    "MASS_FLOOR",
    "sum_tolerance",
    "check_row_sums",
    "check_count",
    "check_number",
    "check_generator",
    "as_distribution",
    "as_exact_distribution",
    "parse_distribution",
    "is_exact_input",
    "softmax",
    "top_k",
    "top_p",
    "dirichlet",
    "zipf",
    # the field
    "Field",
    "FLOAT",
    "EXACT",
    "field",
    "positive_part",
    "safe_divide",
    "normalise",
    "canonical_step",
    # draft laws
    "DraftLaw",
    "IID",
    "Independent",
    "WithoutReplacement",
    "Greedy",
    "Deterministic",
    "LAWS",
    "law_class",
    "law_for",
    "ENUMERATION_LIMIT",
    "check_k",
    "check_law",
    "ratio_order",
    "exact_ratio_order",
    "membership",
    "subset_sums",
    "zeta_transform",
    "iid_prefix_containment",
    "wor_prefix_containment",
    # the size guard
    "SUBSETS_LIMIT",
    "MAX_VARIABLES",
    "MAX_MEMORY",
    "ProblemTooLargeError",
    "SizeEstimate",
    "check_size",
    "optimum_advice",
]
