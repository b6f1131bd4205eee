"""Token-level selection schemes of multi-draft speculative sampling, one module each, one
interface (:class:`Scheme`): exact acceptance, exact output distribution (the proof of
losslessness for a case), a numpy sampler and, where provided, a batched torch sampler.

Registered by name (``get_scheme``): ``single``, ``specinfer``, ``rrs-wor``, ``spectr``,
``is-lp``, ``truncated-lp`` (options ``s``, ``rank_key``), ``multistage`` (option ``s``),
``optimal``, ``deterministic``, ``greedy``. The LP-based schemes import cvxpy/scipy only when
used; torch is imported only by the ``select_batch`` methods.

>>> from multidraft.theory import IID
>>> law = IID(["1/3", "1/3", "1/3"], k=2)
>>> [name for name in schemes_for(law)]
['specinfer', 'spectr', 'is-lp', 'truncated-lp', 'multistage', 'optimal']
>>> get_scheme("specinfer").acceptance(["1/3", "1/6", "1/2"], law, exact=True)
Fraction(8, 9)
"""

from __future__ import annotations

from multidraft.schemes.base import Scheme, Selection
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

__all__ = [
    "Scheme",
    "Selection",
    "SCHEMES",
    "get_scheme",
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

#: Scheme classes by registry name.
SCHEMES: dict[str, type[Scheme]] = {
    cls.name: cls
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
}


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


def schemes_for(law) -> list[str]:
    """Names of the registered schemes that apply to ``law`` (by law name and K), in
    registry order."""
    return [name for name, cls in SCHEMES.items() if cls().supports(law)]
