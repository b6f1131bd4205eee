"""The registry of draft laws by kind (``law.name``): :data:`LAWS`, :func:`law_class`, :func:`law_for`."""

from __future__ import annotations

from collections.abc import Sequence

from multidraft.theory.laws._deterministic import Deterministic
from multidraft.theory.laws._law_base import DraftLaw
from multidraft.theory.laws._laws import IID, Greedy, Independent, WithoutReplacement

__all__ = ["LAWS", "law_class", "law_for"]


#: The draft-law classes by kind (``law.name``), in the order the command line lists them.
LAWS: dict[str, type[DraftLaw]] = {cls.name: cls for cls in (IID, WithoutReplacement, Greedy, Independent, Deterministic)}


def law_class(kind: str) -> type[DraftLaw]:
    """The draft-law class of ``kind`` (a key of :data:`LAWS`).

    >>> law_class("wor").__name__
    'WithoutReplacement'
    >>> law_class("uniform")
    Traceback (most recent call last):
    ...
    ValueError: law: unknown draft law 'uniform'; choose one of iid, wor, greedy, independent, deterministic
    """
    if kind not in LAWS:
        raise ValueError(f"law: unknown draft law {kind!r}; choose one of {', '.join(LAWS)}")
    return LAWS[kind]


def law_for(kind: str, drafts: Sequence[object], k: int | None = None, *, normalize: bool = False) -> DraftLaw:
    """The draft law of ``kind`` over the draft distributions ``drafts`` of the K drafts.

    ``k`` defaults to ``len(drafts)``. A law of one shared draft distribution (iid, wor,
    greedy) reads the first; :class:`Independent` takes one per draft (one repeated K times
    when a single one is given with ``k``). The deterministic law is built from token ids,
    ``Deterministic(tokens, n)``, not from distributions.

    >>> law_for("iid", [[0.5, 0.5]], k=3)
    IID(n=2, k=3)
    >>> law_for("independent", [[0.5, 0.5], [0.9, 0.1]])
    Independent(n=2, k=2)
    """
    return law_class(kind).from_drafts(drafts, k, normalize=normalize)
