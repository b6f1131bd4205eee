"""One size guard for every optimisation and enumeration.

Each LP (transport, importance, truncated, multi-stage), each double-description cone and each
enumeration of draft tuples first *estimates* its size -- variables (or tuples, or atoms),
constraints and peak memory -- from the inputs alone, then calls :func:`check_size` before it
builds anything. A problem over a limit is refused with :class:`ProblemTooLargeError`, whose
message gives the estimate, names the limit that was exceeded (and the keyword that raises it)
and says what to use instead. Nothing is allocated first, so a refusal costs microseconds
instead of an out-of-memory crash minutes later.

:func:`optimum_advice` is the "use instead" for the optimal acceptance: it names only a route
that accepts the law at hand (the sorted scan for laws with prefix structure, the subset
min-cut for at most :data:`SUBSETS_LIMIT` draftable tokens, else the LP).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

__all__ = [
    "MAX_VARIABLES",
    "MAX_MEMORY",
    "SUBSETS_LIMIT",
    "ProblemTooLargeError",
    "SizeEstimate",
    "check_size",
    "optimum_advice",
]

#: Default largest number of LP variables built before refusing. Measured on one core of the
#: development machine, HiGHS solves the transport LP in about 3 s at 30,000 variables, 20 s at
#: 150,000 and 55 s at 505,000, and took over 11 minutes at 1.1 million: the limit keeps a
#: default solve near a minute (pass ``max_variables=`` to go further).
MAX_VARIABLES = 500_000
#: Default largest estimated peak memory in bytes (2 GiB) before refusing.
MAX_MEMORY = 2 * 2**30
#: Largest vocabulary for which all 2^n token sets are enumerated.
SUBSETS_LIMIT = 22


class ProblemTooLargeError(ValueError):
    """A problem would exceed a size limit; nothing was built.

    A ``ValueError`` (too large is a property of the input). Attributes: ``estimate`` (the
    :class:`SizeEstimate`), ``limit_name`` (the keyword that raises the limit, e.g.
    ``"max_variables"``), ``limit`` (its value) and ``alternative`` (what to use instead).
    """

    def __init__(self, estimate: SizeEstimate, limit_name: str, limit: int, alternative: str) -> None:
        self.estimate, self.limit_name, self.limit, self.alternative = estimate, limit_name, limit, alternative
        super().__init__(
            f"{estimate.what}: {estimate.describe()} exceed the limit {limit_name}={_quantity(limit_name, limit)}; "
            f"{alternative}"
        )


@dataclass(frozen=True)
class SizeEstimate:
    """The estimated size of a problem, computed before anything is built.

    Attributes
    ----------
    what : str
        The problem and its parameters, e.g. ``"transport LP (iid law, n=3, k=2)"``.
    variables : int
        Variables of an LP or cone, or items of an enumeration (``unit`` says which).
    memory : int
        Estimated peak memory in bytes of building and solving it (0: not the binding limit,
        not shown).
    constraints : int
        Constraints (0 for an enumeration).
    unit : str
        Name of what ``variables`` counts ("variables", "draft tuples", ...).
    """

    what: str
    variables: int
    memory: int
    constraints: int = 0
    unit: str = "variables"

    def describe(self) -> str:
        """``"about 1,000 variables (40 constraints, 1.2 MiB of memory)"``."""
        details = [f"{_count(self.constraints)} constraints"] if self.constraints else []
        details += [f"{_bytes(self.memory)} of memory"] if self.memory else []
        return f"about {_count(self.variables)} {self.unit}" + (f" ({', '.join(details)})" if details else "")


#: Counts from this size on are written in scientific notation (``2.3e+18``), not in full.
_SCIENTIFIC_FROM = 10**15


def _count(count: int) -> str:
    """``1,234,567`` or, from 10^15 on, ``5.8e+18`` (exact integers of any size, no float overflow).

    >>> _count(923_780), _count(10**477 + 1)
    ('923,780', '1.0e+477')
    """
    if count < _SCIENTIFIC_FROM:
        return f"{count:,}"
    return f"{Decimal(count):.1e}"


def _bytes(count: int) -> str:
    """Binary units up to TiB, then scientific notation for anything larger.

    >>> _bytes(3 * 2**29), _bytes(2**41), _bytes(2**60)
    ('1.5 GiB', '2.0 TiB', '1.2e+18 bytes')
    """
    if count >= 2**50:
        return f"{_count(count)} bytes"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def _quantity(name: str, value: int) -> str:
    return _bytes(value) if name.endswith("memory") else _count(value)


def check_size(
    estimate: SizeEstimate,
    alternative: str,
    *,
    max_variables: int = MAX_VARIABLES,
    max_memory: int = MAX_MEMORY,
    max_constraints: int | None = None,
    variables_name: str = "max_variables",
    constraints_name: str = "max_constraints",
) -> SizeEstimate:
    """Return ``estimate`` if it is within every limit, else raise :class:`ProblemTooLargeError`.

    The limits are checked in the order variables, constraints, memory; the error names the
    first one exceeded under the keyword the caller exposes (``variables_name``,
    ``constraints_name``, ``max_memory``), the estimate, and ``alternative``.

    >>> check_size(SizeEstimate("toy LP", 10, 800), "use the closed form").variables
    10
    >>> check_size(SizeEstimate("toy LP", 10, 800), "use the closed form", max_variables=5)
    Traceback (most recent call last):
    ...
    multidraft.theory.laws._limits.ProblemTooLargeError: toy LP: about 10 variables (800 bytes of memory) exceed the limit max_variables=5; use the closed form
    """
    if estimate.variables > max_variables:
        raise ProblemTooLargeError(estimate, variables_name, max_variables, alternative)
    if max_constraints is not None and estimate.constraints > max_constraints:
        raise ProblemTooLargeError(estimate, constraints_name, max_constraints, alternative)
    if estimate.memory > max_memory:
        raise ProblemTooLargeError(estimate, "max_memory", max_memory, alternative)
    return estimate


def optimum_advice(law: object, *, lp: bool = True) -> str:
    """Where to get the optimal acceptance of ``law`` instead, naming only routes that accept it.

    * a law with prefix structure (iid, wor, greedy, deterministic): the O(n log n) sorted scan;
    * independent drafts (the Independent law): the threshold-set search, at any vocabulary;
    * otherwise, at most ``SUBSETS_LIMIT`` draftable tokens: the subset min-cut;
    * otherwise the transport LP (``lp=False`` when the LP itself is what was refused: then
      there is no exact route at this size and the advice says how to shrink the problem).

    >>> from multidraft.theory import IID, Independent
    >>> optimum_advice(IID([0.5, 0.5], 2))
    "use multidraft.theory.optimal_acceptance(target, law, method='sorted') (prefix scan, O(n log n))"
    >>> optimum_advice(Independent([[0.5, 0.5], [0.2, 0.8]]))
    "use multidraft.theory.optimal_acceptance(target, law, method='threshold') (exact threshold-set search, any vocabulary)"
    """
    if law.has_prefix_structure:
        return "use multidraft.theory.optimal_acceptance(target, law, method='sorted') (prefix scan, O(n log n))"
    if law.independent_drafts:
        return "use multidraft.theory.optimal_acceptance(target, law, method='threshold') (exact threshold-set search, any vocabulary)"
    draftable = int(law.support.sum())
    if draftable <= SUBSETS_LIMIT:
        return (
            "use multidraft.theory.optimal_acceptance(target, law, method='subsets') (min-cut over the "
            f"subsets of the {draftable} draftable tokens)"
        )
    no_scan = (
        f"the {law.name} law has no O(n log n) prefix scan and {draftable} draftable tokens, more than the "
        f"{SUBSETS_LIMIT} of method='subsets'"
    )
    if lp:
        return f"use multidraft.lp.transport_lp(target, law) ({no_scan})"
    return f"no exact route fits: {no_scan}; shrink the drafts' support (e.g. top_k) or raise the limit"
