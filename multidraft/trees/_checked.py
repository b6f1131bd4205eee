"""A draft tree's rows validated once per tree (issue 30, item 5).

The verifiers read each inner node's target p(· | v) and draft q(· | v) through the validating
constructors -- :meth:`~multidraft.theory.laws.DraftLaw.check_target` and the draft law's own
(:func:`~multidraft.trees.token.node_law`) -- which check every entry (non-negative, finite,
summing to one within rounding) and rescale by the sum: O(n) per row, the same work for every
verifier and every call on one tree. :class:`CheckedRows` keeps what those constructors
returned, per node, for the tree's lifetime: the first use validates (and raises on a bad row,
keeping nothing), later uses read the validated row and law. The values are the constructors'
own, so every number computed from them is the same, bit for bit.

Only a row a validating constructor returned is ever kept, so no caller reaches a scheme with
rows nobody checked; the verifiers hand kept rows to
:meth:`~multidraft.schemes.Scheme._prepare_checked`, which skips the second check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["CheckedRows"]

T = TypeVar("T")


class CheckedRows:
    """Mixin of the draft trees: :meth:`checked`, values built once per tree from its rows.

    The trees are frozen dataclasses; the memo lives in the instance ``__dict__`` (as
    ``functools.cached_property`` does), keyed by the caller (e.g. ``("token", node)``)."""

    def checked(self, key: object, build: Callable[[], T]) -> T:
        """``build()`` for ``key``, computed on first use and kept with the tree; ``build`` must
        return only what validating constructors returned (a checked target, a draft law).
        Nothing is kept when ``build`` raises, so a bad row raises at every use."""
        memo = self.__dict__.setdefault("_checked_rows", {})
        if key not in memo:
            memo[key] = build()
        return memo[key]
