"""The draft law described by the ``--draft``/``--k``/``--law`` options shared by sub-commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence


class LazyChoices(Sequence):
    """The ``choices`` of an option, computed on first use (when the option is given or help is
    shown), so that building the parser imports nothing of the library."""

    def __init__(self, items: Callable[[], Sequence[str]]) -> None:
        self._make = items
        self._items: tuple[str, ...] | None = None

    def _all(self) -> tuple[str, ...]:
        if self._items is None:
            self._items = tuple(self._make())
        return self._items

    def __getitem__(self, index):
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __contains__(self, value: object) -> bool:
        return value in self._all()


def _law_kinds() -> tuple[str, ...]:
    from multidraft.theory.laws import LAWS

    return tuple(kind for kind, cls in LAWS.items() if cls.takes_distributions)


#: Values of ``--law``: the kinds of draft law built from draft distributions.
LAWS = LazyChoices(_law_kinds)


def build_law(draft_texts: list[str], k: int | None, law: str | None):
    """The draft law described by the ``--draft``/``--k``/``--law`` options: one ``--draft``
    and ``--k`` for a law of one draft distribution (default iid), repeated ``--draft`` for
    independent drafts (:func:`~multidraft.theory.laws.law_for`)."""
    from multidraft.theory import parse_distribution

    drafts = [parse_distribution(text, "draft" if len(draft_texts) == 1 else f"draft[{i}]") for i, text in enumerate(draft_texts)]
    return law_from_drafts(drafts, k, law)


def law_from_drafts(drafts: list, k: int | None, law: str | None, flag: str = "--draft", given: str = "repeated --draft means"):
    """The draft law of parsed draft distributions: one (given by one ``flag``) and ``k`` for a
    law of one draft distribution (default iid), several (``given`` says how they
    were given) for independent drafts."""
    from multidraft.theory import IID, Independent
    from multidraft.theory.laws import law_class

    several = len(drafts) > 1
    cls = law_class(law) if law is not None else Independent if several else IID
    if several:
        if not cls.one_distribution_per_draft:
            raise ValueError(f"law: {given} independent drafts, not {law!r}")
        if k is not None and k != len(drafts):
            raise ValueError(f"k: --k {k} does not match the {len(drafts)} drafts given")
    elif k is None:
        raise ValueError(f"k: a single {flag} needs --k (the number of drafts)")
    return cls.from_drafts(drafts, k)
