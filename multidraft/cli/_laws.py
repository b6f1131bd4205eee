"""The draft law described by the ``--draft``/``--k``/``--law`` options shared by sub-commands."""

from __future__ import annotations

#: Values of ``--law``.
LAWS = ("iid", "wor", "greedy", "independent")


def build_law(draft_texts: list[str], k: int | None, law: str | None):
    """The draft law described by the ``--draft``/``--k``/``--law`` options."""
    from multidraft.theory import IID, Greedy, Independent, WithoutReplacement, parse_distribution

    drafts = [parse_distribution(text, "draft" if len(draft_texts) == 1 else f"draft[{i}]") for i, text in enumerate(draft_texts)]
    if len(drafts) > 1:
        if law not in (None, "independent"):
            raise ValueError(f"law: repeated --draft means independent drafts, not {law!r}")
        if k is not None and k != len(drafts):
            raise ValueError(f"k: --k {k} does not match the {len(drafts)} drafts given")
        return Independent(drafts)
    if k is None:
        raise ValueError("k: a single --draft needs --k (the number of drafts)")
    law = law or "iid"
    if law == "independent":
        from multidraft.theory.laws import check_k

        return Independent(drafts * check_k(k))
    return {"iid": IID, "wor": WithoutReplacement, "greedy": Greedy}[law](drafts[0], k)
