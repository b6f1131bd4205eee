"""Token-level selection schemes of multi-draft speculative sampling, one module each, one
interface (:class:`Scheme`): exact acceptance, exact output distribution (the proof of
losslessness for a case), a numpy sampler and, where provided, a batched torch sampler.

Registered by name (``get_scheme``): ``single``, ``specinfer``, ``rrs-wor``, ``spectr``,
``is-lp``, ``truncated-lp`` (options ``s``, ``rank_key``), ``multistage`` (option ``s``),
``optimal``, ``deterministic``, ``greedy``; a scheme defined elsewhere joins them with
:func:`register_scheme`, and the registry tests, the command line and decoding take it by
name. The LP-based schemes import cvxpy/scipy only when used; torch is imported only by the
``select_batch`` methods.

Words: the *draft tuple* (draft tokens X_1..X_K) is what a plan selects among; the *draft
distributions* q_i are where they were drawn from (``select_batch`` takes both: ``drafts
[B, K, n]`` and ``tokens [B, K]``); a selection's *selected* draft is the one tested against p,
*accepted* when the output token is one of the drafts.

>>> from multidraft.theory import IID
>>> law = IID(["1/3", "1/3", "1/3"], k=2)
>>> [name for name in schemes_for(law)]
['specinfer', 'spectr', 'is-lp', 'truncated-lp', 'multistage', 'optimal']
>>> get_scheme("specinfer").acceptance(["1/3", "1/6", "1/2"], law, exact=True)
Fraction(8, 9)
"""

from __future__ import annotations

from multidraft.schemes.base import SCHEMES, Capabilities, Plan, Scheme, Selection
from multidraft.schemes.deterministic import DeterministicSet
from multidraft.schemes.greedy import GreedyVerifier
from multidraft.schemes.is_lp import ImportanceLP
from multidraft.schemes.multistage import Multistage
from multidraft.schemes.optimal import Optimal
from multidraft.schemes.rrs_wor import RRSWithoutReplacement
from multidraft.schemes.single import Single
from multidraft.schemes.specinfer import SpecInfer
from multidraft.schemes.spectr import SpecTr
from multidraft.schemes.truncated_lp import TruncatedLP
from multidraft.theory.laws import check_law

__all__ = [
    "Scheme",
    "Plan",
    "Capabilities",
    "Selection",
    "SCHEMES",
    "get_scheme",
    "register_scheme",
    "schemes_for",
    "Single",
    "SpecInfer",
    "RRSWithoutReplacement",
    "SpecTr",
    "ImportanceLP",
    "TruncatedLP",
    "Multistage",
    "Optimal",
    "DeterministicSet",
    "GreedyVerifier",
]

SCHEMES.update(
    (cls.name, cls)
    for cls in (
        Single,
        SpecInfer,
        RRSWithoutReplacement,
        SpecTr,
        ImportanceLP,
        TruncatedLP,
        Multistage,
        Optimal,
        DeterministicSet,
        GreedyVerifier,
    )
)


def get_scheme(name: str, **options: object) -> Scheme:
    """The scheme registered as ``name``, built with its ``options`` (exact names only).

    >>> get_scheme("truncated-lp", s=10)
    TruncatedLP(s=10, rank_key='published')
    >>> get_scheme("rrs")
    Traceback (most recent call last):
    ...
    ValueError: scheme: unknown name 'rrs'; choose one of single, specinfer, rrs-wor, spectr, is-lp, truncated-lp, multistage, optimal, deterministic, greedy
    """
    if name not in SCHEMES:
        raise ValueError(f"scheme: unknown name {name!r}; choose one of {', '.join(SCHEMES)}")
    try:
        return SCHEMES[name](**options)
    except TypeError:
        raise ValueError(f"scheme {name!r}: unknown options {sorted(options)}") from None


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Add a :class:`Scheme` subclass to :data:`SCHEMES` under its ``name`` (after the built-in
    ones); returns the class, so it can decorate one. Its ``capabilities`` are checked here.

    >>> register_scheme(get_scheme("single"))
    Traceback (most recent call last):
    ...
    TypeError: scheme: expected a Scheme subclass, got Single
    """
    if not (isinstance(cls, type) and issubclass(cls, Scheme)):
        raise TypeError(f"scheme: expected a Scheme subclass, got {type(cls).__name__}")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name == "all":
        raise ValueError(f"scheme: {cls.__name__} needs a registry name (a non-empty string other than 'all'), got {name!r}")
    if not isinstance(getattr(cls, "capabilities", None), Capabilities):
        raise ValueError(f"scheme {name!r}: capabilities must be a Capabilities value")
    if name in SCHEMES and SCHEMES[name] is not cls:
        raise ValueError(f"scheme: the name {name!r} is taken by {SCHEMES[name].__name__}")
    SCHEMES[name] = cls
    return cls


def schemes_for(law) -> list[str]:
    """Names of the registered schemes that apply to ``law`` (by law class and K), in
    registry order."""
    check_law(law)
    return [name for name, cls in SCHEMES.items() if cls.supports_law(type(law), law.k)]
